package proc

import (
	"math"
	"runtime"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// noNice: trees keep the nice value they inherit from this process.
const noNice = math.MinInt32

// SetNice makes every tree started from now on run n (1 to 19) nice
// values below this process's priority; 0 leaves them at its own. The
// daemon's own work (recording what sessions did, claims, mail) then never
// waits for a CPU behind the processes of the trees it supervises: with
// the kernel's autogroups (one per session, as most distributions enable)
// the trees compete with the daemon alone, not with the rest of the host.
func (s *Supervisor) SetNice(n int) {
	nice := noNice
	if n > 0 {
		// The raw syscall answers 20 - nice; this process's nice does not change.
		own := 0
		if prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0); err == nil {
			own = 20 - prio
		}
		nice = min(own+n, 19)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if nice != s.nice {
		s.stopForker() // its thread runs at the old value
		s.nice = nice
	}
}

// A leader gets its nice value before it exists, not from a renice of its
// process group once it has exec'd: a child the leader forks while such a
// renice walks the group copies the old value and is missed by the walk.
// Linux's nice is per thread and a fork copies the forking thread's, so
// the leaders are forked from a thread of their own, reniced once: the
// forker. Lowering a priority needs no privilege; raising it back would, so
// the forker's thread is never given back to the runtime: it ends with the
// forker's goroutine.
type forker struct {
	req  chan forkReq
	res  chan forked
	done chan struct{} // closed as its goroutine, and with it its thread, ends
}

type forkReq struct {
	path string
	argv []string
	attr *syscall.ProcAttr
}

type forked struct {
	pid int
	err error
}

// SetTimerSlack makes every tree started from now on run with a timer
// slack of ns nanoseconds (how late the kernel may end its timed sleeps);
// 0 leaves them the one this process's threads have. The daemon raises its
// own (cmd/swarmd), and gives its trees back the one it was started with:
// an agent's test suite that sleeps a millisecond at a time must not sleep
// two. Timer slack, like nice, is a thread's, and a fork copies the
// forking thread's: with nice too, the forker's thread carries it;
// alone, the forking thread has it for the fork (forkExecSlack).
func (s *Supervisor) SetTimerSlack(ns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns != s.slack {
		s.stopForker() // its thread runs at the old value
		s.slack = ns
	}
}

// forkExec forks and execs a tree's leader at s.nice and s.slack. Called
// with mu held, so that one request at a time reaches the forker.
func (s *Supervisor) forkExec(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	switch {
	case s.nice == noNice && s.slack == 0:
		return syscall.ForkExec(path, argv, attr)
	case s.nice == noNice:
		return s.forkExecSlack(path, argv, attr)
	}
	if s.forker == nil {
		s.forker = s.startForker(s.nice, s.slack)
	}
	f := s.forker.fork(forkReq{path, argv, attr})
	return f.pid, f.err
}

// forkExecSlack forks the leader from the calling goroutine's own thread,
// its timer slack set to slack for the fork and put back after. A slack,
// unlike a lowered nice value, can be given back without privilege, so a
// tree that needs only its slack costs no hand-off to the forker's thread:
// waking that thread was two of a lone agent's fifteen context switches
// per session. The thread is locked meanwhile: no other goroutine runs on
// it at the trees' slack, and the runtime starts no thread from it. A slack
// that cannot be set is warned of and the tree started at the daemon's, as
// the forker does. Called with mu held.
func (s *Supervisor) forkExecSlack(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err == nil {
		err = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(s.slack), 0, 0, 0)
	}
	if err != nil {
		s.log.Warn("set the timer slack of trees", zap.Int("ns", s.slack), zap.Error(err))
		return syscall.ForkExec(path, argv, attr)
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	if rerr := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(own), 0, 0, 0); rerr != nil {
		// Never seen; the thread is the runtime's again only with its own
		// slack, so it ends with this goroutine instead (locked at exit).
		runtime.LockOSThread()
	}
	return pid, err
}

func (s *Supervisor) startForker(nice, slack int) *forker {
	f := &forker{req: make(chan forkReq), res: make(chan forked), done: make(chan struct{})}
	go s.runForker(f, nice, slack, nil)
	return f
}

func (f *forker) fork(r forkReq) forked {
	f.req <- r
	return <-f.res
}

// runForker serves f's requests from a thread of its own at nice (unless
// noNice) and slack (unless 0). The runtime starts no thread from a locked
// one (it asks its template thread to), so nothing else of the daemon
// inherits the values.
func (s *Supervisor) runForker(f *forker, nice, slack int, locked chan<- struct{}) {
	runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
	if locked != nil {
		close(locked)
	} else if unix.Gettid() == s.pid {
		// The main thread does not end with its goroutine (Go parks it for
		// good), and its nice value is the one ps shows for the daemon.
		// Serve from another: while this goroutine holds the main thread,
		// the runtime cannot start the next one on it.
		locked := make(chan struct{})
		go s.runForker(f, nice, slack, locked)
		<-locked
		runtime.UnlockOSThread()
		return
	}
	defer close(f.done)
	if nice != noNice {
		if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice); err != nil {
			s.log.Warn("lower the priority of trees", zap.Int("nice", nice), zap.Error(err))
		}
	}
	if slack > 0 {
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0); err != nil {
			s.log.Warn("set the timer slack of trees", zap.Int("ns", slack), zap.Error(err))
		}
	}
	for r := range f.req {
		pid, err := syscall.ForkExec(r.path, r.argv, r.attr)
		f.res <- forked{pid, err}
	}
}

// stopForker ends the forker, if any, and waits until its thread is gone.
// Called with mu held.
func (s *Supervisor) stopForker() {
	if s.forker == nil {
		return
	}
	close(s.forker.req)
	<-s.forker.done
	s.forker = nil
}
