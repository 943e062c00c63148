package backend

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/swarmd/swarmd/internal/proc"
)

func TestMain(m *testing.M) {
	// Under nohup the tests start with SIGHUP ignored, and an ignored
	// signal stays ignored across exec: the sessions' shells would survive
	// a SIGHUP the tests send. Watching it gives the children the default
	// disposition again, as `swarmd run` does (it reloads on SIGHUP).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	goleak.VerifyTestMain(m)
}

const waitLimit = 10 * time.Second // generous: -race on two shared cores

// sups holds each test's Supervisor: one per process at a time, shared by
// the backends a test makes.
var sups sync.Map // testing.TB -> *proc.Supervisor

func newSupervisor(tb testing.TB) *proc.Supervisor {
	tb.Helper()
	if s, ok := sups.Load(tb); ok {
		return s.(*proc.Supervisor)
	}
	var sup *proc.Supervisor
	var err error
	if t, ok := tb.(*testing.T); ok {
		sup, err = proc.NewSupervisor(tb.TempDir(), zaptest.NewLogger(t))
	} else {
		sup, err = proc.NewSupervisor(tb.TempDir(), nil)
	}
	if err != nil {
		tb.Fatalf("NewSupervisor: %v", err)
	}
	sups.Store(tb, sup)
	tb.Cleanup(func() {
		_ = sup.Close() // kills whatever a failed test left running
		sups.Delete(tb)
	})
	return sup
}

func newCommand(t *testing.T, cfg CommandConfig) *Command {
	t.Helper()
	c, err := NewCommand(newSupervisor(t), cfg)
	if err != nil {
		t.Fatalf("NewCommand: %v", err)
	}
	return c
}

var specN atomic.Uint32

// spec is a session with a new id in a fresh directory, its log under it.
func spec(t testing.TB) Spec {
	dir := t.TempDir()
	n := specN.Add(1)
	return Spec{
		Agent:     "alice",
		SessionID: "s-" + strconv.Itoa(int(n)),
		Seq:       n,
		Dir:       dir,
		Prompt:    "do the thing\n",
		LogPath:   filepath.Join(dir, "logs", "alice", strconv.Itoa(int(n))+".log"),
	}
}

func start(t *testing.T, b Backend, sp Spec) Session {
	t.Helper()
	s, err := b.Start(context.Background(), sp)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		_ = s.ForceStop()
		<-s.Done()
	})
	return s
}

func wait(t *testing.T, s Session) Result {
	t.Helper()
	select {
	case <-s.Done():
		return s.Result()
	case <-time.After(waitLimit):
		t.Fatalf("session %s not done within %s", s.ID(), waitLimit)
		return Result{}
	}
}

func run(t *testing.T, b Backend, sp Spec) Result {
	t.Helper()
	return wait(t, start(t, b, sp))
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	return string(b)
}

func sh(script string) CommandConfig {
	return CommandConfig{Command: "/bin/sh", Args: []string{"-c", script}}
}

func TestCommandExit(t *testing.T) {
	for _, tc := range []struct {
		script  string
		outcome Outcome
		reason  string
		code    int
		abort   string
	}{
		{"echo out; echo err >&2", OutcomeSuccess, "exit status 0", 0, ""},
		{"exit 3", OutcomeError, "exit status 3", 3, ""},
		{"exit 124", OutcomeError, "exit status 124", 124, AbortTimeout},
		{"exit 126", OutcomeError, "exit status 126", 126, AbortPermissionDenied},
		{"exit 130", OutcomeError, "exit status 130", 130, AbortUserInterrupt},
		{"exit 137", OutcomeError, "exit status 137", 137, AbortOOM},
		{"exit 143", OutcomeError, "exit status 143", 143, AbortShutdownSignal},
		{"kill -KILL $$", OutcomeError, "killed by SIGKILL", -1, AbortOOM},
		{"kill -INT $$", OutcomeError, "killed by SIGINT", -1, AbortUserInterrupt},
		{"kill -HUP $$", OutcomeError, "killed by SIGHUP", -1, AbortUnknown},
	} {
		t.Run(tc.script, func(t *testing.T) {
			r := run(t, newCommand(t, sh(tc.script)), spec(t))
			if r.Outcome != tc.outcome || r.Reason != tc.reason || r.ExitCode != tc.code || r.AbortReason != tc.abort {
				t.Fatalf("result %+v, want %v %q code %d abort %q", r, tc.outcome, tc.reason, tc.code, tc.abort)
			}
			if (r.Signal != "") != (tc.code == -1) {
				t.Fatalf("signal %q with exit code %d", r.Signal, r.ExitCode)
			}
			if r.Started.IsZero() || r.Ended.Before(r.Started) {
				t.Fatalf("times %v..%v", r.Started, r.Ended)
			}
		})
	}
}

func TestLogFile(t *testing.T) {
	c := newCommand(t, sh("echo out; echo err >&2; exit 2"))
	sp := spec(t)
	first := sp
	run(t, c, sp)
	sp.SessionID, sp.Seq = "s-again", 2
	run(t, c, sp) // appends
	got := readLog(t, sp.LogPath)
	ts := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)`
	head := `=== swarmd session ` + first.SessionID + ` seq ` + strconv.Itoa(int(first.Seq))
	want := regexp.MustCompile(`^` + head + ` started ` + ts + ` ===\n` +
		`(out\nerr\n|err\nout\n)` +
		head + ` ended ` + ts + ` outcome error: exit status 2 ===\n` +
		`=== swarmd session s-again seq 2 started ` + ts + ` ===\n`)
	if !want.MatchString(got) {
		t.Fatalf("log:\n%s", got)
	}
}

func TestMissingBinary(t *testing.T) {
	c := newCommand(t, CommandConfig{Command: "no-such-swarmd-binary"})
	sp := spec(t)
	s, err := c.Start(context.Background(), sp)
	if s != nil || !errors.Is(err, ErrBinaryNotFound) || err.Error() != "binary not found: no-such-swarmd-binary" {
		t.Fatalf("Start = %v, %v; want ErrBinaryNotFound naming the binary", s, err)
	}
	if log := readLog(t, sp.LogPath); !strings.Contains(log, "outcome error: binary not found: no-such-swarmd-binary") {
		t.Fatalf("log:\n%s", log)
	}

	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sp = spec(t)
	if _, err := newCommand(t, CommandConfig{Command: notExec}).Start(context.Background(), sp); !errors.Is(err, ErrNotExecutable) {
		t.Fatalf("not executable: %v", err)
	}
	if log := readLog(t, sp.LogPath); !strings.Contains(log, "abort reason permission_denied") {
		t.Fatalf("log:\n%s", log)
	}
}

func TestStartErrors(t *testing.T) {
	c := newCommand(t, sh("true"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Start(ctx, spec(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	sp := spec(t)
	sp.Dir = filepath.Join(sp.Dir, "missing")
	if _, err := c.Start(context.Background(), sp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing dir: %v", err)
	}
	sp = spec(t)
	sp.SessionID = ""
	if _, err := c.Start(context.Background(), sp); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("empty id: %v", err)
	}
	if _, err := NewCommand(newSupervisor(t), CommandConfig{}); err == nil {
		t.Fatal("NewCommand accepted an empty command")
	}
}

func TestEnvAndPrompt(t *testing.T) {
	out := filepath.Join(t.TempDir(), "seen")
	c := newCommand(t, CommandConfig{
		Command: "sh",
		Args:    []string{"-c", `cat >"$OUT.prompt"; env >"$OUT.env"`},
		Env:     []string{"LAYER=backend", "BACKEND_ONLY=1"},
	})
	sp := spec(t)
	sp.Prompt = strings.Repeat("prompt with 'quotes' and $VARS\n", 1<<13) // 256 KiB: more than a pipe holds
	sp.Env = []string{"SWARM_AGENT_ID=alice", "SWARM_SESSION_ID=" + sp.SessionID, "LAYER=spec", "OUT=" + out}
	if r := run(t, c, sp); r.Outcome != OutcomeSuccess {
		t.Fatalf("result %+v", r)
	}
	if got := readLog(t, out+".prompt"); got != sp.Prompt {
		t.Fatalf("stdin got %d bytes, want the %d-byte prompt", len(got), len(sp.Prompt))
	}
	env := "\n" + readLog(t, out+".env")
	for _, want := range []string{"SWARM_AGENT_ID=alice", "SWARM_SESSION_ID=" + sp.SessionID, "LAYER=spec",
		"BACKEND_ONLY=1", "PATH=" + os.Getenv("PATH"), proc.MarkerEnv + "="} {
		if !strings.Contains(env, "\n"+want) {
			t.Errorf("env lacks %q", want)
		}
	}
	if strings.Count(env, "\nLAYER=") != 1 {
		t.Errorf("LAYER appears more than once:%s", env)
	}
}

func newScripted(t *testing.T, steps ...ScriptStep) *Scripted {
	t.Helper()
	b, err := NewScripted(newSupervisor(t), ScriptedConfig{Steps: steps})
	if err != nil {
		t.Fatalf("NewScripted: %v", err)
	}
	return b
}

func TestScriptedSteps(t *testing.T) {
	b := newScripted(t,
		ScriptStep{Print: []string{"one", "it's two"}, PrintEvery: 20 * time.Millisecond},
		ScriptStep{Exit: 2},
		ScriptStep{NoResult: true},
	)
	want := []struct {
		outcome Outcome
		reason  string
	}{
		{OutcomeSuccess, "exit status 0"},
		{OutcomeError, "exit status 2"},
		{OutcomeError, "exit 0 without a success record"},
		{OutcomeSuccess, "exit status 0"}, // steps repeat
	}
	for i, w := range want {
		sp := spec(t)
		sp.Seq = uint32(i + 1)
		s := start(t, b, sp)
		r := wait(t, s)
		if r.Outcome != w.outcome || r.Reason != w.reason {
			t.Fatalf("session %d: %+v, want %v %q", i+1, r, w.outcome, w.reason)
		}
		if i == 0 {
			log := readLog(t, sp.LogPath)
			if !strings.Contains(log, "\none\nit's two\n"+ResultRecord+"\n") {
				t.Fatalf("log:\n%s", log)
			}
			if !s.LastOutput().After(r.Started) {
				t.Fatalf("LastOutput %v not after start %v", s.LastOutput(), r.Started)
			}
		}
	}
}

// findSetsidSleep waits for the session's `setsid sleep` grandchild.
func findSetsidSleep(t *testing.T, sessionID string) (pid int, start string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
			comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
			stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
			if !strings.Contains(string(env), "\x1f"+sessionID+"\x00") || string(comm) != "sleep\n" {
				continue
			}
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
			if f[3] == e.Name() { // session id == pid: it is in a session of its own
				return p, f[19]
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no setsid grandchild of session %s", sessionID)
	return 0, ""
}

func gone(pid int, start string) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	return strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))[19] != start
}

func TestCancel(t *testing.T) {
	b := newScripted(t,
		ScriptStep{SetsidChild: true, Sleep: time.Hour},
		ScriptStep{IgnoreSignals: true, Print: []string{"ready"}, Sleep: time.Hour},
	)

	sp := spec(t)
	sp.Seq = 1
	s := start(t, b, sp)
	pid, st := findSetsidSleep(t, sp.SessionID)
	if err := s.Cancel(); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	r := wait(t, s)
	if r.Outcome != OutcomeError || r.Signal != "SIGTERM" || r.Reason != "killed by SIGTERM (cancelled)" ||
		r.AbortReason != AbortShutdownSignal {
		t.Fatalf("cancelled: %+v", r)
	}
	if !gone(pid, st) {
		t.Fatal("the setsid grandchild outlived its session")
	}
	if err := s.Cancel(); err != nil {
		t.Fatalf("Cancel after the end: %v", err)
	}
	if err := s.ForceStop(); err != nil {
		t.Fatalf("ForceStop after the end: %v", err)
	}

	sp = spec(t)
	sp.Seq = 2
	s = start(t, b, sp)
	// The script prints after setting its trap: its log says when. (Not
	// LastOutput moving on from its first read, which the output can come
	// before on a busy machine: the wait then never ended.)
	deadline := time.Now().Add(waitLimit)
	for {
		if b, _ := os.ReadFile(sp.LogPath); strings.Contains(string(b), "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no output from the script")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Cancel(); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	select {
	case <-s.Done():
		t.Fatalf("a session that ignores the cancel signal ended: %+v", s.Result())
	case <-time.After(200 * time.Millisecond):
	}
	if err := s.ForceStop(); err != nil {
		t.Fatalf("ForceStop: %v", err)
	}
	r = wait(t, s)
	if r.Signal != "SIGKILL" || r.Reason != "killed by SIGKILL (force stop)" || r.AbortReason != AbortShutdownSignal {
		t.Fatalf("force-stopped: %+v", r)
	}
}

// A session that ends on its own while its setsid grandchild holds the
// output pipe ends at once, and takes the grandchild with it.
func TestSetsidChildOnNormalExit(t *testing.T) {
	// The session lives long enough for a scan of /proc on a loaded machine
	// to find the grandchild (300 ms was not, under a parallel test run).
	const sleep = 1500 * time.Millisecond
	b := newScripted(t, ScriptStep{SetsidChild: true, Sleep: sleep})
	sp := spec(t)
	s := start(t, b, sp)
	pid, st := findSetsidSleep(t, sp.SessionID)
	r := wait(t, s)
	if r.Outcome != OutcomeSuccess {
		t.Fatalf("result %+v", r)
	}
	if !gone(pid, st) {
		t.Fatal("the setsid grandchild outlived its session")
	}
	if d := r.Ended.Sub(r.Started); d > sleep+time.Second {
		t.Fatalf("session took %s: the grandchild holding the pipe delayed its end", d)
	}
}

func TestResultParser(t *testing.T) {
	for _, tc := range []struct {
		lines   []string
		success bool
		detail  string
	}{
		{nil, false, ""},
		{[]string{`{"type":"result","is_error":false}`}, true, ""},
		{[]string{`{"type":"assistant","message":"result"}`}, false, ""},
		{[]string{`{"type":"result","is_error":true,"result":"API Error: 401"}`}, false, "API Error: 401"},
		{[]string{`{"type":"result"`, `not json "result"`}, false, ""},
		{[]string{`{"type":"result","is_error":true,"result":"x"}`, `{"type":"result","is_error":false}`}, true, ""},
	} {
		p := &resultParser{}
		for _, l := range tc.lines {
			p.Line([]byte(l))
		}
		if ok, d := p.Verdict(); ok != tc.success || d != tc.detail {
			t.Errorf("%q: verdict %v %q, want %v %q", tc.lines, ok, d, tc.success, tc.detail)
		}
	}
}

func TestScriptQuoting(t *testing.T) {
	b := newScripted(t, ScriptStep{Print: []string{`a'b"c$HOME\n`, "`x`"}, NoResult: true, Exit: 7})
	sp := spec(t)
	r := run(t, b, sp)
	if r.ExitCode != 7 || r.Reason != "exit status 7" {
		t.Fatalf("result %+v", r)
	}
	if log := readLog(t, sp.LogPath); !strings.Contains(log, "\na'b\"c$HOME\\n\n`x`\n===") {
		t.Fatalf("log:\n%s", log)
	}
	if _, err := NewScripted(newSupervisor(t), ScriptedConfig{}); err == nil {
		t.Fatal("NewScripted accepted no steps")
	}
}

// TestCommandResultIsTheOutputTail: a command has no result record, so its
// result text is the end of its output, bounded, ending with its last line.
func TestCommandResultIsTheOutputTail(t *testing.T) {
	r := run(t, newCommand(t, sh(`cat >/dev/null; i=0; while [ $i -lt 3000 ]; do echo "line $i"; i=$((i+1)); done; printf 'work done\nDONE\n\n'`)), spec(t))
	if len(r.Text) > TailBytes || !strings.HasSuffix(r.Text, "work done\nDONE") || !strings.HasPrefix(r.Text, "line ") {
		t.Fatalf("result text (%d bytes) ends %q, starts %q", len(r.Text), r.Text[max(len(r.Text)-20, 0):], r.Text[:min(20, len(r.Text))])
	}
	s := newScripted(t, ScriptStep{Print: []string{"thinking", "FAIL: no parser"}})
	if r := run(t, s, spec(t)); r.Text != "thinking\nFAIL: no parser" {
		t.Fatalf("scripted result text %q (the result record is not part of it)", r.Text)
	}
}
