package view

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/swarmd/swarmd/internal/logs"
)

// LogStore is where session logs are. *logs.Store satisfies it.
type LogStore interface {
	LogPath(agent string, seq uint32) string
	Sessions(agent string) ([]logs.SessionRef, error)
	Open(agent string, seq uint32) (io.ReadCloser, logs.SessionRef, error)
}

// DefaultLogPoll is how often a followed log is looked at for more output:
// the same pace as `swarmd logs -f`.
const DefaultLogPoll = 150 * time.Millisecond

// LogFollower follows an agent's log from session to session: the live log
// of a dashboard.
type LogFollower struct {
	Store LogStore
	// Current is the agent's session seq now; ok is false for an agent
	// the daemon does not run.
	Current func(agent string) (seq uint32, ok bool)
	Poll    time.Duration // 0: DefaultLogPoll
}

// LogRequest says what to follow.
type LogRequest struct {
	Agent string
	Seq   uint32 // the session to start with; 0: the latest
	// Tail, if positive, starts that many bytes before the end of the
	// first session's log (at a line start), so that a long session does
	// not flood the reader.
	Tail int64
	// Follow keeps reading as the log grows, and moves on to each new
	// session of the agent, until ctx ends. Without it Follow returns at
	// the end of the session's log.
	Follow bool
}

// ErrNoLog: the agent has no session log (yet) and the request does not
// follow.
var ErrNoLog = errors.New("no session log")

// Follow writes the logs req asks for. For each session it calls open and
// writes that session's bytes to the writer it returns, closing it when the
// session's log ends (the agent moved on to its next session, or the log
// was archived). It returns nil when ctx ends or, without Follow, at the
// end of the log.
func (f *LogFollower) Follow(ctx context.Context, req LogRequest, open func(seq uint32) (io.WriteCloser, error)) error {
	seq := req.Seq
	if seq == 0 {
		refs, err := f.Store.Sessions(req.Agent)
		if err != nil {
			return fmt.Errorf("view: log of %s: %w", req.Agent, err)
		}
		if len(refs) > 0 {
			seq = refs[len(refs)-1].Seq
		}
	}
	if seq == 0 {
		if !req.Follow {
			return fmt.Errorf("view: log of %s: %w: it has no sessions yet", req.Agent, ErrNoLog)
		}
		if seq = f.nextSession(ctx, req.Agent, 0); seq == 0 {
			return nil
		}
	}
	tail := req.Tail
	for {
		w, err := open(seq)
		if err != nil {
			return err
		}
		err = f.copySession(ctx, req.Agent, seq, tail, req.Follow, w)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil || ctx.Err() != nil || !req.Follow {
			return err
		}
		if seq = f.nextSession(ctx, req.Agent, seq); seq == 0 {
			return nil
		}
		tail = 0 // a new session is read from its start
	}
}

// copySession writes one session's log to w: all of it, or its last tail
// bytes; with follow it keeps writing until the agent's next session has a
// log or this one is archived, then writes what is left.
func (f *LogFollower) copySession(ctx context.Context, agent string, seq uint32, tail int64, follow bool, w io.Writer) error {
	path := f.Store.LogPath(agent, seq)
	file, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f.copyArchived(agent, seq, tail, w)
	}
	if err != nil {
		return fmt.Errorf("view: log of %s session %d: %w", agent, seq, err)
	}
	defer file.Close()
	if err := seekTail(file, tail); err != nil {
		return fmt.Errorf("view: log of %s session %d: %w", agent, seq, err)
	}
	buf := make([]byte, 32<<10)
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		if err := drainTo(file, w, buf); err != nil {
			return err
		}
		if !follow {
			return nil
		}
		if f.newer(agent, seq) || gone(file, path) {
			return drainTo(file, w, buf) // what was written before the switch is in file
		}
		t.Reset(f.poll())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (f *LogFollower) poll() time.Duration {
	if f.Poll > 0 {
		return f.Poll
	}
	return DefaultLogPoll
}

// copyArchived writes a session that is only in an archive.
func (f *LogFollower) copyArchived(agent string, seq uint32, tail int64, w io.Writer) error {
	rc, _, err := f.Store.Open(agent, seq)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	defer rc.Close()
	if tail <= 0 {
		_, err = io.Copy(w, rc)
		return err
	}
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("view: log of %s session %d: %w", agent, seq, err)
	}
	if int64(len(data)) > tail {
		data = data[int64(len(data))-tail:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	_, err = w.Write(data)
	return err
}

// newer: the agent has moved on to a session after seq, whose log exists.
func (f *LogFollower) newer(agent string, seq uint32) bool {
	cur, ok := f.Current(agent)
	if !ok || cur <= seq {
		return false
	}
	_, err := os.Stat(f.Store.LogPath(agent, cur))
	return err == nil
}

// nextSession waits for a session after seq with a log, and returns its
// seq, or 0 when ctx ends.
func (f *LogFollower) nextSession(ctx context.Context, agent string, seq uint32) uint32 {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-t.C:
		}
		if cur, ok := f.Current(agent); ok && cur > seq {
			if _, err := os.Stat(f.Store.LogPath(agent, cur)); err == nil {
				return cur
			}
		}
		t.Reset(f.poll())
	}
}

// seekTail positions file tail bytes before its end, at the start of a
// line; tail <= 0 leaves it at the start.
func seekTail(file *os.File, tail int64) error {
	if tail <= 0 {
		return nil
	}
	info, err := file.Stat()
	if err != nil {
		return err
	}
	if info.Size() <= tail {
		return nil
	}
	// Start just after the first newline at or past the cut (the byte
	// before the cut is looked at too, so a cut right after a newline
	// loses nothing).
	off := info.Size() - tail - 1
	buf := make([]byte, 32<<10)
	for {
		n, err := file.ReadAt(buf, off)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			_, err := file.Seek(off+int64(i)+1, io.SeekStart)
			return err
		}
		off += int64(n)
		if errors.Is(err, io.EOF) {
			_, err := file.Seek(off, io.SeekStart) // no line starts after the cut yet
			return err
		}
		if err != nil {
			return err
		}
	}
}

// drainTo copies file from its offset to its current end.
func drainTo(file *os.File, w io.Writer, buf []byte) error {
	for {
		n, err := file.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("view: read log: %w", err)
		}
	}
}

// gone: path no longer names file (the log was archived).
func gone(file *os.File, path string) bool {
	cur, err := os.Stat(path)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	open, err := file.Stat()
	return err == nil && !os.SameFile(cur, open)
}
