package daemon

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/merge"
)

// TestCarriedRejectionsWayOut: a worker told its line carries merges the
// target lacks (carried) does what the rejection says, with real git, and
// its task then merges with its own work only, for the merge and the
// squash strategies: when the swarm merged the carried task again (a
// leader cut off before it recorded its merge), and when the target no
// longer has it (the operator rewound it). A squash commit is no merge
// commit, which git rebase would drop: replayed, it was rejected again,
// up to merge.max_rejections; and a merge commit's task, dropped from the
// target, came back in with the worker's rebased commits.
func TestCarriedRejectionsWayOut(t *testing.T) {
	for _, strategy := range []string{"merge", "squash"} {
		for _, again := range []bool{true, false} {
			name := strategy + "/merged again"
			if !again {
				name = strategy + "/target rewound"
			}
			t.Run(name, func(t *testing.T) { carriedWayOut(t, strategy, again) })
		}
	}
}

func carriedWayOut(t *testing.T, strategy string, again bool) {
	ctx := context.Background()
	cfg := repo(t, agentsYAML("alice")+"merge: {into: main, gate: [\"true\"], strategy: "+strategy+"}\n")
	r := &countedRepo{t: t, dir: filepath.Dir(cfg)}
	r.git("checkout", "-q", "-b", "elsewhere") // main is the queue's
	// queueMerge is head merged onto parent by the queue (its trailer).
	queueMerge := func(parent, head string, task string) string {
		tree := strings.Fields(r.git("merge-tree", "--write-tree", parent, head))[0]
		msg := "Merge task " + task + "\n\nSwarmd-Task: " + task + "\n"
		if strategy == "squash" {
			return r.git("commit-tree", "-p", parent, "-m", msg, tree)
		}
		return r.git("commit-tree", "-p", parent, "-p", head, "-m", msg, tree)
	}
	base := r.git("rev-parse", "main")
	seven := r.mergeOf(base, 7, false, "task 7's work")
	eight := r.mergeOf(base, 8, false, "task 8's work")
	lost := queueMerge(base, seven, "7") // a target that had task 7
	target := queueMerge(base, eight, "8")
	if again {
		target = queueMerge(target, seven, "7")
	}
	r.git("update-ref", "refs/heads/main", target)
	// Task 10's line started on the target that had task 7.
	r.git("update-ref", "refs/heads/swarm/task/10", r.mergeOf(lost, 10, false, "task 10's work"))

	d := open(t, cfg)
	defer d.Close()
	q := d.merge.queue
	// Task 10 on the board, reported done at its line's head before each
	// step: the queue merges only a task's frozen head.
	if _, err := d.db.SQL().ExecContext(ctx, `INSERT INTO tasks (id, title, state, claimant, created_by, created_at, updated_at)
		VALUES (10, 'task 10', 'OPEN', 'alice', 'operator', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	step := func(want merge.Outcome) merge.Entry {
		t.Helper()
		head := r.git("rev-parse", "swarm/task/10") // frozen at DONE
		if _, err := d.db.SQL().ExecContext(ctx, `UPDATE tasks SET state = 'DONE', head = ?, work_head = ? WHERE id = 10`, head, head); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, 10, "alice", "swarm/task/10", head); err != nil {
			t.Fatal(err)
		}
		if got, err := q.Step(ctx); got != want {
			t.Fatalf("step: %v, %v; want %v", got, err, want)
		}
		es, err := q.List(ctx, 1)
		if err != nil || len(es) != 1 {
			t.Fatalf("the last entry: %v, %v", es, err)
		}
		return es[0]
	}
	e := step(merge.OutcomeRejected)
	if e.Result != string(merge.KindCarried) {
		t.Fatalf("rejected for %s (%s), want %s", e.Result, e.Detail, merge.KindCarried)
	}
	_, named, _ := strings.Cut(e.Detail, ": ")
	first := strings.Fields(named)[0]

	// The worker, in a checkout of the line, runs what the rejection says.
	todo := rejectionTodo(merge.KindCarried, "main", "merge")
	i := strings.Index(todo, "`git rebase")
	if i < 0 {
		t.Fatalf("the rejection %q names no git rebase", todo)
	}
	cmd := strings.Fields(strings.Trim(todo[i:i+1+strings.Index(todo[i+1:], "`")], "`"))
	for j, f := range cmd {
		if f == "COMMIT" {
			cmd[j] = first
		}
	}
	wt := filepath.Join(t.TempDir(), "line")
	r.git("worktree", "add", "-q", wt, "swarm/task/10")
	run := exec.Command(cmd[0], append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid"}, cmd[1:]...)...)
	run.Dir = wt
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("%v in the line, as the rejection says: %v\n%s", cmd, err, out)
	}

	e = step(merge.OutcomeMerged)
	if got := r.git("diff", "--name-only", target, "main"); got != "t10.txt" {
		t.Errorf("task 10 merged with %q, want its own work only (t10.txt)", got)
	}
}

// TestAConflictsAdviceFollowsTheStrategy: under merge.strategy rebase the
// queue's rebase drops a merge commit, so a conflict resolved by merging
// the target in would come back: the advice is a rebase there, a merge
// under the other strategies.
func TestAConflictsAdviceFollowsTheStrategy(t *testing.T) {
	for strategy, want := range map[string]string{"merge": "`git merge main`", "squash": "`git merge main`", "rebase": "`git rebase main`"} {
		got := rejectionTodo(merge.KindConflict, "main", strategy)
		if !strings.Contains(got, want) || (strategy == "rebase") == strings.Contains(got, "git merge") {
			t.Errorf("strategy %s: %q, want %s", strategy, got, want)
		}
	}
}
