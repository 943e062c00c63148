package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/cgroup"
	"github.com/swarmd/swarmd/internal/sysfile"
)

// ExitStatus is how a tree's leader ended.
type ExitStatus struct {
	Code    int            // exit code; -1 if the leader was killed by a signal
	Signal  syscall.Signal // 0 if the leader exited normally
	Started time.Time
	Exited  time.Time // when the leader exited (its tree ended a little later)
	// With a cgroup per tree (Supervisor.UseCgroups): the whole tree's CPU
	// time, and how many of its processes the kernel killed for its memory
	// limit.
	CPU      time.Duration
	OOMKills int64
}

// String is "exit status N" or "killed by SIGNAME", as a person reads it.
func (e ExitStatus) String() string {
	if e.Signal != 0 {
		return "killed by " + SignalName(e.Signal)
	}
	return "exit status " + strconv.Itoa(e.Code)
}

// SignalName is the conventional name of sig, such as "SIGTERM".
func SignalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "signal " + strconv.Itoa(int(sig))
}

// Tree is one leader and everything it starts.
type Tree struct {
	s       *Supervisor
	id      string
	pid     int
	started time.Time
	exited  atomic.Bool // the leader has exited: whatever is left of the tree gets killed
	// kill is what the tree's end has killed so far, set as the leader
	// exits (before exited); the reaper's scans add what they kill of the
	// tree meanwhile. Its maps are guarded by the supervisor's mu.
	kill *killState

	inW     *os.File // our end of the leader's stdin, nil for /dev/null
	inDone  chan struct{}
	outR    *os.File // our end of the output pipe, nil when output is discarded
	outDone chan struct{}
	outHeld atomic.Bool // the drain deadline cut the output off

	mu     sync.Mutex
	reaped bool // the leader was reaped: its pid and pgid may belong to someone else now

	cg *cgroup.Group // the tree's own cgroup; nil without cgroups

	wrapped bool // Spec.Wrapped

	done   chan struct{}
	onDone func() // Spec.OnDone
	status ExitStatus
}

// ID is the tree's id from Spec.ID.
func (t *Tree) ID() string { return t.id }

// Pid is the leader's pid, which is also the tree's process group id.
func (t *Tree) Pid() int { return t.pid }

// Done is closed once the leader has exited, every other process of the tree
// is killed and reaped, and the output is drained.
func (t *Tree) Done() <-chan struct{} { return t.done }

// Exit is the leader's exit status; it is valid once Done is closed.
func (t *Tree) Exit() ExitStatus {
	select {
	case <-t.done:
		return t.status
	default:
		return ExitStatus{Code: -1, Started: t.started}
	}
}

// OutputCutOff reports whether the output was cut off at the drain deadline
// because a process outside the tree still held the pipe; valid after Done.
func (t *Tree) OutputCutOff() bool { return t.outHeld.Load() }

// Signal sends sig to the leader's process group, as a terminal's Ctrl-C
// would. After the tree has ended it returns os.ErrProcessDone.
func (t *Tree) Signal(sig syscall.Signal) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reaped {
		return os.ErrProcessDone
	}
	if t.wrapped {
		return t.signalInside(sig)
	}
	if err := unix.Kill(-t.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("proc: signal tree %s: %w", t.id, err)
	}
	return nil
}

// signalInside signals every process of a wrapped tree but its leader: the
// wrapper would die of it and end the tree before the command inside had
// its grace. With a cgroup the tree is its members; without, the leader's
// process group. Called with t.mu held and the leader not reaped.
func (t *Tree) signalInside(sig syscall.Signal) error {
	var pids []int
	if t.cg != nil {
		var err error
		if pids, err = t.cg.Pids(); err != nil {
			return fmt.Errorf("proc: signal tree %s: %w", t.id, err)
		}
	} else {
		all, err := allPids()
		if err != nil {
			return fmt.Errorf("proc: signal tree %s: %w", t.id, err)
		}
		buf := make([]byte, 0, 512)
		for _, pid := range all {
			var st procStat
			if st, buf, err = readStat(pid, buf); err == nil && st.pgid == t.pid {
				pids = append(pids, pid)
			}
		}
	}
	// The wrapper is the leader and its own children (a sandbox's init in
	// its pid namespace, which takes no signal it has no handler for).
	// Before the command inside exists there is nothing else: the signal
	// then goes to the leader, whose death ends the tree, as it would have
	// ended a command that never got to handle it.
	buf := make([]byte, 0, 64)
	wrapper, _ := sysfile.Read("/proc/"+strconv.Itoa(t.pid)+"/task/"+strconv.Itoa(t.pid)+"/children", buf)
	skip := appendPids([]int{t.pid}, wrapper)
	sent := 0
	for _, pid := range pids {
		if slices.Contains(skip, pid) {
			continue
		}
		if err := unix.Kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("proc: signal tree %s: %w", t.id, err)
		}
		sent++
	}
	if sent == 0 {
		if err := unix.Kill(t.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("proc: signal tree %s: %w", t.id, err)
		}
	}
	return nil
}

// Kill sends SIGKILL to the leader and its process group; once the leader is
// dead, the tree's end kills everything else (processes in other sessions
// included). After the tree has ended it returns os.ErrProcessDone.
func (t *Tree) Kill() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reaped {
		return os.ErrProcessDone
	}
	err := unix.Kill(-t.pid, unix.SIGKILL)
	// The leader may have moved to another group: kill it by pid too (it is
	// not reaped yet, so the pid is still its own).
	_ = unix.Kill(t.pid, unix.SIGKILL)
	if t.cg != nil {
		// Everything the tree started, whatever session it made for itself.
		if cerr := t.cg.Kill(); cerr != nil {
			t.s.log.Warn("kill the tree's cgroup", zap.String("tree", t.id), zap.Error(cerr))
		}
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("proc: kill tree %s: %w", t.id, err)
	}
	return nil
}

// run waits for the leader and ends the tree.
func (t *Tree) run() {
	defer t.s.wg.Done()
	s := t.s
	// Wait without reaping: until it is reaped the leader's pid, and so the
	// process group id, cannot be reused, so killing the group is safe.
	if err := t.waitExit(); err != nil {
		// Someone else reaped it (which the reaping rule forbids): its pid
		// and group id may be reused already, so only the marker may be
		// trusted from here on.
		s.log.Error("wait for tree leader", zap.String("tree", t.id), zap.Int("pid", t.pid), zap.Error(err))
		t.mu.Lock()
		t.reaped = true
		t.mu.Unlock()
	}
	exited := time.Now()
	// Ready before the tree reads as exited: from then on the reaper's scans
	// record in it what they kill of the tree (scanLocked).
	t.kill = newKillState()
	t.exited.Store(true)
	t.mu.Lock()
	if !t.reaped {
		_ = unix.Kill(-t.pid, unix.SIGKILL)
	}
	t.mu.Unlock()
	if t.cg != nil {
		_ = t.cg.Kill() // nothing of the tree outlives its leader
	}
	s.killTree(t)
	status := s.reapLeader(t)
	status.Started, status.Exited = t.started, exited
	if t.cg != nil {
		t.endCgroup(&status)
	}
	t.finishIO()
	t.status = status
	s.log.Debug("tree ended", zap.String("tree", t.id), zap.Int("pid", t.pid), zap.Stringer("status", status),
		zap.Duration("end", time.Since(exited)))
	close(t.done)
	if t.onDone != nil {
		t.onDone()
	}
}

// endCgroup records what the tree's cgroup says it cost and removes it.
func (t *Tree) endCgroup(status *ExitStatus) {
	if u, err := t.cg.Usage(); err == nil {
		status.CPU, status.OOMKills = u.CPU, u.OOMKills
	}
	if err := t.cg.Remove(); err != nil {
		t.s.log.Warn("remove the tree's cgroup", zap.String("tree", t.id), zap.Error(err))
	}
}

// waitExit returns once the leader has exited, without reaping it. It
// waits on a pidfd through the runtime's poller, so a running session holds
// no OS thread (a blocking waitid per session made the thread count grow with
// the swarm); where pidfds are missing it falls back to blocking.
func (t *Tree) waitExit() error {
	fd, err := unix.PidfdOpen(t.pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return t.waitExitBlocking()
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return t.waitExitBlocking()
	}
	var werr error
	if err := rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
		switch {
		case errors.Is(werr, unix.EINTR):
			return false
		case werr != nil:
			return true
		}
		// Linux zeroes the siginfo when nothing is waitable yet.
		return info.Signo != 0
	}); err != nil {
		return t.waitExitBlocking() // the pidfd is not pollable here
	}
	return werr
}

// waitExitBlocking is waitExit on a blocked thread.
func (t *Tree) waitExitBlocking() error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, t.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// killTree kills the tree's processes that are left once its leader has
// exited, until none is alive. With a cgroup the kernel has killed them
// all (run wrote cgroup.kill), and the end waits for the cgroup to empty.
// Without, each killed setsid process's children are reparented to us when
// it dies, so the walk repeats until a walk finds no live process and every
// process killed so far is dead and reaped.
func (s *Supervisor) killTree(t *Tree) {
	if t.cg != nil && s.waitEmpty(t) {
		s.mu.Lock()
		if !s.watching {
			// The tree's processes that were reparented to us are
			// zombies now, and no SIGCHLD brings the reaper: reap them
			// (and watch again if there were any).
			s.scanLocked(nil, false)
		}
		s.mu.Unlock()
		return
	}
	k := t.kill
	t.mu.Lock()
	k.noGroup = t.reaped
	t.mu.Unlock()
	deadline := time.Now().Add(killTimeout)
	slow := false
	b := newBackoff()
	quick := 0
	for {
		live := s.walkFor(t, k, slow)
		if live.total() == 0 {
			return
		}
		if live.dying == 0 && quick < maxQuickWalks {
			// Only processes that died during the walk: their children are
			// ours now, nothing to wait for.
			quick++
			continue
		}
		quick = 0
		if time.Now().After(deadline) {
			if slow {
				s.log.Error("tree processes survive SIGKILL", zap.String("tree", t.id), zap.Int("count", live.total()))
				return
			}
			// Not found among our children after a while: look everywhere.
			slow = true
			deadline = time.Now().Add(killTimeout)
			n, err := s.killMarked(func(owner, inst, id []byte) bool {
				return string(owner) == s.owner && string(inst) == s.instance && string(id) == t.id
			})
			s.log.Warn("tree processes outlived their walk, killed by a full scan", zap.String("tree", t.id),
				zap.Int("killed", n), zap.Error(err))
		}
		b.waitExit(live.wait)
	}
}

// maxQuickWalks bounds the walks in a row that a tree's end makes without
// waiting: each follows processes of the tree that died during the walk
// before, which a tree has few of.
const maxQuickWalks = 4

// waitEmpty waits for the killed tree's cgroup to hold no live process,
// and reports false if the cgroup cannot say (the walk then does the work).
// Nothing started in the cgroup can leave it without writing to the cgroup
// file system, which a sandboxed session sees read-only, so an empty cgroup
// is a dead tree: no walk of this process's children, which cost every
// ending tree a scan of every running tree's processes (a fifth of the
// daemon's CPU with 200 sandboxed sessions), under the lock that starts
// trees. The zombies of processes reparented to us are the reaper's, on the
// SIGCHLD their deaths send. A process that did leave the cgroup (as root,
// unsandboxed) is killed by the reaper's scans as a leftover of an ended
// tree if it kept its marker.
func (s *Supervisor) waitEmpty(t *Tree) bool {
	deadline := time.Now().Add(2 * killTimeout)
	// The kernel says when the cgroup empties; polled only where it cannot.
	empty, err := t.cg.WaitEmpty(deadline)
	if errors.Is(err, cgroup.ErrNoWatch) {
		empty, err = pollEmpty(t.cg, deadline)
	}
	if err != nil {
		s.log.Warn("read the tree's cgroup; walking its processes instead", zap.String("tree", t.id), zap.Error(err))
		return false
	}
	if !empty {
		// Uninterruptible (a sandbox still making its mounts, a hung file
		// system): nothing more can be done to it from here.
		n, _ := t.cg.Procs()
		s.log.Error("tree processes survive SIGKILL", zap.String("tree", t.id), zap.Int("count", n),
			zap.Duration("waited", 2*killTimeout))
	}
	return true
}

// pollEmpty reads the cgroup's state until it is empty or deadline passes.
func pollEmpty(g *cgroup.Group, deadline time.Time) (bool, error) {
	b := newBackoff()
	for {
		empty, err := g.Empty()
		if err != nil || empty || time.Now().After(deadline) {
			return empty, err
		}
		b.wait()
	}
}

// reapLeader reaps the exited leader and forgets the tree.
func (s *Supervisor) reapLeader(t *Tree) ExitStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.mu.Lock()
	var ws unix.WaitStatus
	var err error = unix.ECHILD
	for !t.reaped {
		_, err = unix.Wait4(t.pid, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	t.reaped = true
	t.mu.Unlock()
	delete(s.leaders, t.pid)
	delete(s.trees, t.id)
	switch {
	case err != nil:
		s.log.Error("reap tree leader", zap.String("tree", t.id), zap.Int("pid", t.pid), zap.Error(err))
		return ExitStatus{Code: -1}
	case ws.Signaled():
		return ExitStatus{Code: -1, Signal: ws.Signal()}
	case t.wrapped && ws.ExitStatus() > 128 && ws.ExitStatus() <= 128+64:
		return ExitStatus{Code: -1, Signal: syscall.Signal(ws.ExitStatus() - 128)}
	default:
		return ExitStatus{Code: ws.ExitStatus()}
	}
}

// finishIO drains the output until EOF or the drain deadline and stops
// feeding stdin. Every process of the tree is dead by now, so a writer still
// holding the pipe is not part of it and must not hold the tree open.
func (t *Tree) finishIO() {
	if t.outR != nil {
		_ = t.outR.SetReadDeadline(time.Now().Add(drainTimeout))
		<-t.outDone
		t.outR.Close()
		if t.outHeld.Load() {
			t.s.log.Warn("output pipe held open by a process outside the tree; stopped reading",
				zap.String("tree", t.id))
		}
	}
	if t.inW != nil {
		_ = t.inW.SetWriteDeadline(time.Now())
		<-t.inDone
	}
}

func (t *Tree) closePipes() {
	if t.inW != nil {
		t.inW.Close()
	}
	if t.outR != nil {
		t.outR.Close()
	}
}

// stdinNow writes all of r (a prompt: an io.WriterTo such as a
// strings.Reader) into the leader's stdin pipe, fd non-blocking, without
// waiting, reporting whether it is done: a prompt the pipe's buffer takes
// at once needs neither the poller nor a goroutine. It is not done when the
// pipe could not take all of it (r is then positioned after what it took)
// or r cannot write itself.
func stdinNow(fd int, r io.Reader) bool {
	wt, ok := r.(io.WriterTo)
	if !ok {
		return false
	}
	_, err := wt.WriteTo(fdWriter(fd))
	// EPIPE (the leader is gone) is as done as copyStdin makes it.
	return !errors.Is(err, unix.EAGAIN) && !errors.Is(err, io.ErrShortWrite)
}

// fdWriter writes to a file descriptor what it takes, failing with EAGAIN
// for the rest when it is non-blocking.
type fdWriter int

func (fd fdWriter) Write(p []byte) (n int, err error) {
	for n < len(p) {
		m, err := unix.Write(int(fd), p[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

func (t *Tree) copyStdin(r io.Reader) {
	defer close(t.inDone)
	// EPIPE (the leader never read it) and the deadline are both fine.
	_, _ = io.Copy(t.inW, r)
	t.inW.Close()
}

func (t *Tree) copyOutput(w io.Writer) {
	defer close(t.outDone)
	rc, err := t.outR.SyscallConn()
	if err != nil {
		t.copyOutputBuffered(w)
		return
	}
	var werr error
	// Reads start small and grow once a read fills the buffer: a session
	// that prints little holds no large buffer (a 32 KiB buffer per waiting
	// session was most of a large swarm's memory).
	var small [512]byte
	buf := small[:]
	var n int
	var rerr error
	read := func(fd uintptr) bool {
		for {
			n, rerr = unix.Read(int(fd), buf)
			if !errors.Is(rerr, unix.EINTR) {
				break
			}
		}
		if errors.Is(rerr, unix.EAGAIN) {
			return false // wait until readable
		}
		if n > 0 && werr == nil {
			// On a write error keep reading: a blocked pipe would stall the tree.
			if _, werr = w.Write(buf[:n]); werr != nil {
				t.s.log.Error("write tree output", zap.String("tree", t.id), zap.Error(werr))
			}
		}
		if n == len(buf) && len(buf) < outBufSize {
			buf = make([]byte, outBufSize) // a chatty session: read in larger steps
		}
		return true
	}
	for {
		err := rc.Read(read)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !t.drainNow(rc, read, &n, &rerr) {
				t.outHeld.Store(true)
			}
			return
		}
		if rerr != nil || n == 0 { // an error, or end of output
			return
		}
	}
}

// drainNow reads, without waiting, what the pipe holds once the drain
// deadline has passed, and reports whether it reached the end of the
// output. The deadline is for a writer outside the tree that holds the
// pipe open; it also passed when the reader was late (a loaded host, a
// slow log write) with the dead tree's last output still in the pipe, and
// that output, the session's result record among it, was dropped: a
// session that succeeded was recorded as an error. What the tree wrote is
// at most a pipe's capacity; drainLimit bounds what a writer outside it
// adds meanwhile.
func (t *Tree) drainNow(rc syscall.RawConn, read func(fd uintptr) bool, n *int, rerr *error) bool {
	end := false
	deadline := time.Now().Add(drainLimit)
	_ = rc.Control(func(fd uintptr) {
		for time.Now().Before(deadline) {
			if !read(fd) { // nothing now: the pipe's writer lives on
				return
			}
			if *rerr != nil || *n == 0 {
				end = *rerr == nil
				return
			}
		}
	})
	return end
}

// drainLimit bounds drainNow.
const drainLimit = time.Second

// outBufSize is copyOutput's read size.
const outBufSize = 16 << 10

// copyOutputBuffered is copyOutput for a pipe the poller does not hold.
func (t *Tree) copyOutputBuffered(w io.Writer) {
	buf := make([]byte, 32<<10)
	var werr error
	for {
		n, err := t.outR.Read(buf)
		if n > 0 && werr == nil {
			if _, werr = w.Write(buf[:n]); werr != nil {
				t.s.log.Error("write tree output", zap.String("tree", t.id), zap.Error(werr))
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.outHeld.Store(true)
			}
			return
		}
	}
}
