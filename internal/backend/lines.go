package backend

import "bytes"

// DefaultMaxLine bounds one line of a backend's output held in memory. A
// stream-json line carries whole tool results, so it is generous.
const DefaultMaxLine = 4 << 20

// LineSplitter is an io.Writer that calls fn for every complete line written
// to it, without the newline. It lets a stream parser see a session's output
// as it arrives, whatever the sizes of the reads from the pipe.
//
// A line longer than max bytes (a trailing '\r' counted) is cut to its first
// max bytes and the rest of it is dropped; otherwise a trailing '\r' is
// dropped. The slice passed to fn is valid only during the call. A
// LineSplitter is not safe for concurrent use; a session's output is written
// by one goroutine.
type LineSplitter struct {
	fn         func(line []byte)
	max        int
	buf        []byte // the current line so far
	discarding bool   // the current line was cut off: drop bytes up to its newline
}

// NewLineSplitter returns a LineSplitter that calls fn; max <= 0 means
// DefaultMaxLine.
func NewLineSplitter(max int, fn func(line []byte)) *LineSplitter {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &LineSplitter{fn: fn, max: max}
}

// Write never fails: a parser must not be able to stop a session's output.
func (l *LineSplitter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.keep(p)
			break
		}
		line := p[:i]
		p = p[i+1:]
		switch {
		case l.discarding:
			l.discarding = false
		case len(l.buf) == 0:
			l.emit(line)
		default:
			l.keep(line)
			if l.discarding {
				l.discarding = false
				continue
			}
			l.emit(l.buf)
			l.buf = l.buf[:0]
		}
	}
	return n, nil
}

// Flush passes on a last line that has no newline, and resets the splitter.
func (l *LineSplitter) Flush() {
	if !l.discarding && len(l.buf) > 0 {
		l.emit(l.buf)
	}
	l.buf = l.buf[:0]
	l.discarding = false
}

// keep adds part of a line; once the line exceeds max it is passed on cut.
func (l *LineSplitter) keep(p []byte) {
	if l.discarding {
		return
	}
	if room := l.max - len(l.buf); len(p) > room {
		l.buf = append(l.buf, p[:room]...)
		l.fn(l.buf)
		l.buf = l.buf[:0]
		l.discarding = true
		return
	}
	l.buf = append(l.buf, p...)
}

// emit passes on a complete line.
func (l *LineSplitter) emit(line []byte) {
	if len(line) > l.max {
		l.fn(line[:l.max])
		return
	}
	l.fn(bytes.TrimSuffix(line, []byte{'\r'}))
}
