package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mockllm"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// One task, one change with real Claude Code workers and reviewer on the
// mock API: alice finishes two tasks faster than rita reviews them, rita
// FAILs task 1's first round, alice reworks it. main ends with one merge
// commit per task, each with exactly its own files, task 1's with the
// rework; rita works no task.
func TestClaudeTaskFlow(t *testing.T) {
	bin := realCLI(t, "claude")
	mock := mockllm.New()
	defer mock.Close()
	slow := func(s string) mockllm.Turn { return mockllm.Turn{Text: s, Delay: 2 * time.Second} }
	// Scripts are tried in order: the rework first, then each task, then
	// the reviews; anything else (an idle prompt) gets the default.
	mock.Script("It came back from review (round 1)",
		mockllm.Shell("echo reworked >> one.txt && git commit -qam 'task 1: rework'"), mockllm.Text("reworked it\nDONE"))
	mock.Script("Your task: #1: task one",
		mockllm.Shell("echo one > one.txt && git add one.txt && git commit -qm 'task 1'"), mockllm.Text("wrote one.txt\nDONE"))
	mock.Script("Your task: #2: task two",
		mockllm.Shell("echo two > two.txt && git add two.txt && git commit -qm 'task 2'"), mockllm.Text("wrote two.txt\nDONE"))
	mock.Script("task #1: task one (round 1", slow("one.txt needs a second line\nFAIL"))
	mock.Script("## Review request", slow("looks right\nPASS"))
	mock.Script("", mockllm.Text("nothing to do\nDONE"))

	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  backend: claude
  grace_period: 5s
  min_session_interval: 0s
merge:
  into: main
  gate: ["test -s one.txt || test -s two.txt"]
backends:`+claudeBackend(t, bin, mock, "\n    allowed_tools: [Bash]")+`
agents:
  - {name: alice, role: "You implement.", reviewer: rita}
  - {name: rita, role: "You review."}
`)
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("swarmd running", func(m map[string]any) bool { return m["msg"] == "swarmd running" })
	b, _ := openBoardAt(t, stateDir)
	ctx := context.Background()
	var ids []int64
	for _, title := range []string{"task one", "task two"} {
		tk, err := b.Add(ctx, taskboard.NewTask{Title: title})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
	}
	for _, id := range ids {
		waitTaskLong(t, b, id, task.Closed, d, 3*time.Minute)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, stateDir, 2*time.Second)

	want := map[int64][]string{ids[0]: {"one.txt"}, ids[1]: {"two.txt"}}
	seen := map[int64]bool{}
	for _, c := range strings.Fields(gitOut(t, repo, "log", "--first-parent", "--format=%H", "main")) {
		var id int64
		if _, err := fmt.Sscanf(trailer(gitOut(t, repo, "log", "-1", "--format=%B", c), "Swarmd-Task"), "%d", &id); err != nil {
			continue
		}
		if seen[id] {
			t.Errorf("task %d merged twice", id)
		}
		seen[id] = true
		files := strings.Fields(gitOut(t, repo, "diff", "--name-only", c+"^1", c))
		if !slices.Equal(files, want[id]) {
			t.Errorf("task %d's merge commit changes %v, want exactly %v", id, files, want[id])
		}
	}
	if !seen[ids[0]] || !seen[ids[1]] {
		t.Fatalf("merged tasks %v, want both of %v", seen, ids)
	}
	if got := gitOut(t, repo, "show", "main:one.txt"); got != "one\nreworked\n" {
		t.Errorf("main's one.txt = %q, want the reworked version", got)
	}
	for _, id := range ids {
		tk, err := b.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Worker != "alice" {
			t.Errorf("task %d worked by %q, want alice (rita reviews only)", id, tk.Worker)
		}
	}
}
