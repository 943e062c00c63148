package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/sysfile"
)

// ErrNotStopped is returned by Freeze when a process of the tree was sent
// SIGSTOP but did not stop within freezeTimeout (it is in an uninterruptible
// sleep, or traced).
var ErrNotStopped = errors.New("proc: process did not stop")

// freezeTimeout bounds how long Freeze waits for the processes it stopped to
// show as stopped.
const freezeTimeout = 2 * time.Second

// maxWalks bounds the walks of one SignalAll: each walk after the first only
// finds processes forked in the moment before their parent got the signal.
const maxWalks = 100

// Freeze stops every process of the tree with SIGSTOP and returns once each
// is stopped (state T in /proc, or in an uninterruptible sleep with the
// SIGSTOP pending: it runs nothing before it stops), with how many it
// stopped. The processes are
// found as the tree's end finds them (see SignalAll), so a tool that moved
// to a session of its own is frozen too. After the tree has ended it
// returns os.ErrProcessDone.
func (t *Tree) Freeze() (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cg != nil {
		return t.freezeCgroup(true)
	}
	w, err := t.signalAllLocked(unix.SIGSTOP)
	if err != nil {
		return len(w.signalled), err
	}
	// A process stopped in the middle of fork() completes the fork first,
	// and a child created after the walk that looked for it is never
	// signalled (the kernel passes only group-wide signals to a child
	// being forked). Once every process found has stopped nothing forks any
	// more, so one more walk finds such children; repeat until it finds none.
	for range maxWalks {
		if err := w.waitStopped(); err != nil {
			return len(w.signalled), fmt.Errorf("proc: freeze tree %s: %w", t.id, err)
		}
		n, err := w.walk(unix.SIGSTOP)
		if err != nil {
			return len(w.signalled), fmt.Errorf("proc: freeze tree %s: %w", t.id, err)
		}
		if n == 0 {
			return len(w.signalled), nil
		}
	}
	return len(w.signalled), fmt.Errorf("proc: freeze tree %s: still finding new processes after %d walks", t.id, maxWalks)
}

// Thaw sends SIGCONT to every process of the tree, and returns how many it
// sent it to. After the tree has ended it returns os.ErrProcessDone.
func (t *Tree) Thaw() (int, error) {
	if t.cg != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.freezeCgroup(false)
	}
	return t.SignalAll(unix.SIGCONT)
}

// freezeCgroup freezes or thaws the tree's cgroup (cgroup.freeze): the
// kernel stops every process in it at once, nothing can fork its way out,
// and a thaw resumes exactly what was frozen. It returns how many
// processes the cgroup holds.
func (t *Tree) freezeCgroup(on bool) (int, error) {
	if t.reaped {
		return 0, os.ErrProcessDone
	}
	if err := t.cg.Freeze(on); err != nil {
		return 0, fmt.Errorf("proc: freeze tree %s: %w", t.id, err)
	}
	return t.cg.Procs()
}

// SignalAll sends sig to every live process of the tree, not only to its
// process group, and returns how many it signalled. A tree's processes are
// its leader's descendants, and the daemon's own children (orphans
// reparented to the subreaper) that carry the tree's marker, are in its
// process group, or are in a session that another of its processes
// created, with their descendants. The walk repeats until it finds no
// process it has not signalled: a fork that raced the signal shows up in the
// next walk. Each process is signalled through a pidfd opened after its
// start time was read, so a pid reused meanwhile is never hit. After the
// tree has ended it returns os.ErrProcessDone.
func (t *Tree) SignalAll(sig syscall.Signal) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, err := t.signalAllLocked(sig)
	return len(w.signalled), err
}

func (t *Tree) signalAllLocked(sig syscall.Signal) (*treeWalk, error) {
	w := newTreeWalk(t)
	// The leader's pid names the tree only until it is reaped; once it has
	// exited the tree is being killed anyway.
	if t.reaped || t.exited.Load() {
		return w, os.ErrProcessDone
	}
	for range maxWalks {
		n, err := w.walk(sig)
		if err != nil {
			return w, fmt.Errorf("proc: signal tree %s: %w", t.id, err)
		}
		if n == 0 {
			return w, nil
		}
	}
	return w, fmt.Errorf("proc: signal tree %s: still finding new processes after %d walks", t.id, maxWalks)
}

// treeWalk is one SignalAll: what it has signalled so far.
type treeWalk struct {
	t         *Tree
	self      int
	ownPgid   int
	ownSid    int
	buf       []byte
	pids      []int
	queue     []int
	signalled map[int]uint64 // pid -> start time
	sessions  map[int]bool   // sessions (not ours) that a process of the tree is in
	visited   map[int]bool   // pids visited in the current walk
}

func newTreeWalk(t *Tree) *treeWalk {
	w := &treeWalk{t: t, self: os.Getpid(), ownPgid: unix.Getpgrp(), buf: make([]byte, 0, 4096),
		signalled: make(map[int]uint64), sessions: make(map[int]bool), visited: make(map[int]bool)}
	if sid, err := unix.Getsid(0); err == nil {
		w.ownSid = sid
	}
	return w
}

// walk signals every process of the tree that it has not signalled yet and
// returns how many it signalled this time.
func (w *treeWalk) walk(sig syscall.Signal) (int, error) {
	clear(w.visited)
	w.queue = append(w.queue[:0], w.t.pid)
	var err error
	// Orphans are reparented to the main thread (see listChildren); a tree
	// process forked by another thread of ours is the leader.
	w.pids, w.buf, err = listChildren(w.pids[:0], w.buf, w.self, false)
	if err != nil {
		return 0, fmt.Errorf("list children: %w", err)
	}
	for _, pid := range w.pids {
		if pid != w.t.pid && w.orphanOfTree(pid) {
			w.queue = append(w.queue, pid)
		}
	}
	found := 0
	for len(w.queue) > 0 {
		pid := w.queue[len(w.queue)-1]
		w.queue = w.queue[:len(w.queue)-1]
		if w.visited[pid] {
			continue
		}
		w.visited[pid] = true
		st, live, signalled, err := w.signal(pid, sig)
		if err != nil {
			return found, fmt.Errorf("signal %d: %w", pid, err)
		}
		if !live {
			continue // gone: its children, if any, are reparented and found by the next walk
		}
		if signalled {
			found++
		}
		if st.sid != w.ownSid {
			w.sessions[st.sid] = true
		}
		w.queue, w.buf = appendThreadChildren(w.queue, w.buf, pid, st.threads)
	}
	return found, nil
}

// orphanOfTree reports whether pid, a direct child of the daemon, belongs to
// the tree: the way the tree's end recognises its processes.
func (w *treeWalk) orphanOfTree(pid int) bool {
	var st procStat
	var err error
	st, w.buf, err = readStat(pid, w.buf)
	if err != nil || st.dead() || st.pgid == w.ownPgid {
		return false // gone, or an os/exec child of the daemon
	}
	if st.pgid == w.t.pid || w.sessions[st.sid] {
		return true
	}
	var val []byte
	var ok bool
	val, ok, _, w.buf = readEnvVar(pid, MarkerEnv, w.buf)
	if !ok {
		return false
	}
	owner, inst, id, ok := parseMarker(val)
	return ok && string(owner) == w.t.s.owner && string(inst) == w.t.s.instance && string(id) == w.t.id
}

// waitStopped polls until every signalled process is stopped or gone.
func (w *treeWalk) waitStopped() error {
	deadline := time.Now().Add(freezeTimeout)
	b := newBackoff()
	for {
		left := 0
		for pid, start := range w.signalled {
			st, buf, err := readStat(pid, w.buf)
			w.buf = buf
			if err != nil || st.start != start || st.dead() || st.state == 'T' || st.state == 't' {
				continue
			}
			if st.state == 'D' && stopPending(pid) {
				continue
			}
			left++
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d of %d processes still running after %s", ErrNotStopped, left, len(w.signalled), freezeTimeout)
		}
		b.wait()
	}
}

// stopPending reports whether pid has a SIGSTOP pending. A process in an
// uninterruptible sleep stops only when it leaves it, but it runs no code of
// its own before: a vfork parent waits so, in D, for as long as its frozen
// child does not exec.
func stopPending(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	const bit = uint64(1) << (unix.SIGSTOP - 1)
	for _, key := range []string{"\nShdPnd:\t", "\nSigPnd:\t"} {
		i := bytes.Index(b, []byte(key))
		if i < 0 {
			continue
		}
		rest := b[i+len(key):]
		if j := bytes.IndexByte(rest, '\n'); j >= 0 {
			rest = rest[:j]
		}
		if v, err := strconv.ParseUint(string(rest), 16, 64); err == nil && v&bit != 0 {
			return true
		}
	}
	return false
}

// appendThreadChildren appends the children of every thread of pid: the
// kernel lists a child under the thread that forked it.
func appendThreadChildren(pids []int, buf []byte, pid, threads int) ([]int, []byte) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	if threads == 1 {
		var err error
		buf, err = sysfile.Read(dir+strconv.Itoa(pid)+"/children", buf)
		if err == nil {
			pids = appendPids(pids, buf)
		}
		return pids, buf
	}
	d, err := os.Open(dir)
	if err != nil {
		return pids, buf
	}
	tids, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return pids, buf
	}
	for _, tid := range tids {
		buf, err = sysfile.Read(dir+tid+"/children", buf)
		if err == nil {
			pids = appendPids(pids, buf)
		}
	}
	return pids, buf
}

// signal sends sig to pid unless this SignalAll has signalled it already,
// and returns its stat; live is false when it is gone. A new process is signalled
// through a pidfd opened before its start time is read, so the signal can
// only reach the process that was found, never a process that reused its
// pid meanwhile.
func (w *treeWalk) signal(pid int, sig syscall.Signal) (st procStat, live, signalled bool, err error) {
	prev, seen := w.signalled[pid]
	if seen {
		st, w.buf, err = readStat(pid, w.buf)
		if err != nil || st.dead() {
			return procStat{}, false, false, nil
		}
		if st.start == prev {
			return st, true, false, nil
		}
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		fd = -1 // a kernel before 5.3: kill(2), with the pid-reuse race
	} else if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return procStat{}, false, false, nil
		}
		return procStat{}, false, false, err
	}
	if fd >= 0 {
		defer unix.Close(fd)
	}
	st, w.buf, err = readStat(pid, w.buf)
	if err != nil || st.dead() {
		return procStat{}, false, false, nil
	}
	if fd >= 0 {
		err = unix.PidfdSendSignal(fd, sig, nil, 0)
	} else {
		err = unix.Kill(pid, sig)
	}
	switch {
	case errors.Is(err, unix.ESRCH):
		return procStat{}, false, false, nil
	case err != nil:
		return procStat{}, false, false, err
	}
	w.signalled[pid] = st.start
	return st, true, true, nil
}
