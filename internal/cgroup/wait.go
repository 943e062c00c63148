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

// The looks of WaitEmpty before it watches: 50µs, doubling to 3.2ms, 6.35ms
// in all.
const (
	firstLook = 50 * time.Microsecond
	lastLook  = 3200 * time.Microsecond
)

// WaitEmpty waits until no process is left in the cgroup (Empty), or until
// deadline, and reports which. The kernel signals each change of "populated"
// in cgroup.events as a modification of the file, so a long wait is one
// inotify watch read through the runtime's poller: no thread held, and no
// read of the file every few hundred microseconds while a killed tree's
// processes die (which cost a daemon a tenth of its CPU with 90 sandboxed
// agents). ErrNoWatch means no inotify here, or that the hierarchy's
// bound on such waits (maxWatches: each holds one of the user's inotify
// instances) is reached.
//
// A short wait is a few reads first (looks), spaced from 50µs to a few
// milliseconds: most trees are empty by then, and a watch costs a short
// wait far more than it saves. Measured with a sandboxed tree (bwrap's
// init ends a millisecond or two after the leader, tearing down its
// namespaces): the kernel spaces the notifications of one cgroup's events
// file at least 10 ms apart, so the "emptied" one, following the
// "populated" one of the tree's start, came 8-15 ms after the cgroup was
// empty; and closing an inotify instance waits for a kernel grace period,
// up to 20 ms more. Each session of a sandboxed agent waited 13-17 ms for
// its own end, and ran a third as many sessions a second (BENCHMARKS.md).
func (g *Group) WaitEmpty(deadline time.Time) (bool, error) {
	if empty, err := g.Empty(); err != nil || empty {
		return empty, err
	}
	for d := firstLook; d <= lastLook && time.Now().Add(d).Before(deadline); d *= 2 {
		g.look(d)
		if empty, err := g.Empty(); err != nil || empty {
			return empty, err
		}
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
