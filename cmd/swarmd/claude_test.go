package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mockllm"
)

// claudeBin finds the real Claude Code CLI installed by
// scripts/install-clis.sh, or skips loudly (fails when SWARMD_REQUIRE_CLIS=1).
func claudeBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SWARMD_CLI_DIR")
	if dir == "" {
		dir, _ = filepath.Abs(filepath.Join("..", "..", ".cache", "clis"))
	}
	bin := filepath.Join(dir, "node_modules", ".bin", "claude")
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("*** claude CLI NOT INSTALLED (%s): this real-CLI test did NOT run; see scripts/install-clis.sh", bin)
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
	bin := claudeBin(t)
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
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, filepath.Join(repo, ".swarm"), 2*time.Second)
	if strings.Contains(d.log(), `"level":"error"`) {
		t.Logf("daemon logged errors:\n%s", grepLines(d.log(), `{"level":"error"`))
	}
}
