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

	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/mockllm"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// cliPath is a real agent CLI installed by scripts/install-clis.sh, or a
// loud skip (a failure with SWARMD_REQUIRE_CLIS=1).
func cliPath(t *testing.T, name string) string {
	t.Helper()
	return realCLI(t, name)
}

// TestRealCLIsFinishTasksByDone: Claude Code, Codex and Gemini CLI, each
// holding a task, end their session with a final message whose last line is
// DONE; the real CLIs' own result records carry it, and each task closes.
func TestRealCLIsFinishTasksByDone(t *testing.T) {
	claude, codex, gemini := cliPath(t, "claude"), cliPath(t, "codex"), cliPath(t, "gemini")
	mock := mockllm.New()
	defer mock.Close()
	mock.Script("Your task: #", mockllm.Text("Implemented it and committed.\nDONE"))
	repo := gitRepo(t)
	home := t.TempDir()
	codexHome := codexConfig(t, mock.URL())
	geminiSettings(t, home)
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
defaults:
  grace_period: 5s
  env: {HOME: %[4]q, TMPDIR: %[5]q, DISABLE_TELEMETRY: "1", DISABLE_AUTOUPDATER: "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"}
backends:
  claude:
    command: %[1]s
    env: {ANTHROPIC_BASE_URL: %[6]q, ANTHROPIC_API_KEY: sk-ant-test}
  codex:
    command: %[2]s
    args: [--dangerously-bypass-approvals-and-sandbox]
    env: {CODEX_HOME: %[7]q, MOCK_API_KEY: test-key}
  gemini:
    command: %[3]s
    args: [--yolo]
    env: {GEMINI_API_KEY: test-key, GOOGLE_GEMINI_BASE_URL: %[6]q}
agents:
  - {name: cl, role: works, backend: claude}
  - {name: cx, role: works, backend: codex}
  - {name: gm, role: works, backend: gemini}
`, claude, codex, gemini, home, t.TempDir(), mock.URL(), codexHome))
	// The tasks are on the board before the daemon starts: each agent's
	// first prompt claims its own.
	stateDir := filepath.Join(repo, ".swarm")
	_, b, ids := tasksFor(t, stateDir, "cl", "cx", "gm")
	d := startDaemon(t, cfg)
	for a, id := range ids {
		got := waitTask(t, b, id, task.Closed, d)
		if !strings.HasSuffix(strings.TrimSpace(got.Result), "DONE") || got.Claimant != a {
			t.Errorf("%s's task closed with result %q by %q", a, got.Result, got.Claimant)
		}
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, stateDir, 2*time.Second)
}

// geminiSettings makes Gemini CLI in home use an API key (the mock's).
func geminiSettings(t *testing.T, home string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"),
		[]byte(`{"security":{"auth":{"selectedType":"gemini-api-key"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tasksFor puts a task "task for A", assigned to A, for each of agents on
// the board in stateDir before a daemon starts there (each agent's first
// prompt claims its own), and returns the store, the board and the ids.
func tasksFor(t *testing.T, stateDir string, agents ...string) (*mailbox.Mailbox, *taskboard.Board, map[string]int64) {
	t.Helper()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := mailbox.Open(context.Background(), filepath.Join(stateDir, "swarm.db"), store.Options{}, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b, err := daemon.OpenTaskBoard(context.Background(), db.Store(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, a := range agents {
		tk, err := b.Add(context.Background(), taskboard.NewTask{Title: "task for " + a, Assignee: a})
		if err != nil {
			t.Fatal(err)
		}
		ids[a] = tk.ID
	}
	return db, b, ids
}
