package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// lineWorker is alice: it writes tN.txt for task N and commits. Its tasks'
// titles ask for more: conflict-a and conflict-b both write shared.txt, so
// the second to merge conflicts; gate also writes broken.txt, which the
// merge gate refuses; slow commits stale.txt on its first attempt, then
// hangs (the test kills the daemon under it). Sent back, it does what the
// feedback asks: merge the target in, remove what the gate refused, or
// write v2.
const lineWorker = `p=$(cat)
n=$(printf '%s\n' "$p" | sed -n -E 's/^(Your task: #|Continue your task #)([0-9]+): .*/\2/p' | head -1)
title=$(printf '%s\n' "$p" | sed -n -E 's/^(Your task: #|Continue your task #)[0-9]+: (.*)/\2/p' | head -1)
if [ -z "$n" ]; then printf 'nothing\nDONE\n'; exit 0; fi
case "$p" in
*"It conflicts with main"*)
  git merge -q --no-edit main >/dev/null 2>&1 || { printf 'c1\nc2\n' > shared.txt; git add shared.txt; git commit -q --no-edit; }
  printf 'merged main in\nDONE\n'; exit 0;;
*"The merge gate failed"*)
  git rm -q broken.txt; git commit -q -m "task $n: no broken.txt"; printf 'fixed\nDONE\n'; exit 0;;
*"came back from review"*)
  echo v2 > "t$n.txt"; git add -A; git commit -q -m "task $n: v2"; printf 'v2\nDONE\n'; exit 0;;
esac
echo v1 > "t$n.txt"
case "$title" in
conflict-a) echo c1 > shared.txt;;
conflict-b) echo c2 > shared.txt;;
gate) echo x > broken.txt;;
slow) if [ ! -e "$MARK" ]; then touch "$MARK"; echo stale > stale.txt; git add -A; git commit -q -m "task $n: stale"; touch "$MARK.committed"; exec sleep 120; fi;;
esac
git add -A; git commit -q -m "task $n"; printf 'done\nDONE\n'`

// lineReviewer is rita, review-only and slower than alice: FAIL on the
// first round of needs-work, PASS otherwise.
const lineReviewer = `p=$(cat)
case "$p" in *"## Review request"*) ;; *) printf 'idle\nDONE\n'; exit 0;; esac
sleep 1
case "$p" in *"needs-work (round 1 "*) printf 'write v2\nFAIL\n';; *) printf 'fine\nPASS\n';; esac`

// One task, one change, end to end with real processes: a worker faster
// than its reviewer, a FAIL on one task's first round, a conflict between
// two tasks, a gate that fails for one task, and a worker killed with
// its daemon mid-task. main ends with one merge commit per task, each
// carrying exactly its own files; the FAILed round never reaches main;
// the gate failure goes back to the task that caused it; the reviewer
// claims nothing; the killed attempt never merges.
func TestOneTaskOneChange(t *testing.T) {
	t.Parallel() // its own repository and daemon; 16 s mostly of waiting on sessions and the gate
	repo := gitRepo(t)
	marks := t.TempDir()
	mark := filepath.Join(marks, "slow-started")
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
sandbox: {writable: [`+marks+`]}
defaults:
  min_session_interval: 0s
  env: {MARK: %q}
merge:
  into: main
  gate: ["test ! -e broken.txt"]
backends:
  worker: {type: command, command: sh, args: [-c, %q]}
  reviewer: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: alice, role: works, backend: worker, reviewer: rita}
  - {name: rita, role: reviews, backend: reviewer}
`, mark, lineWorker, lineReviewer))
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("rita idle", idleLine("rita"))
	b, _ := openBoardAt(t, stateDir)
	ctx := context.Background()
	titles := []string{"plain", "needs-work", "conflict-a", "conflict-b", "gate"}
	ids := map[string]int64{}
	for _, title := range titles {
		tk, err := b.Add(ctx, taskboard.NewTask{Title: title}) // unassigned: the reviewer could claim them
		if err != nil {
			t.Fatal(err)
		}
		ids[title] = tk.ID
	}
	for _, title := range titles {
		waitTaskLong(t, b, ids[title], task.Closed, d, 90*time.Second)
	}

	// The worker killed with its daemon mid-task: its attempt committed
	// stale.txt on alice's branch, and never merges.
	slow, err := b.Add(ctx, taskboard.NewTask{Title: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	ids["slow"] = slow.ID
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(mark + ".committed"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow task's first attempt never committed; log:\n%s", d.log())
		}
	}
	// The commit's objects are in alice's quarantine while her sandbox
	// runs, and the kill leaves them there; the next start moves them.
	stale := strings.TrimSpace(gitOut(t, repo, "rev-parse", "swarm/alice/work"))
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	d.wait(10 * time.Second)
	_, err = os.Stat(filepath.Join(stateDir, "q", "alice"))
	quarantined := err == nil // sandboxed: bwrap is here
	if quarantined && gitMay(repo, "cat-file", "-t", stale) != "" {
		t.Errorf("the running session's commit %s was in the repository before its session ended", stale)
	}
	d = startDaemon(t, cfg)
	if quarantined {
		d.waitLine("the killed session's objects moved", func(m map[string]any) bool {
			return m["agent"] == "alice" && m["msg"] == "moved the objects an earlier daemon's session left into the repository"
		})
	}
	if got := strings.TrimSpace(gitMay(repo, "cat-file", "-t", stale)); got != "commit" {
		t.Fatalf("the killed session's commit %s after the restart: %q; log:\n%s", stale, got, d.log())
	}
	waitTaskLong(t, b, slow.ID, task.Closed, d, 60*time.Second)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}

	// One merge commit per task on main's first-parent line, each with
	// exactly its own files.
	want := map[int64][]string{}
	for title, id := range ids {
		files := []string{fmt.Sprintf("t%d.txt", id)}
		if strings.HasPrefix(title, "conflict-") {
			files = append(files, "shared.txt")
		}
		slices.Sort(files)
		want[id] = files
	}
	merged := map[int64]string{}
	for _, line := range strings.Split(strings.TrimSpace(gitOut(t, repo, "log", "--first-parent", "--format=%H", "main")), "\n") {
		var id int64
		body := gitOut(t, repo, "log", "-1", "--format=%B", line)
		if _, err := fmt.Sscanf(trailer(body, "Swarmd-Task"), "%d", &id); err != nil {
			continue // the initial commit
		}
		if prev, dup := merged[id]; dup {
			t.Errorf("task %d merged twice: %s and %s", id, prev, line)
		}
		merged[id] = line
		if !strings.Contains(body, fmt.Sprintf("from swarm/task/%d", id)) {
			t.Errorf("task %d's merge commit does not name its branch swarm/task/%d:\n%s", id, id, body)
		}
		files := strings.Fields(gitOut(t, repo, "diff", "--name-only", line+"^1", line))
		slices.Sort(files)
		if !slices.Equal(files, want[id]) {
			t.Errorf("task %d's merge commit %.12s changes %v, want exactly %v", id, line, files, want[id])
		}
		// The FAILed round (v1 of needs-work) never reached main.
		if id == ids["needs-work"] {
			if got := strings.TrimSpace(gitOut(t, repo, "show", line+":"+want[id][0])); got != "v2" {
				t.Errorf("needs-work merged with %q, want the reworked v2", got)
			}
		}
	}
	for title, id := range ids {
		if _, ok := merged[id]; !ok {
			t.Errorf("task %d (%s) has no merge commit of its own on main", id, title)
		}
	}
	if _, err := exec.Command("git", "-C", repo, "cat-file", "-e", "main:stale.txt").CombinedOutput(); err == nil {
		t.Errorf("the killed attempt's stale.txt reached main")
	}
	for _, c := range strings.Fields(gitOut(t, repo, "log", "--first-parent", "--format=%H", "main")) {
		if strings.TrimSpace(gitMay(repo, "show", c+":"+want[ids["needs-work"]][0])) == "v1" {
			t.Errorf("main at %.12s holds needs-work's FAILed round", c)
		}
	}

	pruneLines(t, repo, cfg, ids)

	// Who did what: alice worked every task, the reviewer none; the gate's
	// rejection went to the gate task alone, the conflict to conflict-b.
	for title, id := range ids {
		tk, err := b.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Worker != "alice" {
			t.Errorf("task %d (%s) worked by %q, want alice", id, title, tk.Worker)
		}
		h, err := b.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var rejected []string
		for _, e := range h {
			if e.Actor == "rita" && e.To != "" && strings.Contains(e.Reason, "claim") {
				t.Errorf("task %d: rita claimed it: %+v", id, e)
			}
			if e.Actor == "merge-queue" && strings.Contains(e.Reason, "rejected") {
				rejected = append(rejected, e.Reason)
			}
		}
		wantKind := map[string]string{"gate": "gate", "conflict-b": "conflict"}[title]
		switch {
		case wantKind == "" && len(rejected) > 0:
			t.Errorf("task %d (%s) was rejected by the merge queue: %v", id, title, rejected)
		case wantKind != "" && (len(rejected) != 1 || !strings.Contains(rejected[0], wantKind)):
			t.Errorf("task %d (%s): merge rejections %v, want one of kind %s", id, title, rejected, wantKind)
		}
	}
}

// pruneLines removes the branches of the merged tasks, every one of them.
func pruneLines(t *testing.T, repo, cfg string, ids map[string]int64) {
	t.Helper()
	for _, id := range ids {
		gitOut(t, repo, "rev-parse", "--verify", fmt.Sprintf("swarm/task/%d", id))
	}
	out, err := exec.Command(swarmdBin, "worktree", "prune", "--tasks", "--config", cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("removed %d task branches", len(ids))) {
		t.Fatalf("worktree prune --tasks: %v\n%s", err, out)
	}
	if left := strings.TrimSpace(gitOut(t, repo, "branch", "--list", "swarm/task/*")); left != "" {
		t.Errorf("task branches left after prune: %s", left)
	}
}

// waitTaskLong is waitTask with a limit of its own, for flows of many
// sessions.
func waitTaskLong(t *testing.T, b *taskboard.Board, id int64, want task.State, d *daemonProc, limit time.Duration) taskboard.Task {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		tk, err := b.Get(context.Background(), id)
		if err == nil && tk.State == want {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %d is %s (%v), want %s; log:\n%s", id, tk.State, err, want, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func gitOut(t *testing.T, repo string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func gitMay(repo string, args ...string) string {
	out, _ := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
	return string(out)
}

func trailer(body, key string) string {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, key+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
