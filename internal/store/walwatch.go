package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// walWatch tells maintain that the WAL file was written: every commit in
// WAL mode appends to it, ours and other processes' alike (WAL needs them
// all on this host, so inotify sees each one). An idle store then does
// nothing at all, where a timer looked at the file four times a second.
type walWatch struct {
	f    *os.File
	name []byte // the WAL file's base name
	C    chan struct{}
	done chan struct{}
	once sync.Once
}

// watchWAL watches the directory of wal for writes to it. An error means
// no inotify here (the caller polls instead).
func watchWAL(wal string) (*walWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify init: %w", err)
	}
	dir, base := filepath.Split(wal)
	if dir == "" {
		dir = "."
	}
	// The directory, not the file: the WAL is created, and may be
	// recreated, after the watch starts.
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MODIFY|unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	w := &walWatch{
		// Non-blocking in an *os.File: reads wait in the runtime's poller,
		// no thread is held, and Close ends a pending Read.
		f:    os.NewFile(uintptr(fd), "inotify"),
		name: []byte(base),
		C:    make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	w.C <- struct{}{} // what was written before the watch
	go w.loop()
	return w, nil
}

// loop signals C (at most one signal pending) for each read that names the
// WAL. C is closed if the watch fails, so that the reader falls back to
// polling.
func (w *walWatch) loop() {
	defer close(w.done)
	buf := make([]byte, 16*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				close(w.C)
			}
			return
		}
		if w.relevant(buf[:n]) {
			select {
			case w.C <- struct{}{}:
			default:
			}
		}
	}
}

// relevant reports whether b holds an event on the WAL, or an overflow of
// the event queue (which may have dropped one).
func (w *walWatch) relevant(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return true // cannot happen; look rather than miss a write
		}
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			return true
		}
		if bytes.Equal(bytes.TrimRight(b[unix.SizeofInotifyEvent:end], "\x00"), w.name) {
			return true
		}
		b = b[end:]
	}
	return false
}

// Close stops the watch and waits for its goroutine.
func (w *walWatch) Close() {
	w.once.Do(func() {
		w.f.Close()
		<-w.done
	})
}
