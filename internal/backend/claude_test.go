package backend

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/environ"
	"github.com/swarmd/swarmd/internal/mockllm"
	"github.com/swarmd/swarmd/internal/proc"
)

func TestClaudeArgsAndEnv(t *testing.T) {
	c, err := NewClaude(newSupervisor(t), AgentCLIConfig{Model: "opus", AllowedTools: []string{"Bash", "Edit"},
		Args: []string{"--dangerously-skip-permissions"}, Env: []string{"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=0"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-p", "--output-format", "stream-json", "--verbose", "--model", "opus",
		"--allowedTools", "Bash", "--allowedTools", "Edit", "--dangerously-skip-permissions"}
	if !slices.Equal(c.cli.args, want) {
		t.Fatalf("args %q, want %q", c.cli.args, want)
	}
	if c.Name() != "claude" || c.cli.command != "claude" || c.cli.cancelSig != syscall.SIGINT {
		t.Fatalf("defaults: name %q command %q signal %v", c.Name(), c.cli.command, c.cli.cancelSig)
	}
	env := environ.Build("", c.cli.env)
	if slices.Contains(env, "IS_SANDBOX=1") != (syscall.Geteuid() == 0) {
		t.Errorf("IS_SANDBOX as uid %d: env %q", syscall.Geteuid(), env)
	}
	if !slices.Contains(env, "CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=0") {
		t.Errorf("the configured env does not win: %q", env)
	}
	c, _ = NewClaude(newSupervisor(t), AgentCLIConfig{Name: "cc", Command: "/opt/claude", CancelSignal: syscall.SIGTERM})
	if slices.Contains(c.cli.env, "IS_SANDBOX=1") || c.Name() != "cc" || c.cli.command != "/opt/claude" || c.cli.cancelSig != syscall.SIGTERM {
		t.Errorf("configured: %+v", c.cli)
	}
	if _, err := NewClaude(nil, AgentCLIConfig{}); err == nil {
		t.Error("nil supervisor accepted")
	}
}

func TestClaudeCommits(t *testing.T) { testCommit(t, claudeKind) }

// TestClaudeSkipPermissions: with --dangerously-skip-permissions instead of
// allowed tools; as root the CLI refuses that flag unless IS_SANDBOX=1,
// which the backend sets.
func TestClaudeSkipPermissions(t *testing.T) {
	kind := claudeKind
	kind.args = []string{"--dangerously-skip-permissions"}
	kind.make = func(sup *proc.Supervisor, cfg AgentCLIConfig) (Backend, error) { return NewClaude(sup, cfg) }
	testCommit(t, kind)
}
func TestClaudeInterrupt(t *testing.T) { testInterrupt(t, claudeKind) }

// TestClaudeUnauthorizedIsFatalAtOnce: Claude Code retries a 401 for
// minutes; the first api_retry line is enough to end the session.
func TestClaudeUnauthorizedIsFatalAtOnce(t *testing.T) {
	script := make([]mockllm.Turn, 20)
	for i := range script {
		script[i] = mockllm.Status(401)
	}
	rig := newCLIRig(t, claudeKind, nil, script...)
	sp := rig.spec(t)
	s := rig.start(t, sp)
	r := waitCLI(t, s, sp, 20*time.Second)
	if r.Outcome != OutcomeError || !strings.Contains(r.Fatal, "authentication failed") || !strings.Contains(r.Reason, "fatal") {
		t.Fatalf("result %+v\nlog:\n%s", r, logOf(t, sp))
	}
	first := firstScripted(t, rig.mock)
	if d := r.Ended.Sub(first.Time); d > 5*time.Second {
		t.Fatalf("session ended %v after the first 401", d)
	}
	if n := len(rig.mock.Scripted()); n > 3 {
		t.Fatalf("the CLI got to retry %d times", n)
	}
	if left := treeProcs(t, sp.SessionID); len(left) > 0 {
		t.Fatalf("processes left: %q", left)
	}
	t.Logf("first 401 -> session done %v: %s", r.Ended.Sub(first.Time), r.Reason)
}

// TestClaudeRateLimited: a 429 with retry-after that outlasts the CLI's
// retries leaves a rate-limited error whose RetryAfter honours the delay.
func TestClaudeRateLimited(t *testing.T) {
	rig := newCLIRig(t, claudeKind, []string{"CLAUDE_CODE_MAX_RETRIES=1"},
		mockllm.Status(429, "retry-after", "1"), mockllm.Status(429, "retry-after", "1"), mockllm.Text("never"))
	sp := rig.spec(t)
	s := rig.start(t, sp)
	r := waitCLI(t, s, sp, cliLimit)
	if r.Outcome != OutcomeError || !r.RateLimited || r.Fatal != "" {
		t.Fatalf("result %+v\nlog:\n%s", r, logOf(t, sp))
	}
	first := firstScripted(t, rig.mock)
	// The CLI waited out the retry-after before its retry; the reset time
	// is at least that.
	if r.RetryAfter.Before(first.Time.Add(time.Second)) || r.RetryAfter.After(r.Ended.Add(5*time.Second)) {
		t.Fatalf("RetryAfter %v; first 429 at %v, ended %v", r.RetryAfter, first.Time, r.Ended)
	}
	if n := len(rig.mock.Scripted()); n != 2 {
		t.Fatalf("mock saw %d requests, want 2", n)
	}
}

// TestClaudeServerErrorsThenSuccess: 500 twice, then an answer: the CLI's
// own retries get through and the session is a success.
func TestClaudeServerErrorsThenSuccess(t *testing.T) {
	rig := newCLIRig(t, claudeKind, nil, mockllm.Status(500), mockllm.Status(500), mockllm.Text("Recovered."))
	sp := rig.spec(t)
	s := rig.start(t, sp)
	r := waitCLI(t, s, sp, cliLimit)
	if r.Outcome != OutcomeSuccess || r.Text != "Recovered." || r.RateLimited || r.Fatal != "" {
		t.Fatalf("result %+v\nlog:\n%s", r, logOf(t, sp))
	}
	reqs := rig.mock.Scripted()
	if len(reqs) != 3 || reqs[2].Turn != 2 {
		t.Fatalf("mock answered %d requests", len(reqs))
	}
}

// fakeCLI writes an executable shell script standing in for an agent CLI.
func fakeCLI(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake-cli")
	if err := os.WriteFile(path, []byte("#!/bin/sh\ncat >/dev/null\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFatalLineEndsSession: the session ends as soon as the output shows
// an authentication error, though the CLI would go on retrying, and even
// if it ignores the cancel signal.
func TestFatalLineEndsSession(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		trap := ""
		if ignore {
			trap = "trap '' INT TERM\n"
		}
		bin := fakeCLI(t, trap+`echo '{"type":"system","subtype":"init"}'
echo '{"type":"system","subtype":"api_retry","attempt":1,"retry_delay_ms":500,"error_status":401,"error":"authentication_failed"}'
sleep 300
echo '{"type":"result","is_error":false,"result":"recovered"}'
`)
		c, err := NewClaude(newSupervisor(t), AgentCLIConfig{Command: bin})
		if err != nil {
			t.Fatal(err)
		}
		sp := spec(t)
		began := time.Now()
		r := run(t, c, sp)
		if d := time.Since(began); d > fatalGrace+3*time.Second {
			t.Errorf("ignore %v: session took %v", ignore, d)
		}
		if r.Outcome != OutcomeError || !strings.Contains(r.Fatal, "401") || !strings.HasPrefix(r.Reason, "fatal: ") || r.AbortReason != "" {
			t.Errorf("ignore %v: result %+v", ignore, r)
		}
		if ignore && r.Signal != "SIGKILL" {
			t.Errorf("a CLI ignoring SIGINT ended by %q, want SIGKILL after the grace", r.Signal)
		}
		if log := readLog(t, sp.LogPath); !strings.Contains(log, "outcome error: fatal: authentication failed") {
			t.Errorf("log footer:\n%s", log)
		}
	}
}

// TestRateLimitThenSuccess: a rate limit that the CLI's own retry got past
// does not make the runner cool down.
func TestRateLimitThenSuccess(t *testing.T) {
	bin := fakeCLI(t, `echo '{"type":"system","subtype":"api_retry","retry_delay_ms":60000,"error_status":429,"error":"rate_limit"}'
echo '{"type":"result","is_error":false,"result":"fine","total_cost_usd":0.25,"usage":{"input_tokens":5,"output_tokens":7}}'
`)
	c, err := NewClaude(newSupervisor(t), AgentCLIConfig{Command: bin})
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, c, spec(t))
	if r.Outcome != OutcomeSuccess || r.RateLimited || !r.RetryAfter.IsZero() || r.Text != "fine" {
		t.Fatalf("result %+v", r)
	}
	if r.Usage != (Usage{InputTokens: 5, OutputTokens: 7, CostUSD: 0.25}) || r.ResultAt.IsZero() {
		t.Fatalf("usage %+v, ResultAt %v", r.Usage, r.ResultAt)
	}

	bin = fakeCLI(t, `echo '{"type":"system","subtype":"api_retry","retry_delay_ms":60000,"error_status":429,"error":"rate_limit"}'
echo '{"type":"result","is_error":true,"result":"API Error: 429","api_error_status":429}'
exit 1
`)
	c, _ = NewClaude(newSupervisor(t), AgentCLIConfig{Command: bin})
	r = run(t, c, spec(t))
	if r.Outcome != OutcomeError || !r.RateLimited || r.RetryAfter.Before(r.Started.Add(59*time.Second)) {
		t.Fatalf("result %+v", r)
	}
	if !strings.Contains(r.Reason, "exit status 1: API Error: 429") {
		t.Fatalf("reason %q", r.Reason)
	}
}

// TestExitZeroWithoutResult: Claude Code exits 0 on SIGINT without a result
// record; that is not a success.
func TestExitZeroWithoutResult(t *testing.T) {
	c, _ := NewClaude(newSupervisor(t), AgentCLIConfig{Command: fakeCLI(t, "echo '{\"type\":\"system\",\"subtype\":\"init\"}'\n")})
	if r := run(t, c, spec(t)); r.Outcome != OutcomeError || r.Reason != "exit 0 without a success record" {
		t.Fatalf("result %+v", r)
	}
}

// BenchmarkClaudeSession is one real Claude Code session per op through the
// backend, against the mock (one text turn), reporting where the time goes:
// spawn -> the CLI's first request at the mock, and its result record ->
// the session done (the CLI's exit after its result plus the tree's end).
func BenchmarkClaudeSession(b *testing.B) {
	bin := cliBin(b, "claude")
	m := mockllm.New(mockllm.Text("Done."))
	defer m.Close()
	home := b.TempDir()
	env := append([]string{"HOME=" + home, "TMPDIR=" + home}, claudeKind.env(b, home, m.URL())...)
	c, err := NewClaude(newSupervisor(b), AgentCLIConfig{Command: bin, Env: env})
	if err != nil {
		b.Fatal(err)
	}
	repo := gitRepo(b)
	var toReq, toDone time.Duration
	seen := 0
	for i := 0; b.Loop(); i++ {
		sp := Spec{Agent: "alice", SessionID: "bench-" + strconv.Itoa(i), Seq: uint32(i + 1), Dir: repo,
			Prompt: "Say done.\n", LogPath: filepath.Join(home, "bench.log")}
		s, err := c.Start(context.Background(), sp)
		if err != nil {
			b.Fatal(err)
		}
		<-s.Done()
		r := s.Result()
		if r.Outcome != OutcomeSuccess {
			b.Fatalf("result %+v", r)
		}
		reqs := m.Scripted()
		toReq += reqs[seen].Time.Sub(r.Started)
		seen = len(reqs)
		toDone += r.Ended.Sub(r.ResultAt)
	}
	b.ReportMetric(float64(toReq.Milliseconds())/float64(b.N), "ms-spawn-to-request")
	b.ReportMetric(float64(toDone.Milliseconds())/float64(b.N), "ms-result-to-done")
}

// BenchmarkClaudeDirect is the baseline: the same session run with os/exec
// and a pipe, the result record found by a plain scan, no tree tracking. Its
// result -> exit is the CLI's own part of the session's result -> done.
func BenchmarkClaudeDirect(b *testing.B) {
	bin := cliBin(b, "claude")
	m := mockllm.New(mockllm.Text("Done."))
	defer m.Close()
	home := b.TempDir()
	env := append(os.Environ(), "HOME="+home, "TMPDIR="+home, "CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1")
	env = append(env, claudeKind.env(b, home, m.URL())...)
	repo := gitRepo(b)
	var toReq, toExit time.Duration
	seen := 0
	for b.Loop() {
		cmd := exec.Command(bin, "-p", "--output-format", "stream-json", "--verbose")
		cmd.Dir, cmd.Env, cmd.Stderr = repo, env, io.Discard
		cmd.Stdin = strings.NewReader("Say done.\n")
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		started := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		var resultAt time.Time
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, DefaultMaxLine)
		for sc.Scan() {
			if bytes.Contains(sc.Bytes(), []byte(`"type":"result"`)) {
				resultAt = time.Now()
			}
		}
		if err := cmd.Wait(); err != nil || resultAt.IsZero() {
			b.Fatalf("claude: %v, result seen %v", err, !resultAt.IsZero())
		}
		toExit += time.Since(resultAt)
		reqs := m.Scripted()
		toReq += reqs[seen].Time.Sub(started)
		seen = len(reqs)
	}
	b.ReportMetric(float64(toReq.Milliseconds())/float64(b.N), "ms-spawn-to-request")
	b.ReportMetric(float64(toExit.Milliseconds())/float64(b.N), "ms-result-to-exit")
}

// TestClaudeProbeCapsItsRetries: a probe session (the provider's breaker
// granted it) runs Claude Code with its own retries off; any other session
// runs with the CLI's default.
func TestClaudeProbeCapsItsRetries(t *testing.T) {
	dir := t.TempDir()
	cli := filepath.Join(dir, "claude")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\ncat >/dev/null\nenv | grep '^CLAUDE_CODE_MAX_RETRIES=' >> \"$ENV_OUT\"\necho probe-$1 >> \"$ENV_OUT\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "env")
	c, err := NewClaude(newSupervisor(t), AgentCLIConfig{Command: cli, Env: []string{"ENV_OUT=" + out}})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t)
	sp.Probe = true
	run(t, c, sp)
	run(t, c, spec(t))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "CLAUDE_CODE_MAX_RETRIES=0"); got != 1 || strings.Count(string(b), "probe-") != 2 {
		t.Fatalf("two sessions, the first a probe; their env:\n%s", b)
	}
}

// Claude Code gets max_turns as --max-turns and stops there itself: a
// count of the stream alone is no limit, since code in the session can
// write that stream.
func TestClaudeGetsMaxTurns(t *testing.T) {
	args := filepath.Join(t.TempDir(), "args")
	bin := fakeCLI(t, `printf '%s\n' "$@" > `+args+`
echo '{"type":"result","is_error":false,"result":"fine","usage":{"input_tokens":5,"output_tokens":7}}'
`)
	c, err := NewClaude(newSupervisor(t), AgentCLIConfig{Command: bin})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t)
	sp.MaxTurns = 3
	if r := run(t, c, sp); r.Outcome != OutcomeSuccess {
		t.Fatalf("result %+v", r)
	}
	b, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "--max-turns\n3\n") {
		t.Errorf("claude's arguments:\n%s\nwant --max-turns 3", b)
	}
}
