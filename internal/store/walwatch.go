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

// FileWatch tells that files of a directory were written. In WAL mode every
// commit appends to the database's -wal file (and a checkpoint rewrites the
// database), ours and other processes' alike (WAL needs them all on this
// host, so inotify sees each one): the store's checkpoints follow the WAL's
// writes with it, and the router wakes on another process's commit. It only
// shortens a wait: both keep a slow poll for file systems without events.
type FileWatch struct {
	// C receives, coalesced, after a write to one of the names; once when
	// the watch starts, for what was written before it. It is closed if
	// the watch fails, so that the reader falls back to polling.
	C     <-chan struct{}
	c     chan struct{}
	f     *os.File
	names [][]byte
	done  chan struct{}
	once  sync.Once
}

// WatchFiles watches dir for writes to the files named (base names). An
// error means no inotify here (the caller polls instead).
func WatchFiles(dir string, names ...string) (*FileWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify init: %w", err)
	}
	if dir == "" {
		dir = "."
	}
	// The directory, not the files: they are created, and may be
	// recreated, after the watch starts.
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MODIFY|unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	c := make(chan struct{}, 1)
	w := &FileWatch{
		C: c,
		c: c,
		// Non-blocking in an *os.File: reads wait in the runtime's poller,
		// no thread is held, and Close ends a pending Read.
		f:    os.NewFile(uintptr(fd), "inotify"),
		done: make(chan struct{}),
	}
	for _, n := range names {
		w.names = append(w.names, []byte(n))
	}
	c <- struct{}{} // what was written before the watch
	go w.loop()
	return w, nil
}

// WatchDatabase watches the SQLite database at path: its WAL, which every
// commit writes, and the file itself, which a checkpoint rewrites.
func WatchDatabase(path string) (*FileWatch, error) {
	dir, base := filepath.Split(path)
	return WatchFiles(dir, base+"-wal", base)
}

func (w *FileWatch) loop() {
	defer close(w.done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				close(w.c)
			}
			return
		}
		if w.relevant(buf[:n]) {
			select {
			case w.c <- struct{}{}:
			default: // a signal is pending already
			}
		}
	}
}

// relevant reports whether b holds an event on one of the names, or an
// overflow of the event queue (which may have dropped one).
func (w *FileWatch) relevant(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return true // cannot happen; look rather than miss a write
		}
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			return true
		}
		name := bytes.TrimRight(b[unix.SizeofInotifyEvent:end], "\x00")
		for _, n := range w.names {
			if bytes.Equal(name, n) {
				return true
			}
		}
		b = b[end:]
	}
	return false
}

// Close stops the watch and waits for its goroutine.
func (w *FileWatch) Close() {
	w.once.Do(func() {
		w.f.Close()
		<-w.done
	})
}
