package logs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// A session's outcome is appended to its own log as one line when the
// session ends, before swarmd records it in the store: if the daemon dies
// before the store has it, restart recovery finds it there (ReadOutcome)
// and applies it. The log is the session's own file, already open for
// appends, so this costs one write and no new file per session.

// outcomeMarker starts the line; the JSON object follows it.
const outcomeMarker = "=== swarmd outcome "

// outcomeTail is how much of the end of a log ReadOutcome reads: the
// outcome is the last line swarmd writes to it.
const outcomeTail = 1 << 20

// ErrOutcomeTooLong: an outcome record with a newline, or over outcomeTail.
var ErrOutcomeTooLong = errors.New("outcome record too long or not one line")

// AppendOutcome appends the one-line record rec (JSON, no newline) to the
// log at path, creating it if the session never wrote one.
func AppendOutcome(path string, rec []byte) error {
	if len(rec)+len(outcomeMarker)+2 > outcomeTail || bytes.IndexByte(rec, '\n') >= 0 {
		return fmt.Errorf("append outcome to %s: %w", path, ErrOutcomeTooLong)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	line := make([]byte, 0, len(outcomeMarker)+len(rec)+2)
	line = append(append(append(append(line, '\n'), outcomeMarker...), rec...), '\n')
	_, err = f.Write(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadOutcome returns the last outcome record appended to the log at path;
// ok is false when it has none (the daemon died before the session ended,
// or before its outcome was written) or does not exist.
func ReadOutcome(path string) (rec []byte, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	off := max(fi.Size()-outcomeTail, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	i := bytes.LastIndex(buf, []byte("\n"+outcomeMarker))
	if i < 0 {
		return nil, false, nil
	}
	line := buf[i+1+len(outcomeMarker):]
	end := bytes.IndexByte(line, '\n')
	if end < 0 {
		return nil, false, nil // cut short by a crash mid-write: no record
	}
	return bytes.Clone(line[:end]), true, nil
}
