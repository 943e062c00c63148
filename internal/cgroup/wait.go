package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoWatch: the kernel would not watch the cgroup's events file, or as
// many trees' ends as may wait on inotify at once already do; the caller
// polls Empty instead.
var ErrNoWatch = errors.New("cgroup: cannot watch cgroup.events")

// WaitEmpty waits until no process is left in the cgroup (Empty), or until
// deadline, and reports which. The kernel signals each change of "populated"
// in cgroup.events as a modification of the file, so the wait is one
// inotify watch read through the runtime's poller: no thread held, and no
// read of the file every few hundred microseconds while a killed tree's
// processes die (which cost a daemon a tenth of its CPU with 90 sandboxed
// agents). ErrNoWatch means no inotify here, or that the hierarchy's
// bound on such waits (maxWatches: each holds one of the user's inotify
// instances) is reached.
func (g *Group) WaitEmpty(deadline time.Time) (bool, error) {
	if empty, err := g.Empty(); err != nil || empty {
		return empty, err
	}
	if g.watches != nil {
		select {
		case g.watches <- struct{}{}:
			defer func() { <-g.watches }()
		default:
			return false, fmt.Errorf("%w: %d trees' ends wait on inotify already", ErrNoWatch, cap(g.watches))
		}
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrNoWatch, err)
	}
	// Non-blocking in an *os.File: the read waits in the runtime's poller,
	// and its deadline ends it.
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	if _, err := unix.InotifyAddWatch(fd, filepath.Join(g.dir, "cgroup.events"), unix.IN_MODIFY); err != nil {
		return false, fmt.Errorf("%w: %w", ErrNoWatch, err)
	}
	if err := f.SetReadDeadline(deadline); err != nil {
		return false, fmt.Errorf("%w: %w", ErrNoWatch, err)
	}
	buf := make([]byte, 4*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		// Read again once watched: a change before the watch sent no event.
		if empty, err := g.Empty(); err != nil || empty {
			return empty, err
		}
		if _, err := f.Read(buf); errors.Is(err, os.ErrDeadlineExceeded) {
			return g.Empty()
		} else if err != nil {
			return false, fmt.Errorf("cgroup: watch %s: %w", g.dir, err)
		}
	}
}
