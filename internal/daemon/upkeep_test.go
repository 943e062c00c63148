package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// quickAlice is a swarm of alice alone, whose sessions end at once, one
// after another.
const quickAlice = `
listen: ""
defaults:
  backend: quick
  grace_period: 1s
  min_session_interval: 10ms
backends:
  quick:
    type: scripted
    steps: [{print: [done]}]
agents:
  - {name: alice, role: works}
`

// TestRunningAgentsLogsRotate: an agent that runs on and on has its ended
// sessions archived every logs.rotate_sessions, not only at its stop; every
// session still reads (swarmd logs), from its archive or its file, and the
// live files stay few.
func TestRunningAgentsLogsRotate(t *testing.T) {
	r := start(t, repo(t, "logs: {rotate_sessions: 2}\n"+quickAlice))
	store := r.kit.logs
	var refs []logs.SessionRef
	waitFor(t, "six of alice's sessions archived", func() bool {
		var err error
		if refs, err = store.Sessions("alice"); err != nil {
			t.Fatal(err)
		}
		archived := 0
		for _, ref := range refs {
			if !ref.Live {
				archived++
			}
		}
		return archived >= 6
	})
	if archives, _ := filepath.Glob(filepath.Join(store.ArchiveDir("alice"), "alice-*.tar.gz")); len(archives) < 3 {
		t.Errorf("archives %v, want three or more of 2 sessions each", archives)
	}
	live := 0
	for i, ref := range refs {
		if ref.Seq != uint32(i+1) {
			t.Fatalf("sessions read as %+v: session %d missing", refs, i+1)
		}
		if ref.Live {
			live++
		}
	}
	// Settled sessions wait for the next rotation: 2 at most, the session
	// under way and the next one's prompt, and what a rotation under way
	// has not yet taken.
	if live > 6 {
		t.Errorf("%d sessions live in logs/alice with rotate_sessions 2", live)
	}
	rc, _, err := store.Open("alice", 1)
	if err != nil {
		t.Fatalf("session 1 after its rotation: %v", err)
	}
	rc.Close()
}

// TestSweepLinesRemovesMergedTasksLines: the daemon removes the line of a
// CLOSED task (its work is on the target) and keeps every other one.
func TestSweepLinesRemovesMergedTasksLines(t *testing.T) {
	cfg := repo(t, agentsYAML("alice"))
	r := start(t, cfg)
	ctx := context.Background()
	head := strings.TrimSpace(git(t, filepath.Dir(cfg), "rev-parse", "HEAD"))
	var ids []int64
	for _, title := range []string{"merged", "open", "cancelled"} {
		// bob's, whom this swarm does not run: alice's prompts take none.
		tk, err := r.tasks.Add(ctx, taskboard.NewTask{Title: title, Assignee: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
		if err := r.trees.KeepLine(ctx, tk.ID, head); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.tasks.Claim(ctx, ids[0], "bob", "bob-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.tasks.Done(ctx, ids[0], taskboard.Holder{Agent: "bob", Session: "bob-1"}, "done"); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.tasks.Get(ctx, ids[0]); got.State != task.Closed {
		t.Fatalf("task %d is %s, want CLOSED", ids[0], got.State)
	}
	if _, err := r.tasks.Cancel(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	r.sweepLines(ctx)
	refs := git(t, filepath.Dir(cfg), "for-each-ref", "--format=%(refname:short)", "refs/heads/swarm/task/")
	want := fmt.Sprintf("swarm/task/%d\nswarm/task/%d\n", ids[1], ids[2])
	if refs != want {
		t.Fatalf("lines after the sweep:\n%s\nwant\n%s", refs, want)
	}
}

// TestSweepLinesRemovesMergedTasksLinesOnTheRemote: with a remote, the
// sweep deletes a merged task's line there too (every daemon of the swarm
// pushes its lines there), and keeps the rest.
func TestSweepLinesRemovesMergedTasksLinesOnTheRemote(t *testing.T) {
	bare := filepath.Join(t.TempDir(), "remote.git")
	gitRun(t, "init", "-q", "--bare", bare)
	cfg := repo(t, "remote: "+bare+"\nmerge: {into: main}\n"+agentsYAML("alice"))
	r := start(t, cfg)
	ctx := context.Background()
	head := strings.TrimSpace(git(t, filepath.Dir(cfg), "rev-parse", "HEAD"))
	var ids []int64
	for _, title := range []string{"merged", "open"} {
		tk, err := r.tasks.Add(ctx, taskboard.NewTask{Title: title, Assignee: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
		if err := r.trees.KeepLine(ctx, tk.ID, head); err != nil {
			t.Fatal(err)
		}
		if err := r.trees.PushLine(ctx, tk.ID, bare); err != nil {
			t.Fatal(err)
		}
	}
	// Merged: as the queue leaves it (the states' own path is the board's).
	if _, err := r.db.ExecCount(ctx, "merged", `UPDATE tasks SET state = 'CLOSED' WHERE id = ?`, ids[0]); err != nil {
		t.Fatal(err)
	}
	r.sweepLines(ctx)
	want := fmt.Sprintf("swarm/task/%d\n", ids[1])
	for _, dir := range []string{filepath.Dir(cfg), bare} {
		if refs := git(t, dir, "for-each-ref", "--format=%(refname:short)", "refs/heads/swarm/task/"); refs != want {
			t.Errorf("lines in %s after the sweep:\n%s\nwant\n%s", dir, refs, want)
		}
	}
}

// TestSavedSpendIsWhereAStatusBegins: the daemon saves each agent's settled
// spend, and a reader of its own (swarmd status's) then begins there, with
// the sum every session gives.
func TestSavedSpendIsWhereAStatusBegins(t *testing.T) {
	r := start(t, repo(t, quickAlice))
	ctx := context.Background()
	waitFor(t, "three of alice's sessions settled", func() bool {
		var n int
		err := r.db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions WHERE agent = 'alice' AND settled_at IS NOT NULL`).Scan(&n)
		return err == nil && n >= 3
	})
	r.saveSpendOnce(ctx)
	var upTo, sessions int
	if err := r.db.ReadSQL().QueryRowContext(ctx, `SELECT up_to, sessions FROM spend_settled WHERE agent = 'alice'`).Scan(&upTo, &sessions); err != nil || upTo < 3 || sessions != upTo {
		t.Fatalf("alice's saved spend: up to session %d, %d sessions (%v); want 3 or more of each", upTo, sessions, err)
	}
	sp, err := r.db.Spend(ctx)
	if err != nil || sp["alice"].Sessions < upTo {
		t.Fatalf("Spend = %+v, %v; want at least the %d sessions saved", sp, err, upTo)
	}
}

// TestGateLogsRotate: the merge gate's logs rotate as an agent's sessions'
// do, into archive/merge/, every logs.rotate_sessions gate runs.
func TestGateLogsRotate(t *testing.T) {
	ctx := context.Background()
	cfg := repo(t, "logs: {rotate_sessions: 1}\n"+agentsYAML("alice")+"merge: {into: main, gate: [\"true\"]}\n")
	r := &countedRepo{t: t, dir: filepath.Dir(cfg)}
	r.git("checkout", "-q", "-b", "elsewhere") // main is the queue's
	line := r.mergeOf(r.git("rev-parse", "main"), 10, false, "task 10's work")
	r.git("update-ref", "refs/heads/swarm/task/10", line)
	d := open(t, cfg)
	defer d.Close()
	rctx, cancel := context.WithCancel(ctx)
	rotated := make(chan struct{})
	go func() { d.kit.rotation.Run(rctx); close(rotated) }()
	defer func() { cancel(); <-rotated }()
	if _, err := d.db.SQL().ExecContext(ctx, `INSERT INTO tasks (id, title, state, claimant, head, work_head, created_by, created_at, updated_at)
		VALUES (10, 'task 10', 'DONE', 'alice', ?, ?, 'operator', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`, line, line); err != nil {
		t.Fatal(err)
	}
	q := d.merge.queue
	if _, err := q.Enqueue(ctx, 10, "alice", "swarm/task/10", line); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Step(ctx); got != merge.OutcomeMerged {
		t.Fatalf("step: %v, %v; want merged", got, err)
	}
	waitFor(t, "gate run 1's log archived", func() bool {
		archives, _ := filepath.Glob(filepath.Join(d.kit.logs.ArchiveDir(merge.LogName), "merge-*.tar.gz"))
		return len(archives) == 1
	})
	rc, ref, err := d.kit.logs.Open(merge.LogName, 1)
	if err != nil || ref.Live {
		t.Fatalf("gate run 1's log after its rotation: %+v, %v; want it read from its archive", ref, err)
	}
	rc.Close()
}
