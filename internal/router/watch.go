package router

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

// walWatcher wakes the router when another process writes the database:
// every commit in WAL mode appends to <db>-wal (or rewrites <db> after a
// checkpoint), so an inotify event on either file is the earliest sign of
// new mail. It only shortens the wait; the router's slow poll stays as the
// safety net for filesystems without inotify events.
type walWatcher struct {
	f     *os.File
	names [][]byte // base names of the database and its WAL file
	wake  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newWALWatcher(dbPath string) (*walWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("router: inotify init: %w", err)
	}
	dir, base := filepath.Split(dbPath)
	if dir == "" {
		dir = "."
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MODIFY|unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("router: inotify watch %s: %w", dir, err)
	}
	w := &walWatcher{
		// A non-blocking fd in an *os.File uses the runtime poller, so Close
		// unblocks a pending Read.
		f:     os.NewFile(uintptr(fd), "inotify"),
		names: [][]byte{[]byte(base), []byte(base + "-wal")},
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	go w.loop()
	return w, nil
}

func (w *walWatcher) loop() {
	defer close(w.done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				close(w.wake) // the router falls back to polling
			}
			return
		}
		if w.relevant(buf[:n]) {
			select {
			case w.wake <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
	}
}

// relevant reports whether any event in b names the database or its WAL.
func (w *walWatcher) relevant(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return false
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

// Close stops the watcher and waits for its goroutine.
func (w *walWatcher) Close() {
	w.once.Do(func() {
		w.f.Close()
		<-w.done
	})
}
