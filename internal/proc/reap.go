package proc

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/service"
)

// reaper reaps zombie orphans and kills leftovers of ended trees, on SIGCHLD
// and on a slow tick.
func (s *Supervisor) reaper() {
	defer s.wg.Done()
	// At the wall clock's multiples of reapInterval, as the router's and
	// the daemon's health check: an idle daemon wakes once for the three.
	every := s.reapEvery // set before the reaper starts
	tick := time.NewTimer(service.UntilAligned(every))
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.sigch:
			s.mu.Lock()
			s.scanLocked(nil, false)
			s.mu.Unlock()
		case <-tick.C:
			tick.Reset(service.UntilAligned(every))
			// Every thread's children, in case a kernel reparents orphans
			// to another thread than the main one.
			s.mu.Lock()
			s.scanLocked(nil, true)
			if !s.orphansSeen {
				s.watchLocked(false)
			}
			s.orphansSeen = false
			s.mu.Unlock()
		}
	}
}

// watchLocked turns the delivery of SIGCHLD to the reaper on or off (see
// Supervisor.watching). Turned on, it also queues a scan: an orphan that
// died before the delivery began sent its signal to nobody.
func (s *Supervisor) watchLocked(on bool) {
	if on == s.watching || s.closed {
		return
	}
	s.watching = on
	if !on {
		signal.Stop(s.sigch)
		return
	}
	signal.Notify(s.sigch, unix.SIGCHLD)
	select {
	case s.sigch <- unix.SIGCHLD:
	default: // a scan is queued already
	}
}

// execGrace is how long an empty environment is taken for an execve in
// progress (the new image's environment is not visible until the kernel has
// set up its stack) rather than a process that really has none.
const execGrace = 50 * time.Millisecond

// killState is what one tree's end has killed so far.
type killState struct {
	killed   map[int]uint64 // pid -> start time, until it is dead
	sessions map[int]bool   // sessions (other than ours) that a killed tree process was in
	empty    map[int]emptyEnv
	noGroup  bool // the leader's pid, and so its group id, can no longer be trusted
}

type emptyEnv struct {
	start uint64
	since time.Time
}

func newKillState() *killState {
	return &killState{killed: make(map[int]uint64), sessions: make(map[int]bool)}
}

// execPending reports whether a child whose environment reads empty should
// be looked at again.
func (k *killState) execPending(pid int, start uint64) bool {
	if k.empty == nil {
		k.empty = make(map[int]emptyEnv)
	}
	e, seen := k.empty[pid]
	if !seen || e.start != start {
		k.empty[pid] = emptyEnv{start: start, since: time.Now()}
		return true
	}
	return time.Since(e.since) < execGrace
}

// walkReq is one tree end's request for a walk of our children (walkFor).
type walkReq struct {
	t    *Tree
	k    *killState
	slow bool      // walk every thread's children
	done bool      // a walk served it; guarded by s.mu
	res  walkAgain // what that walk found; guarded by s.mu
}

// walkFor walks our children for the end of t, and says why to walk again.
// Trees that end together (a daemon's stop ends hundreds) share walks:
// whoever gets s.mu walks for every request made before it did, and the
// requests it served take their answer without walking. With a walk each,
// the ends of 200 trees waited for s.mu for most of a daemon's stop.
func (s *Supervisor) walkFor(t *Tree, k *killState, slow bool) walkAgain {
	r := &walkReq{t: t, k: k, slow: slow}
	s.pendMu.Lock()
	s.pending = append(s.pending, r)
	s.pendMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !r.done {
		s.pendMu.Lock()
		reqs := s.pending
		s.pending = nil
		s.pendMu.Unlock()
		all := false
		for _, q := range reqs {
			all = all || q.slow
		}
		s.scanLocked(reqs, all)
		s.walks.Add(1)
	}
	return r.res
}

// scanLocked walks our direct children once. It reaps zombies that are not
// leaders and not in our process group, kills children that belong to the
// trees of reqs (none for the reaper's walks) and kills leftovers of our
// trees that have ended. It answers each request (walkReq.res): live
// processes of its tree (wait for them to die), and processes that died
// during the walk (their children became ours: walk again at once). s.mu
// must be held.
func (s *Supervisor) scanLocked(reqs []*walkReq, allThreads bool) {
	ownPgid, ownSid := unix.Getpgrp(), 0
	if sid, err := unix.Getsid(0); err == nil {
		ownSid = sid
	}
	// Whose is a process: by its group (a tree's leader's pid, while it
	// can be trusted), by a session a killed process of the tree was in,
	// by its marker.
	var byGroup map[int]*walkReq
	var byID map[string]*walkReq
	var bySession map[int][]*walkReq // kept up to date as this walk kills
	if len(reqs) > 0 {
		byGroup, byID = make(map[int]*walkReq, len(reqs)), make(map[string]*walkReq, len(reqs))
		bySession = make(map[int][]*walkReq)
		for _, r := range reqs {
			r.res = walkAgain{}
			if !r.k.noGroup {
				byGroup[r.t.pid] = r
			}
			byID[r.t.id] = r
			for sid := range r.k.sessions {
				bySession[sid] = append(bySession[sid], r)
			}
		}
	}
	// kill kills a child of the trees of owners: each of them waits for it
	// and learns its session, as a walk for that tree alone would have.
	kill := func(pid int, st procStat, owners []*walkReq) {
		_ = unix.Kill(pid, unix.SIGKILL)
		for _, r := range owners {
			r.k.killed[pid] = st.start
			if st.sid != ownSid && !r.k.sessions[st.sid] {
				r.k.sessions[st.sid] = true
				bySession[st.sid] = append(bySession[st.sid], r)
			}
			r.res.dying++
		}
	}
	var owners []*walkReq
	var err error
	s.pids, s.buf, err = listChildren(s.pids[:0], s.buf, s.pid, allThreads)
	if err != nil {
		s.log.Error("list children", zap.Error(err))
	}
	orphans := false
	defer func() {
		// Whatever this scan did with them, orphans are ours now: reap
		// the next ones as they die.
		if orphans {
			s.orphansSeen = true
			s.watchLocked(true)
		}
	}()
	for _, pid := range s.pids {
		if _, ok := s.leaders[pid]; ok {
			continue
		}
		var st procStat
		st, s.buf, err = readStat(pid, s.buf)
		if err != nil || st.pgid == ownPgid {
			continue // gone, or an os/exec child: not ours to wait for
		}
		orphans = true
		if st.dead() && s.reapLocked(pid) {
			// Its children were reparented to us as it died, possibly after
			// the list was read: walk again. Whose it was is gone with it.
			for _, r := range reqs {
				r.res.now++
			}
			continue
		}
		// Alive, or a zombie main thread whose process lives on in its
		// other threads (its marker is unreadable then; its group and
		// session are not): whose it is decides below.
		// In a tree's group, or in a session that one of its processes
		// created (even if it dropped the marker).
		owners = owners[:0]
		if r := byGroup[st.pgid]; r != nil {
			owners = append(owners, r)
		}
		for _, r := range bySession[st.sid] {
			if !slices.Contains(owners, r) {
				owners = append(owners, r)
			}
		}
		if len(owners) > 0 && len(reqs) == 1 {
			kill(pid, st, owners)
			continue
		}
		var val []byte
		var ok bool
		var size int
		val, ok, size, s.buf = readEnvVar(pid, MarkerEnv, s.buf)
		if len(owners) > 0 {
			// Its marker may name another tree of this walk, which waits
			// for it too.
			if ok {
				if owner, inst, id, mok := parseMarker(val); mok && string(owner) == s.owner && string(inst) == s.instance {
					if r := byID[string(id)]; r != nil && !slices.Contains(owners, r) {
						owners = append(owners, r)
					}
				}
			}
			kill(pid, st, owners)
			continue
		}
		if !ok {
			if size == 0 {
				for _, r := range reqs {
					if r.k.execPending(pid, st.start) {
						r.res.dying++ // probably mid-execve: look again in a while
					}
				}
			}
			continue // not from a tree (say, a daemonised `git gc --auto`): reaped once it exits
		}
		owner, inst, id, ok := parseMarker(val)
		if !ok || string(owner) != s.owner || string(inst) != s.instance {
			continue
		}
		if r := byID[string(id)]; r != nil {
			kill(pid, st, append(owners[:0], r))
			continue
		}
		if other := s.trees[string(id)]; other == nil || other.exited.Load() {
			if other != nil && other.kill != nil {
				// Its tree is still ending: its end waits for this process
				// too, and learns its session, as its own walk would have.
				_ = unix.Kill(pid, unix.SIGKILL)
				other.kill.killed[pid] = st.start
				if st.sid != ownSid {
					other.kill.sessions[st.sid] = true
				}
				continue
			}
			s.killLeftoverLocked(pid, st.start, string(id))
		}
	}
	for _, r := range reqs {
		s.checkKilledLocked(r)
		r.done = true
	}
}

// checkKilledLocked looks at the processes r's tree has killed: those dead
// are reaped and forgotten, and make r walk again at once; those alive make
// it wait.
func (s *Supervisor) checkKilledLocked(r *walkReq) {
	var err error
	for pid, start := range r.k.killed {
		var st procStat
		st, s.buf, err = readStat(pid, s.buf)
		switch {
		case err != nil || st.start != start:
			// Reaped (by the reaper) after the walk above, so its children
			// may not have been in it: walk again.
			delete(r.k.killed, pid)
			r.res.now++
		case st.dead() && s.reapLocked(pid): // likewise
			delete(r.k.killed, pid)
			r.res.now++
		default:
			r.res.dying++
			if r.res.wait == 0 {
				r.res.wait = pid
			}
		}
	}
}

// walkAgain is why a tree's end walks our children again.
type walkAgain struct {
	dying int // processes of the tree killed and not dead yet, or mid-execve
	now   int // processes of the tree that died during the walk: their children became ours
	wait  int // a killed process not dead yet (0: none), to wait for
}

func (w walkAgain) total() int { return w.dying + w.now }

// killLeftoverLocked kills a process of an ended tree. It is logged once:
// every scan until the process is dead and reaped sees it again.
func (s *Supervisor) killLeftoverLocked(pid int, start uint64, tree string) {
	if prev, seen := s.leftovers[pid]; !seen || prev != start {
		s.leftovers[pid] = start
		s.log.Info("killing leftover of an ended tree", zap.String("tree", tree), zap.Int("pid", pid))
	}
	_ = s.kill(pid, unix.SIGKILL)
}

// reapLocked reaps a zombie child that is not a leader and not in our
// process group, and reports whether it is gone. It is not when its main
// thread exited while other threads run: /proc says zombie, but the process
// lives until they end, and is not reapable before. s.mu must be held (see
// Supervisor.mu).
func (s *Supervisor) reapLocked(pid int) bool {
	var ws unix.WaitStatus
	for {
		wpid, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err == nil && wpid == 0:
			return false
		}
		delete(s.leftovers, pid)
		return true // reaped, or not ours to wait for (gone)
	}
}

// SweepOrphans kills the processes that an earlier daemon with the same
// owner left behind (found by their marker, never by a recorded pid, so a
// reused pid is never hit) and returns how many. It also ends leftovers of
// this Supervisor's ended trees. A tree whose daemon still runs is never
// touched, whatever happened to the state dir's lock: it is logged instead.
// The daemon calls it once at start, before starting sessions; it returns
// once the killed processes are dead.
func (s *Supervisor) SweepOrphans() (int, error) {
	warned := map[string]bool{}
	buf := make([]byte, 0, 512)
	n, err := s.killMarked(func(owner, inst, id []byte) bool {
		if string(owner) != s.owner {
			return false
		}
		if string(inst) != s.instance {
			if !instanceAlive(inst, buf) {
				return true
			}
			if !warned[string(inst)] {
				warned[string(inst)] = true
				s.log.Error("processes of another live swarmd on this state dir: not touching them",
					zap.String("instance", string(inst)))
			}
			return false
		}
		s.mu.Lock()
		t := s.trees[string(id)]
		s.mu.Unlock()
		return t == nil || t.exited.Load()
	})
	if err != nil {
		return n, fmt.Errorf("proc: sweep orphans: %w", err)
	}
	return n, nil
}

// killMarked scans all of /proc, SIGKILLs every process whose marker match
// accepts, and repeats until a scan finds nothing new and everything killed
// is dead (their children may have forked just before the kill). It is the
// slow path: every process's environment is read.
func (s *Supervisor) killMarked(match func(owner, inst, id []byte) bool) (int, error) {
	killed := make(map[int]uint64)
	alive := make(map[int]uint64)
	buf := make([]byte, 0, 8192)
	deadline := time.Now().Add(killTimeout)
	backoff := newBackoff()
	confirmed := false
	for {
		pids, err := s.fullScan()
		if err != nil {
			return len(killed), err
		}
		found := 0
		unsure := false // a process whose environment read empty may be mid-execve
		for _, pid := range pids {
			var val []byte
			var ok bool
			var size int
			val, ok, size, buf = readEnvVar(pid, MarkerEnv, buf)
			if !ok {
				if size == 0 && !unsure {
					unsure = maybeExecing(pid, buf)
				}
				continue
			}
			owner, inst, id, ok := parseMarker(val)
			if !ok || !match(owner, inst, id) {
				continue
			}
			tree := string(id) // a copy: id is in buf, which readStat reuses
			var st procStat
			st, buf, err = readStat(pid, buf)
			if err != nil || st.dead() {
				continue
			}
			if prev, seen := killed[pid]; !seen || prev != st.start {
				s.log.Info("killing marked process", zap.Int("pid", pid), zap.String("tree", tree))
				killed[pid] = st.start
				found++
			}
			_ = unix.Kill(pid, unix.SIGKILL)
			alive[pid] = st.start
		}
		for pid, start := range alive {
			st, b, err := readStat(pid, buf)
			buf = b
			if err != nil || st.start != start || st.dead() {
				delete(alive, pid)
			}
		}
		if found == 0 && len(alive) == 0 {
			// A process in the middle of an execve shows no environment
			// for a moment: when a scan saw one that may be, only a second
			// clean scan after that is final. Kernel threads and zombies
			// read empty for good, and a clean scan without any other is
			// final at once: a daemon's start, which sweeps, does not wait
			// out the grace for nothing.
			if confirmed || !unsure {
				return len(killed), nil
			}
			confirmed = true
			s.graces.Add(1)
			time.Sleep(execGrace)
			continue
		}
		confirmed = false
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("%d killed processes still alive after %s", len(alive), killTimeout)
		}
		backoff.wait()
	}
}

// fullScan lists the processes killMarked reads.
func (s *Supervisor) fullScan() ([]int, error) {
	if s.listAll != nil {
		return s.listAll()
	}
	return allPids()
}

// maybeExecing reports whether pid, whose environment read empty, may be a
// process in the middle of an execve: not a kernel thread, not a zombie,
// not gone.
func maybeExecing(pid int, buf []byte) bool {
	st, _, err := readStat(pid, buf)
	return err == nil && !st.kthread && !st.dead()
}

// backoff paces polling for processes to die: they usually take tens of
// microseconds, so start small.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 50 * time.Microsecond} }

func (b *backoff) wait() {
	time.Sleep(b.d)
	b.next()
}

func (b *backoff) next() { b.d = min(b.d*2, 10*time.Millisecond) }

// waitExit waits for the killed process pid (0: none) to exit, or for the
// backoff's time. A sleep alone is not enough here: the
// daemon's timer slack (limits.daemon_timer_slack) lets the kernel wake a
// 50 µs sleep 5 ms late, and with two hundred trees ending at once (a
// daemon's stop) those late walks were a third of the stop. The exit is
// seen on a pidfd through the runtime's poller, which no slack delays. A pid
// reused between the walk and the open only makes the wait its full time.
func (b *backoff) waitExit(pid int) {
	defer b.next()
	if pid == 0 || !waitPidfd(pid, b.d) {
		time.Sleep(b.d)
	}
}

// waitPidfd waits up to d for pid to exit, and reports false when it cannot
// wait that way (no pidfds before Linux 5.3, or not pollable).
func waitPidfd(pid int, d time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return true // gone already: walk again now
	}
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	if f.SetReadDeadline(time.Now().Add(d)) != nil {
		return false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	// Readable once the process has exited; the read callback is called
	// again while it is not, until the deadline.
	_ = rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err != nil || n > 0
	})
	return true
}

// KillInstance kills every process marked by the supervisor of owner and
// instance (Supervisor.Instance), and returns how many once they are dead:
// what a process apart from the daemon (the lease guard) uses to end the
// daemon's trees where there are no cgroups.
func KillInstance(owner, instance string, log *zap.Logger) (int, error) {
	if log == nil {
		log = zap.NewNop()
	}
	s := &Supervisor{log: log}
	n, err := s.killMarked(func(o, inst, _ []byte) bool { return string(o) == owner && string(inst) == instance })
	if err != nil {
		return n, fmt.Errorf("proc: kill the trees of %s: %w", instance, err)
	}
	return n, nil
}
