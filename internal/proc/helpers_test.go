package proc

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if os.Getenv(mainThreadExitsEnv) != "" {
		mainThreadExits()
	}
	goleak.VerifyTestMain(m)
}

// mainThreadExitsEnv makes the test binary a process that leaves its
// session and then ends its main thread alone while other threads run on:
// /proc says zombie (with num_threads over 1) and its environ cannot be read
// there, yet it lives. It prints its pid first.
const mainThreadExitsEnv = "PROC_TEST_MAIN_THREAD_EXITS"

func init() {
	if os.Getenv(mainThreadExitsEnv) != "" {
		runtime.LockOSThread() // main runs on the main thread, which then exits
	}
}

func mainThreadExits() {
	_, _ = unix.Setsid()
	os.Stdout.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	go func() { select {} }()
	_, _, _ = unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0)
}

const waitLimit = 10 * time.Second // generous: -race on two shared cores

func newSupervisor(t *testing.T) *Supervisor {
	t.Helper()
	s, err := NewSupervisor(t.TempDir(), zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("NewSupervisor: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// lineSink is a Spec.Output that hands out complete lines.
type lineSink struct {
	mu      sync.Mutex
	partial []byte
	all     bytes.Buffer
	ch      chan string
}

func newLineSink() *lineSink { return &lineSink{ch: make(chan string, 1024)} }

func (l *lineSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.ch <- string(l.partial[:i])
		l.partial = l.partial[i+1:]
	}
}

func (l *lineSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

func (l *lineSink) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-l.ch:
		return s
	case <-time.After(waitLimit):
		t.Fatalf("no output line within %s", waitLimit)
		return ""
	}
}

// proc names one process by pid and start time, so that a reused pid is
// never mistaken for it.
type process struct {
	pid   int
	start uint64
}

// gone reports whether the process no longer exists, not even as a zombie.
func (p process) gone() bool {
	st, _, err := readStat(p.pid, nil)
	return err != nil || st.start != p.start
}

func (p process) stat(t *testing.T) procStat {
	t.Helper()
	st, _, err := readStat(p.pid, nil)
	if err != nil {
		t.Fatalf("stat %d: %v", p.pid, err)
	}
	return st
}

// newSession waits until pid has become a `sleep` in a session of its own
// (the `setsid sleep` started by a script has really escaped its group), and
// registers a cleanup that kills it if a test failed to.
func newSession(t *testing.T, pidText string) process {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(pidText))
	if err != nil {
		t.Fatalf("pid %q: %v", pidText, err)
	}
	var p process
	waitFor(t, "pid "+pidText+" to be a setsid sleep", func() bool {
		st, _, err := readStat(pid, nil)
		comm, cerr := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if err != nil || cerr != nil {
			return false
		}
		p = process{pid: pid, start: st.start}
		return st.sid == pid && strings.TrimSpace(string(comm)) == "sleep"
	})
	t.Cleanup(func() {
		if !p.gone() {
			_ = unix.Kill(p.pid, unix.SIGKILL)
		}
	})
	return p
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitDone(t *testing.T, tr *Tree) {
	t.Helper()
	select {
	case <-tr.Done():
	case <-time.After(waitLimit):
		t.Fatalf("tree %s not done within %s", tr.ID(), waitLimit)
	}
}

func notDone(t *testing.T, tr *Tree, d time.Duration) {
	t.Helper()
	select {
	case <-tr.Done():
		t.Fatalf("tree %s ended, want it running", tr.ID())
	case <-time.After(d):
	}
}

func startSh(t *testing.T, s *Supervisor, id, script string, out *lineSink) *Tree {
	t.Helper()
	spec := Spec{Path: "/bin/sh", Args: []string{"-c", script}, Env: os.Environ(), ID: id}
	if out != nil {
		spec.Output = out
	}
	tr, err := s.Start(spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := tr.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("cleanup kill: %v", err)
		}
		<-tr.Done()
	})
	return tr
}

// markerOf reads pid's marker, "" if it has none.
func markerOf(pid int) string {
	v, ok, _, _ := readEnvVar(pid, MarkerEnv, nil)
	if !ok {
		return ""
	}
	return string(v)
}

// gate is a FIFO a script blocks on (`read _ <"$GATE"`) until open is called.
type gate string

func newGate(t *testing.T) gate {
	t.Helper()
	p := t.TempDir() + "/gate"
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	return gate(p)
}

// open lets the script go on; it blocks until the script opens the FIFO.
func (g gate) open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(string(g), []byte("go\n"), 0); err != nil {
		t.Fatalf("open gate: %v", err)
	}
}

func (g gate) wait() string { return `read _ <'` + string(g) + `'` }

// deadChildren lists this process's children that are zombies.
func deadChildren(t *testing.T) []int {
	t.Helper()
	pids, _, err := listChildren(nil, nil, os.Getpid(), true)
	if err != nil {
		t.Fatal(err)
	}
	var dead []int
	for _, pid := range pids {
		if st, _, err := readStat(pid, nil); err == nil && st.dead() {
			dead = append(dead, pid)
		}
	}
	return dead
}

// escapedTree runs a tree whose one child escapes it (no environment, so
// no marker; a session of its own) and waits for the tree's end, which the
// escaped process outlives: the supervisor cannot tell it is the tree's.
func escapedTree(t *testing.T, s *Supervisor, id string) (*Tree, process) {
	t.Helper()
	out := newLineSink()
	g := newGate(t)
	tr := startSh(t, s, id, `env -i /usr/bin/setsid /usr/bin/sleep 3600 & echo $!; `+g.wait(), out)
	p := newSession(t, out.next(t))
	g.open(t)
	waitDone(t, tr)
	return tr, p
}
