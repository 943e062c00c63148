package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A setsid grandchild that does not hold the output pipe, and a setsid
// grandchild of that one (its parent is alive and in another session when the
// leader exits, so it becomes ours only once its parent is killed).
const escapeScript = `setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $!
setsid sh -c 'setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $!; exec sleep 3600' </dev/null 2>/dev/null &
`

func startEscapers(t *testing.T, s *Supervisor, id, rest string) (*Tree, *lineSink, []process) {
	t.Helper()
	out := newLineSink()
	tr := startSh(t, s, id, escapeScript+rest, out)
	a := newSession(t, out.next(t))
	b := newSession(t, out.next(t))
	for _, p := range []process{a, b} {
		// Right after exec the environment reads empty for a moment.
		waitFor(t, "pid "+strconv.Itoa(p.pid)+" to show its environment", func() bool { return markerOf(p.pid) != "" })
		if m := markerOf(p.pid); !strings.HasSuffix(m, markerSep+id) {
			t.Fatalf("pid %d marker %q, want one for tree %s", p.pid, m, id)
		}
		if st := p.stat(t); st.pgid == tr.Pid() {
			t.Fatalf("pid %d is in the leader's group: the test would not test setsid", p.pid)
		}
	}
	return tr, out, []process{a, b}
}

func assertGone(t *testing.T, ps []process) {
	t.Helper()
	for _, p := range ps {
		if !p.gone() {
			st, _, _ := readStat(p.pid, nil)
			t.Errorf("pid %d survived its tree (state %c)", p.pid, st.state)
		}
	}
}

func TestNormalExitEndsSetsidDescendants(t *testing.T) {
	s := newSupervisor(t)
	g := newGate(t)
	tr, _, ps := startEscapers(t, s, "normal", g.wait()+"; exit 3")
	g.open(t)
	waitDone(t, tr)
	if st := tr.Exit(); st.Code != 3 || st.Signal != 0 {
		t.Fatalf("exit = %+v, want code 3", st)
	}
	if tr.OutputCutOff() {
		t.Fatal("output was cut off: every writer belonged to the tree")
	}
	// Done means reaped, not merely killed: not even a zombie may be left.
	assertGone(t, ps)
}

func TestSignalEndsSetsidDescendants(t *testing.T) {
	s := newSupervisor(t)
	tr, _, ps := startEscapers(t, s, "sigterm", "exec sleep 3600")
	if err := tr.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	waitDone(t, tr)
	if st := tr.Exit(); st.Signal != syscall.SIGTERM || st.Code != -1 {
		t.Fatalf("exit = %+v, want killed by SIGTERM", st)
	}
	assertGone(t, ps)
	if err := tr.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Signal after the end = %v, want ErrProcessDone", err)
	}
	if err := tr.Kill(); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Kill after the end = %v, want ErrProcessDone", err)
	}
}

// Trees that end together share their walks (walkFor): each
// still ends with all of its setsid descendants, and none waits forever.
func TestTreesEndingTogetherEndWhole(t *testing.T) {
	s := newSupervisor(t)
	var trees []*Tree
	var ps []process
	for i := range 8 {
		tr, _, p := startEscapers(t, s, "together"+strconv.Itoa(i), "exec sleep 3600")
		trees = append(trees, tr)
		ps = append(ps, p...)
	}
	for _, tr := range trees {
		if err := tr.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("Signal: %v", err)
		}
	}
	for _, tr := range trees {
		waitDone(t, tr)
	}
	assertGone(t, ps)
}

func TestKillEndsTreeThatIgnoresSignals(t *testing.T) {
	s := newSupervisor(t)
	out := newLineSink()
	tr := startSh(t, s, "stubborn", `trap '' INT TERM; `+escapeScript+`while :; do sleep 1; done`, out)
	ps := []process{newSession(t, out.next(t)), newSession(t, out.next(t))}
	if err := tr.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	notDone(t, tr, 100*time.Millisecond)
	if err := tr.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	waitDone(t, tr)
	if st := tr.Exit(); st.Signal != syscall.SIGKILL {
		t.Fatalf("exit = %+v, want killed by SIGKILL", st)
	}
	assertGone(t, ps)
}

func TestCloseEndsLiveTrees(t *testing.T) {
	s := newSupervisor(t)
	var trees []*Tree
	var ps []process
	for i := range 3 {
		tr, _, p := startEscapers(t, s, "live-"+strconv.Itoa(i), "exec sleep 3600")
		trees = append(trees, tr)
		ps = append(ps, p...)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, tr := range trees {
		select {
		case <-tr.Done():
		default:
			t.Fatalf("tree %s not done after Close", tr.ID())
		}
	}
	assertGone(t, ps)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Start(Spec{Path: "/bin/true", ID: "late"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
}

// A descendant in the tree that keeps the output pipe open is killed, so the
// pipe reaches EOF at once; a process that escaped the tree entirely (no
// marker, own session) and holds it is cut off at the drain deadline.
func TestOutputHolderDoesNotDelayDone(t *testing.T) {
	s := newSupervisor(t)

	t.Run("marked holder", func(t *testing.T) {
		out := newLineSink()
		g := newGate(t)
		tr := startSh(t, s, "holder", `setsid sleep 3600 & echo $!; `+g.wait(), out)
		p := newSession(t, out.next(t))
		g.open(t)
		waitDone(t, tr)
		if tr.OutputCutOff() {
			t.Fatal("output cut off: the holder belonged to the tree and should have been killed")
		}
		assertGone(t, []process{p})
	})

	t.Run("escaped holder", func(t *testing.T) {
		tr, p := escapedTree(t, s, "escaped")
		took := time.Since(tr.Exit().Exited)
		if !tr.OutputCutOff() {
			t.Fatal("output not cut off, but an escaped process held it")
		}
		if took > drainTimeout+time.Second {
			t.Fatalf("Done %s after the leader exited, want about the drain deadline %s", took, drainTimeout)
		}
		// Unmarked and not ours to judge: left alone, and reaped once it dies.
		if p.gone() {
			t.Fatal("an unmarked process was killed")
		}
		if err := unix.Kill(p.pid, unix.SIGKILL); err != nil {
			t.Fatalf("kill: %v", err)
		}
		waitFor(t, "the reaper to reap the unmarked orphan", p.gone)
	})
}

// The reaper must never wait for a child that os/exec owns: exec.Cmd.Wait
// would fail with ECHILD. Run many short commands while trees keep leaving
// orphans to kill and reap.
func TestReaperLeavesExecChildrenAlone(t *testing.T) {
	s := newSupervisor(t)
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	var trees int
	go func() {
		defer churn.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tr, err := s.Start(Spec{
				Path: "/bin/sh",
				Args: []string{"-c", "setsid sleep 3600 </dev/null >/dev/null 2>&1 & sleep 0.001; exit 0"},
				Env:  os.Environ(),
				ID:   "churn-" + strconv.Itoa(i),
			})
			if err != nil {
				t.Errorf("Start: %v", err)
				return
			}
			<-tr.Done()
			trees++
		}
	}()

	const runs, workers = 200, 8
	errs := make(chan error, runs)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < runs; i += workers {
				errs <- exec.Command("true").Run()
			}
		}()
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if err != nil {
			t.Errorf("exec.Command(true).Run() = %v", err)
		}
		n++
	}
	if n != runs {
		t.Fatalf("%d runs, want %d", n, runs)
	}
	if trees == 0 {
		t.Fatal("no tree ended during the runs: nothing was reaped concurrently")
	}
	t.Logf("%d trees ended during %d exec runs", trees, runs)

	// The sharp case: os/exec children that are zombies, not yet waited
	// for, while the reaper walks every thread's children.
	var cmds []*exec.Cmd
	for range 20 {
		cmd := exec.Command("true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		waitFor(t, "an exec child to be a zombie", func() bool {
			st, _, err := readStat(cmd.Process.Pid, nil)
			return err == nil && st.dead()
		})
	}
	s.mu.Lock()
	s.scanLocked(nil, true)
	s.mu.Unlock()
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("Wait of an exec child after a reaper walk = %v", err)
		}
	}
}

// spawnDetached starts `setsid sleep 3600` with env as an earlier daemon
// would have left it: its parent (sh) exits, so it is reparented to us.
func spawnDetached(t *testing.T, env []string) process {
	t.Helper()
	p := newSession(t, spawnDetachedPid(t, env))
	if len(env) > 0 {
		// Its exec done: the new name is set before the new environment,
		// and a scan in between reads an empty one, as of a process
		// mid-execve (a machine with slow page faults shows it).
		waitFor(t, fmt.Sprintf("pid %d's environment", p.pid), func() bool {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
			return err == nil && len(b) > 0
		})
	}
	return p
}

func spawnDetachedPid(t *testing.T, env []string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $!")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func TestSweepOrphans(t *testing.T) {
	s := newSupervisor(t)
	base := os.Environ()
	earlier := marker{owner: s.owner, instance: "0123456789abcdef", id: "old-session"}
	stranger := marker{owner: s.owner + "-other", instance: "0123456789abcdef", id: "old-session"}
	// The earlier daemon's marker; a daemon on another state dir; no marker.
	mine := spawnDetached(t, withMarker(base, earlier))
	other := spawnDetached(t, withMarker(base, stranger))
	plain := spawnDetached(t, base)

	// A live tree of ours is not an orphan.
	g := newGate(t)
	tr := startSh(t, s, "running", g.wait(), nil)

	n, err := s.SweepOrphans()
	if err != nil {
		t.Fatalf("SweepOrphans: %v", err)
	}
	if n != 1 {
		t.Fatalf("SweepOrphans killed %d, want 1", n)
	}
	waitFor(t, "the killed orphan to be reaped", mine.gone)
	if other.gone() || plain.gone() {
		t.Fatal("SweepOrphans killed a process of another owner or an unmarked one")
	}
	notDone(t, tr, 0)
	g.open(t)
	waitDone(t, tr)

	for _, p := range []process{other, plain} {
		_ = unix.Kill(p.pid, unix.SIGKILL)
		waitFor(t, fmt.Sprintf("pid %d to be reaped", p.pid), p.gone)
	}
}

// TestSweepWaitsOutTheGraceOnlyWhenUnsure: a clean full scan is final at
// once unless it read an empty environment from a process that may be in
// the middle of an execve (not a kernel thread, not a zombie): a daemon's
// start does not wait execGrace for nothing, and a process that may be
// execing still gets its second look.
func TestSweepWaitsOutTheGraceOnlyWhenUnsure(t *testing.T) {
	s := newSupervisor(t)
	plain := spawnDetached(t, os.Environ())
	t.Cleanup(func() { _ = unix.Kill(plain.pid, unix.SIGKILL) })
	scanned := []int{plain.pid}
	if k := kernelThread(); k > 0 {
		scanned = append(scanned, k) // its environment reads empty, or not at all
	}
	s.listAll = func() ([]int, error) { return scanned, nil }
	if n, err := s.SweepOrphans(); err != nil || n != 0 {
		t.Fatalf("SweepOrphans = %d, %v; want 0", n, err)
	}
	if got := s.graces.Load(); got != 0 {
		t.Fatalf("a scan of plain processes and a kernel thread waited %d graces, want 0", got)
	}

	// A live process whose environment reads empty, as one mid-execve does.
	empty := exec.Command("/bin/sleep", "3600")
	empty.Env = []string{}
	if err := empty.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = empty.Process.Kill(); _ = empty.Wait() })
	scanned = append(scanned, empty.Process.Pid)
	if n, err := s.SweepOrphans(); err != nil || n != 0 {
		t.Fatalf("SweepOrphans = %d, %v; want 0", n, err)
	}
	if got := s.graces.Load(); got != 1 {
		t.Fatalf("a scan that read an empty environment waited %d graces, want 1", got)
	}
	if plain.gone() {
		t.Fatal("SweepOrphans killed an unmarked process")
	}
}

// kernelThread is the pid of a kernel thread this process can see, 0 when
// it sees none (a pid namespace of its own).
func kernelThread() int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, _, err := readStat(pid, nil); err == nil && st.kthread {
			return pid
		}
	}
	return 0
}

func TestStartErrors(t *testing.T) {
	s := newSupervisor(t)
	_, err := s.Start(Spec{Path: "no-such-binary-swarmd", Env: []string{"PATH=/usr/bin:/bin"}, ID: "a"})
	if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "no-such-binary-swarmd") {
		t.Fatalf("missing binary in PATH: %v", err)
	}
	_, err = s.Start(Spec{Path: "/no/such/binary", ID: "b"})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "/no/such/binary") {
		t.Fatalf("missing binary path: %v", err)
	}
	_, err = s.Start(Spec{Path: "/bin/true", Dir: "/no/such/dir", ID: "c"})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "working directory") {
		t.Fatalf("missing dir: %v", err)
	}
	for _, id := range []string{"", "a\x1fb", "a\x00b"} {
		if _, err := s.Start(Spec{Path: "/bin/true", ID: id}); !errors.Is(err, ErrInvalidTag) {
			t.Fatalf("id %q: %v, want ErrInvalidTag", id, err)
		}
	}
	g := newGate(t)
	startSh(t, s, "dup", g.wait(), nil)
	if _, err := s.Start(Spec{Path: "/bin/true", ID: "dup"}); !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("duplicate id: %v, want ErrDuplicateID", err)
	}
	g.open(t)
	if _, err := NewSupervisor("/elsewhere", nil); !errors.Is(err, ErrActive) {
		t.Fatalf("second supervisor: %v, want ErrActive", err)
	}
}

func TestStdinEnvAndMarker(t *testing.T) {
	s := newSupervisor(t)
	out := newLineSink()
	env := append(os.Environ(), MarkerEnv+"=outer-daemon", "SWARM_X=1")
	big := strings.Repeat("x", 1<<20) // more than a pipe holds: the copy must not block the tree
	tr, err := s.Start(Spec{
		Path:   "sh",
		Args:   []string{"-c", `wc -c; printf '%s|%s\n' "$SWARM_X" "$` + MarkerEnv + `" | tr '\037' '/'; echo err >&2`},
		Env:    env,
		Dir:    t.TempDir(),
		Stdin:  strings.NewReader(big),
		Output: out,
		ID:     "io",
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitDone(t, tr)
	want := fmt.Sprintf("%d\n1|%s/%s/io\nerr\n", len(big), s.owner, s.instance)
	if got := out.String(); got != want {
		t.Fatalf("output %q, want %q", got, want)
	}

	// A leader that never reads a large stdin still ends.
	tr, err = s.Start(Spec{Path: "/bin/true", Stdin: strings.NewReader(big), ID: "noread"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitDone(t, tr)
	if st := tr.Exit(); st.Code != 0 || st.Started.IsZero() || st.Exited.Before(st.Started) {
		t.Fatalf("exit = %+v", st)
	}
}

// TestStdinSmallAndOpaque: a prompt the pipe takes at once (written
// without a goroutine) and a reader that cannot write itself (copied by
// one) both reach the leader whole, followed by EOF.
func TestStdinSmallAndOpaque(t *testing.T) {
	s := newSupervisor(t)
	for name, in := range map[string]io.Reader{
		"small":  strings.NewReader("hello\n"),
		"opaque": io.MultiReader(strings.NewReader("hel"), strings.NewReader("lo\n")),
	} {
		out := newLineSink()
		tr, err := s.Start(Spec{Path: "cat", Stdin: in, Output: out, ID: name})
		if err != nil {
			t.Fatalf("%s: Start: %v", name, err)
		}
		waitDone(t, tr)
		if got := out.String(); got != "hello\n" || tr.Exit().Code != 0 {
			t.Errorf("%s: cat printed %q, exit %+v", name, got, tr.Exit())
		}
	}
}

func TestParseStat(t *testing.T) {
	line := "4242 (we ird) (x) S 1 4240 4239 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 1 0 987654 1 2 3\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st != (procStat{state: 'S', pgid: 4240, sid: 4239, start: 987654, threads: 1}) {
		t.Fatalf("got %+v", st)
	}
	// kthreadd's flags (PF_KTHREAD among them).
	kthread := "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 4 0 0\n"
	if st, err := parseStat([]byte(kthread)); err != nil || !st.kthread {
		t.Fatalf("kthreadd: %+v, %v; want a kernel thread", st, err)
	}
	for _, bad := range []string{"", "1 (x)", "1 (x) S 1 2", "1 (x) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
}

func TestEnvAndMarkerParsing(t *testing.T) {
	env := []byte("A=1\x00SWARMD_TREEX=no\x00SWARMD_TREE=o\x1fi\x1fid\x00SWARMD_TREE=second\x00")
	v, ok := envLookup(env, MarkerEnv)
	if !ok || string(v) != "o\x1fi\x1fid" {
		t.Fatalf("envLookup = %q %v", v, ok)
	}
	o, i, id, ok := parseMarker(v)
	if !ok || string(o) != "o" || string(i) != "i" || string(id) != "id" {
		t.Fatalf("parseMarker = %q %q %q %v", o, i, id, ok)
	}
	for _, bad := range []string{"", "a", "a\x1fb", "a\x1fb\x1fc\x1fd"} {
		if _, _, _, ok := parseMarker([]byte(bad)); ok {
			t.Errorf("parseMarker(%q) ok", bad)
		}
	}
	if _, ok := envLookup([]byte("SWARMD_TREE"), MarkerEnv); ok {
		t.Fatal("a key without '=' matched")
	}
}

// The reaper's safety net: a process of ours marked with a tree that has
// ended (here: never existed) is killed and reaped without anyone asking.
func TestReaperKillsLeftoversOfEndedTrees(t *testing.T) {
	s := newSupervisor(t)
	pid, err := strconv.Atoi(spawnDetachedPid(t, withMarker(os.Environ(), marker{owner: s.owner, instance: s.instance, id: "ended"})))
	if err != nil {
		t.Fatal(err)
	}
	// It may be gone already; if not, remember which process it is.
	p := process{pid: pid}
	if st, _, err := readStat(pid, nil); err == nil {
		p.start = st.start
		t.Cleanup(func() {
			if !p.gone() {
				_ = unix.Kill(p.pid, unix.SIGKILL)
			}
		})
	}
	waitFor(t, "the leftover to be killed and reaped", p.gone)
}

// A tree started after SetNice runs at that much lower a priority than the
// daemon, and so does what it starts; SetNice(0) leaves trees at the
// daemon's own; a new value holds for the trees started after it. The
// leader runs at the value from its first instruction:
// a renice of its group after its exec would race with what it forks then.
func TestTreesRunNicer(t *testing.T) {
	s := newSupervisor(t)
	own := niceOf(t, os.Getpid())
	var atExec []int // each leader's nice value as its fork and exec returned
	s.forked = func(pid int) { atExec = append(atExec, niceOf(t, pid)) }
	for _, tc := range []struct {
		set, want int
	}{{7, min(own+7, 19)}, {3, min(own+3, 19)}, {0, own}} {
		s.SetNice(tc.set)
		for i := range 5 {
			out := newLineSink()
			// Field 19 of /proc/self/stat, read by the shell itself: the 17th after the command.
			tr := startSh(t, s, "nice"+strconv.Itoa(tc.set)+"-"+strconv.Itoa(i),
				`sleep 30 & read -r st </proc/self/stat; set -- ${st##*) }; echo ${17} $$ $!; wait`, out)
			f := strings.Fields(out.next(t))
			if len(f) != 3 {
				t.Fatalf("leader printed %q, want its nice value and two pids", f)
			}
			if got, want := f[0], strconv.Itoa(tc.want); got != want {
				t.Errorf("SetNice(%d): the leader saw nice %s as it started, want %s", tc.set, got, want)
			}
			if got := atExec[len(atExec)-1]; got != tc.want {
				t.Errorf("SetNice(%d): the leader ran at nice %d once exec'd, want %d", tc.set, got, tc.want)
			}
			for _, p := range f[1:] {
				pid, err := strconv.Atoi(p)
				if err != nil {
					t.Fatalf("pid %q: %v", p, err)
				}
				if got := niceOf(t, pid); got != tc.want {
					t.Errorf("SetNice(%d): process %d runs at nice %d, want %d", tc.set, pid, got, tc.want)
				}
			}
			if err := tr.Kill(); err != nil {
				t.Fatal(err)
			}
			<-tr.Done()
		}
	}
	// The forking threads were the ones reniced, never the daemon's.
	if got := niceOf(t, os.Getpid()); got != own {
		t.Errorf("the supervisor's process runs at nice %d after the trees, want %d", got, own)
	}
}

// A tree started after SetTimerSlack runs with that timer slack from its
// first instruction, and so does what it starts; the supervisor's own
// threads keep theirs, and SetTimerSlack(0) gives trees this process's
// again. Alone (the forking thread's slack set for the fork) and with
// SetNice (one forker thread carries both).
func TestTreesGetTheTimerSlack(t *testing.T) {
	s := newSupervisor(t)
	own := slackOf(t, "self")
	for _, tc := range []struct {
		nice, slack, want int
	}{{0, 1_234_567, 1_234_567}, {5, 2_345_678, 2_345_678}, {0, 0, own}} {
		s.SetNice(tc.nice)
		s.SetTimerSlack(tc.slack)
		out := newLineSink()
		tr := startSh(t, s, "slack"+strconv.Itoa(tc.slack),
			`sleep 30 & read -r mine </proc/self/timerslack_ns; echo $mine $!; wait`, out)
		f := strings.Fields(out.next(t))
		if len(f) != 2 {
			t.Fatalf("leader printed %q, want its timer slack and a pid", f)
		}
		if got, want := f[0], strconv.Itoa(tc.want); got != want {
			t.Errorf("SetTimerSlack(%d), SetNice(%d): the leader's timer slack is %s, want %s", tc.slack, tc.nice, got, want)
		}
		if got := slackOf(t, f[1]); got != tc.want {
			t.Errorf("SetTimerSlack(%d): its child's timer slack is %d, want %d", tc.slack, got, tc.want)
		}
		if err := tr.Kill(); err != nil {
			t.Fatal(err)
		}
		<-tr.Done()
		// Without nice the tree was forked from whichever thread asked,
		// its slack set for the fork: every thread has its own back.
		// (Looked at now: a thread may end with the next case's forker.)
		// With nice, the forker's thread keeps the trees' values.
		for tid, got := range threadSlacks(t) {
			if got != own && tc.nice == 0 {
				t.Errorf("SetTimerSlack(%d), SetNice(%d): thread %s has timer slack %d after the tree, want %d", tc.slack, tc.nice, tid, got, own)
			}
		}
	}
}

// threadSlacks is the timer slack of each of this process's threads.
func threadSlacks(t *testing.T) map[string]int {
	t.Helper()
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	at := make(map[string]int, len(tids))
	for _, e := range tids {
		// /proc/TID, not /proc/self/task/TID, has a thread's slack.
		b, err := os.ReadFile("/proc/" + e.Name() + "/timerslack_ns")
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended
		} else if err != nil {
			t.Fatal(err)
		}
		at[e.Name()], _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return at
}

// slackOf is the timer slack of process pid ("self": this thread's
// process's main thread).
func slackOf(t *testing.T, pid string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/timerslack_ns")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// niceOf is process pid's nice value (field 19 of /proc/PID/stat).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	n, err := strconv.Atoi(f[16]) // fields 3.. after the command
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// While many trees start at once, leaders that exit at once are never
// reaped as orphans before their Start registers them (each tree keeps its
// own exit code), and the zombies of their setsid children, reparented to
// us and each the leader of its own group, are all reaped.
func TestConcurrentStartsKeepTheirLeaders(t *testing.T) {
	for _, cg := range []bool{false, true} {
		t.Run(map[bool]string{false: "no cgroup", true: "cgroup"}[cg], func(t *testing.T) {
			var s *Supervisor
			if cg {
				s, _ = cgroupSupervisor(t)
			} else {
				s = newSupervisor(t)
			}
			const n = 40
			trees := make([]*Tree, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tr, err := s.Start(Spec{Path: "/bin/sh", ID: "quick-" + strconv.Itoa(i),
						Args: []string{"-c", "setsid sh -c 'exit 0' & exit " + strconv.Itoa(i%7+1)}})
					if err != nil {
						t.Error(err)
						return
					}
					trees[i] = tr
				}()
			}
			wg.Wait()
			for i, tr := range trees {
				if tr == nil {
					continue
				}
				waitDone(t, tr)
				if got, want := tr.Exit().Code, i%7+1; got != want {
					t.Errorf("tree %d exited %d, want %d: its leader was reaped by another", i, got, want)
				}
			}
			waitFor(t, "no zombie child left", func() bool { return len(deadChildren(t)) == 0 })
		})
	}
}

// slowSink is an output whose first write waits until released: a log
// write on a loaded host.
type slowSink struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	first   chan struct{} // closed at the first write
	release chan struct{}
	once    sync.Once
}

func (s *slowSink) Write(p []byte) (int, error) {
	s.once.Do(func() {
		close(s.first)
		<-s.release
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// A tree's last output is read whole after its processes die, however late
// the reader gets to it: the drain deadline is for a writer outside the
// tree, not for what the dead tree left in the pipe. A reader held up past
// it (its first write slow) dropped the rest, a session's result record
// with it, and the session was recorded as an error.
func TestOutputLeftInThePipeIsReadPastTheDrainDeadline(t *testing.T) {
	s := newSupervisor(t)
	out := &slowSink{first: make(chan struct{}), release: make(chan struct{})}
	// 32 KiB in the pipe (its capacity is 64), then the end.
	tr, err := s.Start(Spec{Path: "/bin/sh", Args: []string{"-c", `head -c 32768 /dev/zero | tr '\0' x; echo; echo LAST`},
		Env: os.Environ(), ID: "late-reader", Output: out})
	if err != nil {
		t.Fatal(err)
	}
	<-out.first
	// Every process of the tree has exited, and the leader is reaped,
	// before the reader goes on.
	waitFor(t, "the tree's leader reaped", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", tr.Pid()))
		return errors.Is(err, os.ErrNotExist)
	})
	time.Sleep(drainTimeout + 100*time.Millisecond) // the reader late past the drain deadline
	close(out.release)
	waitDone(t, tr)
	out.mu.Lock()
	got := out.buf.String()
	out.mu.Unlock()
	if !strings.HasSuffix(got, "\nLAST\n") || len(got) != 32768+6 {
		t.Fatalf("read %d bytes ending %q, want 32774 ending with LAST", len(got), got[max(0, len(got)-20):])
	}
	if tr.OutputCutOff() {
		t.Error("output reported cut off, but nothing outside the tree held the pipe")
	}
}
