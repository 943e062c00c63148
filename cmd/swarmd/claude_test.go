package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/cli"
	"github.com/swarmd/swarmd/internal/mockllm"
)

// realCLI finds a real agent CLI (claude, codex, gemini) installed by
// scripts/install-clis.sh, or skips loudly (fails when SWARMD_REQUIRE_CLIS=1).
func realCLI(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("SWARMD_CLI_DIR")
	if dir == "" {
		dir, _ = filepath.Abs(filepath.Join("..", "..", ".cache", "clis"))
	}
	bin := filepath.Join(dir, "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("*** %s CLI NOT INSTALLED (%s): this real-CLI test did NOT run; see scripts/install-clis.sh", name, bin)
		if os.Getenv("SWARMD_REQUIRE_CLIS") == "1" {
			t.Fatal(msg)
		}
		fmt.Fprintln(os.Stderr, msg)
		t.Skip(msg)
	}
	return bin
}

// TestTwoClaudeAgentsUrgentMail: alice's Claude session runs `swarmd mail
// send --urgent` through its Bash tool while bob's session waits on a slow
// model response; bob is interrupted, and the request of his next session
// (as the mock LLM sees it) holds the message.
func TestTwoClaudeAgentsUrgentMail(t *testing.T) {
	bin := realCLI(t, "claude")
	mock := mockllm.New()
	defer mock.Close()
	slow := mockllm.Turn{Text: "thinking", Delay: 10 * time.Minute}
	mock.Script("stop and rebase", mockllm.Text("ok, rebasing first"))
	mock.Script("Your previous session finished successfully", slow)
	mock.Script("You are agent `bob`", slow)
	mock.Script("You are agent `alice`",
		mockllm.Shell("swarmd mail send --to bob --urgent --subject halt 'stop and rebase'"),
		mockllm.Text("sent"))

	repo := gitRepo(t)
	home := t.TempDir()
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
defaults:
  backend: claude
  grace_period: 5s
backends:
  claude:
    command: %s
    allowed_tools: [Bash]
    env:
      ANTHROPIC_BASE_URL: %s
      ANTHROPIC_API_KEY: sk-ant-test
      DISABLE_TELEMETRY: "1"
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"
      DISABLE_AUTOUPDATER: "1"
      HOME: %s
      TMPDIR: %s
agents:
  - {name: alice, role: "You coordinate."}
  - {name: bob, role: "You implement."}
`, bin, mock.URL(), home, t.TempDir()))
	d := startDaemon(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d.waitLine("bob interrupted", func(m map[string]any) bool {
		return transitionTo("bob", "Interrupting")(m) && m["event"] == "UrgentMessage"
	})
	req, err := mock.WaitRequest(ctx, func(r mockllm.Request) bool {
		return r.BodyContains("stop and rebase") && r.BodyContains("URGENT from alice")
	})
	if err != nil {
		t.Fatalf("bob's next prompt never reached the model: %v", err)
	}
	if !req.BodyContains("You are agent `bob`") {
		t.Errorf("the request with the message is not bob's")
	}
	d.waitLine("alice's session succeeded", func(m map[string]any) bool {
		return m["msg"] == "transition" && m["agent"] == "alice" && m["event"] == "SessionExited(Success)"
	})
	waitAliceSpend(t, cfg)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, filepath.Join(repo, ".swarm"), 2*time.Second)

	// bob's first session is recorded as interrupted by urgent mail, not as
	// an error.
	out, stderr, code := runCLI(t, nil, "", "sessions", "bob", "--json", "-n", "0", "-c", cfg)
	var first cli.SessionJSON
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&first); code != 0 || err != nil {
		t.Fatalf("sessions bob --json: %d %v %s\n%s", code, err, stderr, out)
	}
	if first.Seq != 1 || first.Outcome != "interrupted" || first.AbortReason != "urgent_message" {
		t.Errorf("bob's interrupted session recorded as %+v", first)
	}
	// alice's log renders to the tool call that sent the mail and its result.
	out, _, code = runCLI(t, nil, "", "logs", "alice", "--session", "1", "--pretty", "-c", cfg)
	for _, want := range []string{"\n→ Bash: swarmd mail send --to bob --urgent --subject halt 'stop and rebase'\n", "\n✓ success", "\n  tokens: "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("logs alice --pretty lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(d.log(), `"level":"error"`) {
		t.Logf("daemon logged errors:\n%s", grepLines(d.log(), `{"level":"error"`))
	}
}

// waitAliceSpend waits until status shows the cost alice's session reported
// (the journal writes sessions in batches).
func waitAliceSpend(t *testing.T, cfg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, code := runCLI(t, nil, "", "status", "--json", "-c", cfg)
		var rows []cli.StatusRow
		if code == 0 && json.Unmarshal([]byte(out), &rows) == nil {
			for _, r := range rows {
				if r.Name == "alice" && r.Spend != nil && r.Spend.CostUSD > 0 && r.Spend.TokensIn > 0 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed alice's spend:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClaudeMaxTurnsAndAudit: a real Claude Code session whose model would
// go on calling tools ends at max_turns (2): recorded as max_turns, not an
// error, and `swarmd audit` lists each of its tool calls with its command
// and whether it failed; the third command never ran.
func TestClaudeMaxTurnsAndAudit(t *testing.T) {
	bin := realCLI(t, "claude")
	mock := mockllm.New(mockllm.Shell("echo first-call"), mockllm.Shell("ls /nonexistent-dir"),
		mockllm.Shell("touch third.txt"), mockllm.Text("done"))
	defer mock.Close()
	repo := gitRepo(t)
	home := t.TempDir()
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
defaults:
  backend: claude
  max_turns: 2
  max_sessions: 1
backends:
  claude:
    command: %s
    allowed_tools: [Bash]
    env:
      ANTHROPIC_BASE_URL: %s
      ANTHROPIC_API_KEY: sk-ant-test
      DISABLE_TELEMETRY: "1"
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"
      DISABLE_AUTOUPDATER: "1"
      HOME: %s
      TMPDIR: %s
agents:
  - {name: alice, role: "You run commands."}
`, bin, mock.URL(), home, t.TempDir()))
	d := startDaemon(t, cfg)
	d.waitLine("alice Stopped after one session", transitionTo("alice", "Stopped"))
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, err := os.Stat(filepath.Join(repo, ".swarm", "worktrees", "alice", "third.txt")); err == nil {
		t.Fatal("the third turn's command ran")
	}

	out, stderr, code := runCLI(t, nil, "", "sessions", "alice", "--json", "-c", cfg)
	var s cli.SessionJSON
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&s); code != 0 || err != nil {
		t.Fatalf("sessions: %d %v %s", code, err, stderr)
	}
	if s.Outcome != "max_turns" || s.AbortReason != "max_turns" || s.ToolCalls != 2 {
		t.Fatalf("session recorded as %+v", s)
	}
	// Not an error: no backoff, and the agent stopped for max_sessions.
	if strings.Contains(d.log(), `"to":"CoolingDown"`) || !strings.Contains(d.log(), `"reason":"max_sessions: 1 sessions run"`) {
		t.Errorf("a max_turns session was taken for an error; log:\n%s", grepLines(d.log(), `{"level":"info","ts"`))
	}

	out, stderr, code = runCLI(t, nil, "", "audit", "--agent", "alice", "--json", "-c", cfg)
	if code != 0 {
		t.Fatalf("audit: %d %s", code, stderr)
	}
	var calls []cli.AuditJSON
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var c cli.AuditJSON
		if err := dec.Decode(&c); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	if len(calls) != 2 {
		t.Fatalf("audit lists %d calls, want 2:\n%s", len(calls), out)
	}
	for i, want := range []struct{ input, status string }{{"echo first-call", "ok"}, {"ls /nonexistent-dir", "error"}} {
		c := calls[i]
		if c.Tool != "Bash" || c.Input != want.input || c.Status != want.status || c.DurationMS == nil ||
			c.SessionID != s.SessionID || c.Seq != 1 || c.CallID == "" || c.Started.IsZero() {
			t.Errorf("call %d = %+v; want Bash %q %s", i, c, want.input, want.status)
		}
	}
	out, _, code = runCLI(t, nil, "", "audit", "--tool", "Bash", "-n", "1", "-c", cfg)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "STARTED") ||
		!strings.Contains(lines[1], "ls /nonexistent-dir") || !strings.Contains(lines[1], " error ") {
		t.Errorf("audit --tool Bash -n 1:\n%s", out)
	}
}
