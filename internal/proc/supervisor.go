// Package proc supervises whole process trees: it starts a session's leader,
// and when the leader exits (or is cancelled, killed, or the daemon shuts
// down) it ends every process the leader started, including those that moved
// to a new session with setsid and so escape kill(-pgid), as the shell tools
// of Claude Code, Codex and Gemini CLI do.
//
// How: the daemon is a child subreaper, so a descendant whose parent dies is
// reparented to us instead of init; every tree's processes carry a marker in
// their environment (MarkerEnv); once a leader has exited (and before it is
// reaped, so its pid and process group cannot be reused) its group is killed
// and then every direct child of ours that carries the tree's marker, until
// none is left. The marker also lets a restarted daemon find the leftovers of
// one that was killed with SIGKILL (SweepOrphans).
//
// Reaping rule: this process also runs short-lived commands with os/exec (git)
// whose exit status belongs to exec.Cmd.Wait. The Supervisor therefore only
// ever waits for its own leaders, and for zombie children that are not
// leaders and are not in the daemon's process group; os/exec children without
// Setpgid share that group. Code in the daemon must not start children in
// another process group or session through os/exec: use a Supervisor.
//
// There can be one Supervisor per process at a time: the subreaper flag and
// the set of children it reaps are per process.
package proc

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/cgroup"
	"golang.org/x/sys/unix"
)

// Sentinel errors.
var (
	ErrClosed      = errors.New("proc: supervisor closed")
	ErrActive      = errors.New("proc: another supervisor is active in this process")
	ErrInvalidTag  = errors.New("proc: owner and tree id must be non-empty and contain no \\x1f or NUL")
	ErrDuplicateID = errors.New("proc: a tree with this id is running")
)

// Timing of the end of a tree.
const (
	// drainTimeout bounds how long output is read after every process of the
	// tree is dead: a process that escaped the tree (cleared its environment
	// and left the session) and still holds the pipe cannot keep it open.
	drainTimeout = 150 * time.Millisecond
	// killTimeout bounds one round of waiting for killed processes to die.
	killTimeout = 3 * time.Second
	// reapInterval is the safety net when a SIGCHLD was coalesced, missed
	// or not asked for (Supervisor.watching): slow, since the scan reads
	// every thread's children.
	reapInterval = 5 * time.Second
)

// active is process-wide on purpose: PR_SET_CHILD_SUBREAPER and the children
// that a reaper may wait for belong to the process, so two Supervisors would
// reap each other's leaders.
var active atomic.Bool

// Supervisor starts and ends process trees. It is safe for concurrent use.
type Supervisor struct {
	owner string
	// instance tells our trees from another daemon's: "<pid>.<start>.<nonce>",
	// so a sweep can tell whether the daemon that owns a tree still lives.
	instance string
	pid      int
	log      *zap.Logger
	devnull  *os.File
	sigch    chan os.Signal
	stop     chan struct{}
	wg       sync.WaitGroup

	// mu guards the fields below and serialises every wait4 of a child that
	// is not a leader, so that a zombie seen by one scan cannot be reaped and
	// its pid reused before another scan acts on it.
	mu      sync.Mutex
	closed  bool
	leaders map[int]*Tree    // started and not yet reaped: the reaper never touches them
	trees   map[string]*Tree // running or ending, by id
	pids    []int            // scratch for scans
	buf     []byte           // scratch for /proc reads
	// leftovers are the processes of ended trees already killed (pid ->
	// start time), so that the scans that see one again until it is dead
	// and reaped do not log it again.
	leftovers map[int]uint64
	// kill sends a signal to a leftover of an ended tree: unix.Kill, or a
	// test's stand-in that keeps the process alive across scans.
	kill func(pid int, sig unix.Signal) error
	// forked, if set (tests), sees each leader the moment its fork and
	// exec returned, before Start does anything more with it.
	forked func(pid int)

	// listAll lists the processes a full scan (killMarked) reads: every
	// one in /proc, or a test's own few.
	listAll func() ([]int, error)

	// pending are the trees' ends waiting for a walk (walkFor).
	pendMu  sync.Mutex
	pending []*walkReq

	// walks counts the scans of our children that trees' ends made.
	walks atomic.Int64
	// graces counts the execGrace waits of full scans: each one saw a
	// process that may have been in the middle of an execve.
	graces atomic.Int64

	// watching: SIGCHLD is delivered to sigch, so that a scan reaps the
	// orphans reparented to us as they die. It is on while scans find
	// orphans, and off once a whole reapInterval found none: a leader's
	// exit is seen on its pidfd, so a swarm whose sessions leave nothing
	// behind would pay for every session's SIGCHLD (the signal's thread,
	// a channel, a scan) for nothing: over a quarter of a lone agent's
	// context switches. Guarded by mu, as is orphansSeen (a scan found one
	// since the last tick).
	watching    bool
	orphansSeen bool
	// reapEvery is the reaper's interval (reapInterval; tests shorten it),
	// set before the reaper starts.
	reapEvery time.Duration

	// cg, if set (UseCgroups), gives every tree a cgroup of its own.
	cg *cgroup.Hierarchy
	// nice is the nice value every tree started gets (SetNice); noNice:
	// this process's own, inherited. Guarded by mu.
	nice int
	// slack is the timer slack, in nanoseconds, every tree started gets
	// (SetTimerSlack); 0: this process's, inherited. Guarded by mu.
	slack int
	// forker forks the trees' leaders at nice and slack, when either is
	// set (nice.go).
	forker *forker

	closeOnce sync.Once
}

// UseCgroups gives every tree started from now on a cgroup v2 of its own
// under h: its leader starts in it, and killing, freezing and accounting
// the tree go through it. Call it before the first Start.
func (s *Supervisor) UseCgroups(h *cgroup.Hierarchy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cg = h
}

// Cgroups is the hierarchy UseCgroups set, nil when none.
func (s *Supervisor) Cgroups() *cgroup.Hierarchy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cg
}

// NewSupervisor makes this process a child subreaper, so that orphaned
// descendants of every tree are reparented to it, and starts the reaper
// goroutine. owner tags every tree's marker (the daemon passes its absolute
// state directory) so that a later daemon with the same owner finds the
// leftovers of this one.
func NewSupervisor(owner string, log *zap.Logger) (*Supervisor, error) {
	return startSupervisor(owner, log, reapInterval)
}

// startSupervisor is NewSupervisor with the reaper's safety-net interval.
func startSupervisor(owner string, log *zap.Logger, reapEvery time.Duration) (*Supervisor, error) {
	if !validTag(owner) {
		return nil, fmt.Errorf("proc: new supervisor: owner %q: %w", owner, ErrInvalidTag)
	}
	if log == nil {
		log = zap.NewNop()
	}
	if !active.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("proc: new supervisor: %w", ErrActive)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:]) // never fails on Linux (getrandom)
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		active.Store(false)
		return nil, fmt.Errorf("proc: new supervisor: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		devnull.Close()
		active.Store(false)
		return nil, fmt.Errorf("proc: new supervisor: prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	s := &Supervisor{
		owner:    owner,
		instance: newInstance(nonce[:]),
		pid:      os.Getpid(),
		log:      log,
		devnull:  devnull,
		sigch:    make(chan os.Signal, 1),
		stop:     make(chan struct{}),
		leaders:  make(map[int]*Tree),
		trees:    make(map[string]*Tree),
		buf:      make([]byte, 0, 4096),

		leftovers: make(map[int]uint64),
		kill:      unix.Kill,
	}
	s.nice = noNice
	s.reapEvery = reapEvery
	s.watching = true
	signal.Notify(s.sigch, unix.SIGCHLD)
	s.wg.Add(1)
	go s.reaper()
	return s, nil
}

// Close kills every live tree with SIGKILL, waits until each is done, stops
// the reaper and clears the subreaper flag. It is idempotent.
func (s *Supervisor) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		live := make([]*Tree, 0, len(s.trees))
		for _, t := range s.trees {
			live = append(live, t)
		}
		s.mu.Unlock()
		for _, t := range live {
			_ = t.Kill() // a tree that is already ending returns ErrProcessDone
		}
		for _, t := range live {
			<-t.Done()
		}
		s.mu.Lock()
		s.stopForker()
		s.mu.Unlock()
		signal.Stop(s.sigch)
		close(s.stop)
		s.wg.Wait()
		s.mu.Lock()
		s.scanLocked(nil, true) // last reap, and last kill of leftovers of our trees
		s.mu.Unlock()
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		s.devnull.Close()
		active.Store(false)
	})
	return nil
}

// Spec describes the leader of a tree.
type Spec struct {
	Path string   // a name without a slash is looked up in Env's PATH (the daemon's if Env has none)
	Args []string // arguments after argv[0]
	Dir  string
	Env  []string // the whole environment; the marker is added
	// Stdin is copied to the leader's standard input, which is then closed.
	// It must reach EOF on its own (an in-memory reader); nil means /dev/null.
	Stdin io.Reader
	// Output receives stdout and stderr of the whole tree, interleaved, from
	// one goroutine. nil discards them.
	Output io.Writer
	ID     string // unique among running trees; goes into the marker
	// OnDone, if set, is called once Done is closed, in the goroutine that
	// ended the tree (Close waits for it): a caller acting on the end needs
	// no goroutine of its own parked on Done for the tree's whole life.
	OnDone func()
	// MemoryMax, if positive, bounds the tree's memory (its cgroup's
	// memory.max) where cgroups with the memory controller are in use.
	MemoryMax int64
	// Wrapped says the leader only wraps the tree's real command (a
	// sandbox): it dies of the signals it gets, and exits 128+N for a
	// command killed by signal N. Signal then goes to everything in the
	// tree but the leader, and such an exit reads as that signal.
	Wrapped bool
}

// Start starts a tree's leader in a new process group. A binary that does not
// exist gives an error that wraps exec.ErrNotFound (looked up in PATH) or
// fs.ErrNotExist (a path), naming it.
func (s *Supervisor) Start(spec Spec) (*Tree, error) {
	if !validTag(spec.ID) {
		return nil, fmt.Errorf("proc: start: tree id %q: %w", spec.ID, ErrInvalidTag)
	}
	if spec.Path == "" {
		return nil, errors.New("proc: start: empty path")
	}
	path, err := lookPath(spec.Path, spec.Env)
	if err != nil {
		return nil, fmt.Errorf("proc: start %s: %w", spec.ID, err)
	}
	t := &Tree{
		s:       s,
		id:      spec.ID,
		done:    make(chan struct{}),
		onDone:  spec.OnDone,
		wrapped: spec.Wrapped,
	}
	inR, outW := -1, -1 // the child's ends, closed here once it has them
	inW := -1           // our end of stdin, closed here unless handed to copyStdin
	defer func() {
		if inW >= 0 {
			unix.Close(inW)
		}
	}()
	if spec.Stdin != nil {
		if inW, inR, err = pipe(false); err != nil {
			return nil, fmt.Errorf("proc: start %s: stdin pipe: %w", spec.ID, err)
		}
		defer unix.Close(inR)
	}
	if spec.Output != nil {
		var outR int
		if outR, outW, err = pipe(true); err != nil {
			return nil, fmt.Errorf("proc: start %s: output pipe: %w", spec.ID, err)
		}
		t.outR = os.NewFile(uintptr(outR), "|pipe") // non-blocking: on the poller
		defer unix.Close(outW)
	}
	argv := make([]string, 0, 1+len(spec.Args))
	argv = append(argv, spec.Path)
	argv = append(argv, spec.Args...)
	env := withMarker(spec.Env, marker{owner: s.owner, instance: s.instance, id: spec.ID})

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		t.closePipes()
		return nil, fmt.Errorf("proc: start %s: %w", spec.ID, ErrClosed)
	}
	if _, dup := s.trees[spec.ID]; dup {
		s.mu.Unlock()
		t.closePipes()
		return nil, fmt.Errorf("proc: start %s: %w", spec.ID, ErrDuplicateID)
	}
	in, out := s.devnull.Fd(), s.devnull.Fd()
	if inR >= 0 {
		in = uintptr(inR)
	}
	if outW >= 0 {
		out = uintptr(outW)
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if s.cg != nil {
		g, err := s.cg.New(spec.ID, cgroup.Limits{MemoryMax: spec.MemoryMax})
		if err != nil {
			s.mu.Unlock()
			t.closePipes()
			return nil, fmt.Errorf("proc: start %s: %w", spec.ID, err)
		}
		// The leader starts in it (clone3 CLONE_INTO_CGROUP): not even its
		// first fork happens outside.
		t.cg, sys.UseCgroupFD, sys.CgroupFD = g, true, g.FD()
	}
	t.started = time.Now()
	// Registered under the same lock the reaper scans under: a leader that
	// exits at once is never taken for an orphan and reaped.
	pid, err := s.forkExec(path, argv, &syscall.ProcAttr{
		Dir:   spec.Dir,
		Env:   env,
		Files: []uintptr{in, out, out},
		Sys:   sys,
	})
	if t.cg != nil {
		t.cg.CloseFD() // the leader is in; the directory is all the rest needs
	}
	if err == nil && s.forked != nil {
		s.forked(pid)
	}
	if err != nil {
		s.mu.Unlock()
		t.closePipes()
		if t.cg != nil {
			_ = t.cg.Remove()
		}
		return nil, startError(spec, path, err)
	}

	t.pid = pid
	s.leaders[pid] = t
	s.trees[spec.ID] = t
	s.wg.Add(1) // before Close can see the tree and wait
	s.mu.Unlock()

	if inW >= 0 {
		if stdinNow(inW, spec.Stdin) {
			unix.Close(inW) // EOF for the leader
		} else {
			t.inW = os.NewFile(uintptr(inW), "|pipe") // non-blocking: NewFile puts it on the poller
			t.inDone = make(chan struct{})
			go t.copyStdin(spec.Stdin)
		}
		inW = -1
	}
	if spec.Output != nil {
		t.outDone = make(chan struct{})
		go t.copyOutput(spec.Output)
	}
	go t.run()
	s.log.Debug("tree started", zap.String("tree", t.id), zap.Int("pid", pid), zap.String("path", path))
	return t, nil
}

// pipe makes a pipe whose end for us is non-blocking (on the runtime
// poller once os.NewFile wraps it, so deadlines work) and whose end for the
// child is a plain blocking fd: the child's end needs neither the poller
// nor os.File, and skipping them saves syscalls per session. Our end stays
// a plain fd until wrapped: a prompt written at once (stdinNow) never needs
// the poller.
func pipe(oursReads bool) (ours, theirs int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	o, th := p[1], p[0]
	if oursReads {
		o, th = p[0], p[1]
	}
	if err := unix.SetNonblock(o, true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, -1, err
	}
	return o, th, nil
}

func startError(spec Spec, path string, err error) error {
	if errors.Is(err, unix.ENOENT) && spec.Dir != "" {
		if _, serr := os.Stat(spec.Dir); serr != nil {
			return fmt.Errorf("proc: start %s: working directory: %w", spec.ID, serr)
		}
	}
	return fmt.Errorf("proc: start %s: %w", spec.ID, &os.PathError{Op: "fork/exec", Path: path, Err: err})
}

// lookPath resolves a name without a slash in the PATH the child will get,
// like execvp(3) does, so that a missing binary is reported as such.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	pathEnv, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv, found = v, true
			break
		}
	}
	if !found {
		pathEnv = os.Getenv("PATH")
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue // "." by POSIX; never search the working directory implicitly
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

// newInstance names this Supervisor: its process, by pid and start time
// (together unique for the boot), and a nonce for two Supervisors of one
// process in tests.
func newInstance(nonce []byte) string {
	pid := os.Getpid()
	st, _, err := readStat(pid, make([]byte, 0, 512))
	if err != nil {
		return "0.0." + hex.EncodeToString(nonce)
	}
	return strconv.Itoa(pid) + "." + strconv.FormatUint(st.start, 10) + "." + hex.EncodeToString(nonce)
}

// instanceAlive reports whether the process that created instance still
// runs: its pid is live with the same start time. A malformed or pid-less
// instance (an older swarmd's) counts as gone.
func instanceAlive(instance []byte, buf []byte) bool {
	f := bytes.SplitN(instance, []byte("."), 3)
	if len(f) != 3 {
		return false
	}
	pid, err := strconv.Atoi(string(f[0]))
	if err != nil || pid <= 0 {
		return false
	}
	start, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return false
	}
	st, _, err := readStat(pid, buf)
	return err == nil && !st.dead() && st.start == start
}

// LookPath resolves file as Start will: a name without a slash in the PATH
// of env (the daemon's own when env sets none), a name with a slash as it
// is. config uses it to find missing backend programs before any start.
func LookPath(file string, env []string) (string, error) { return lookPath(file, env) }
