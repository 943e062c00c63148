package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// A move of the target nobody looked at before the daemon stopped, or made
// while no daemon ran, is recorded at the next start, once; the queue's own
// merges never, a merge whose ref moved and whose record was cut off
// included (its batch's move begun is recorded with the batch's test:
// merge_target's pending). Each restart with the target where the last
// daemon left it records nothing.
func TestTargetMovedWhileStoppedIsRecordedAtStart(t *testing.T) {
	cfg := agentMovesTarget(t, `p=$(cat)
case "$p" in
*"Your task: #"*) date +%s%N > w.txt; git add w.txt; git commit -qm work; echo DONE;;
*) echo idle; echo DONE;;
esac`)
	dir := strings.TrimSuffix(cfg, "/swarmd.yaml")
	ctx := context.Background()
	rev := func(r string) string { return strings.TrimSpace(git(t, dir, "rev-parse", r)) }
	// run starts the daemon, does f, and returns the target_moved events
	// recorded by then; the daemon is stopped again.
	run := func(f func(r *running)) []string {
		t.Helper()
		r := start(t, cfg)
		if f != nil {
			f(r)
		}
		got := targetMoves(t, r)
		r.stop(t)
		return got
	}

	// The queue merges a task: its merge is its own, at this run and
	// the next.
	if got := run(func(r *running) {
		tk, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "work"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the task merged", func() bool {
			got, err := r.tasks.Get(ctx, tk.ID)
			return err == nil && got.State == task.Closed
		})
	}); len(got) != 0 {
		t.Fatalf("target_moved %q after the queue's merge, want none", got)
	}
	merged := rev("main")
	if got := run(nil); len(got) != 0 {
		t.Fatalf("target_moved %q at a start after the queue's merge, want none", got)
	}

	// Moved by hand while no daemon runs: recorded at the next start,
	// once, and never again.
	moved := strings.TrimSpace(git(t, dir, "commit-tree", "-p", "main", "-m", "by hand", "main^{tree}"))
	git(t, dir, "update-ref", "refs/heads/main", strings.TrimSpace(moved))
	want := fmt.Sprintf("main advanced from %.12s to %.12s by someone other than the merge queue, seen at the daemon's start", merged, moved)
	if got := run(nil); len(got) != 1 || got[0] != want {
		t.Fatalf("target_moved %q at the start after a move by hand, want once %q", got, want)
	}
	if got := run(nil); len(got) != 1 {
		t.Fatalf("target_moved %q at the next start, want the one move alone", got)
	}

	// The queue's move whose record was cut off: what a daemon killed
	// between moving main and recording the merge leaves (the batch under
	// test, its move begun; main at its candidate). Built here by undoing
	// the record of a merge made while main was at moved: a start
	// records no move, and the queue records the task merged.
	var entry int64
	got := run(func(r *running) {
		tk, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "more work"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the second task merged", func() bool {
			got, err := r.tasks.Get(ctx, tk.ID)
			return err == nil && got.State == task.Closed
		})
		if err := r.db.ReadSQL().QueryRowContext(ctx, `SELECT id FROM merge_queue WHERE task_id = ?`, tk.ID).Scan(&entry); err != nil {
			t.Fatal(err)
		}
	})
	if len(got) != 1 {
		t.Fatalf("target_moved %q, want the move by hand alone", got)
	}
	merged2 := rev("main")
	if merged2 == moved {
		t.Fatal("the second task merged with no commit")
	}
	uncount(t, cfg, entry, moved, merged2)
	if got := run(func(r *running) {
		waitFor(t, "the landed merge recorded", func() bool {
			var state string
			return r.db.ReadSQL().QueryRowContext(ctx, `SELECT state FROM merge_queue WHERE id = ?`, entry).Scan(&state) == nil && state == "merged"
		})
	}); len(got) != 1 {
		t.Fatalf("target_moved %q after a merge whose record was cut off, want the move by hand alone", got)
	}

	// The same cut-off merge, built on a move nobody recorded (the store
	// knew main at merged, not at moved): that move is recorded, from
	// merged to moved; the queue's merge on it is not.
	uncount(t, cfg, entry, moved, merged2)
	setKnown(t, cfg, merged)
	want2 := fmt.Sprintf("main advanced from %.12s to %.12s by someone other than the merge queue, seen at the daemon's start", merged, moved)
	if got := run(nil); len(got) != 2 || got[1] != want2 {
		t.Fatalf("target_moved %q, want the move by hand and %q", got, want2)
	}
	if got := run(nil); len(got) != 2 {
		t.Fatalf("target_moved %q at the next start, want no more", got)
	}
}

// withStore runs f on the stopped swarm's store.
func withStore(t *testing.T, cfgPath string, f func(tx *store.Tx)) {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, mustLoad(t, cfgPath).StoreTarget(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	f(tx)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// uncount puts the store back to where a daemon killed between the move
// of main from target to candidate and its record of entry's merge leaves
// it: the entry under test, the move begun, main known at target.
func uncount(t *testing.T, cfgPath string, entry int64, target, candidate string) {
	t.Helper()
	withStore(t, cfgPath, func(tx *store.Tx) {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`UPDATE merge_queue SET state = 'testing', result = '', finished_at = '', notified = 0, target = ?, candidate = ? WHERE id = ?`,
				[]any{target, candidate, entry}},
			{`UPDATE merge_target SET tip = ?, pending_from = ?, pending_to = ?`, []any{target, target, candidate}},
		} {
			if _, err := tx.ExecContext(context.Background(), q.sql, q.args...); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// setKnown sets where the store last knew main to be.
func setKnown(t *testing.T, cfgPath, tip string) {
	t.Helper()
	withStore(t, cfgPath, func(tx *store.Tx) {
		if _, err := tx.ExecContext(context.Background(), `UPDATE merge_target SET tip = ?`, tip); err != nil {
			t.Fatal(err)
		}
	})
}

// A move a look recorded while the daemon ran is the known tip from then
// on (its event and the tip in one transaction): the next start records
// it no second time.
func TestTargetMoveRecordedByALookIsNotRecordedAgainAtStart(t *testing.T) {
	cfg := agentMovesTarget(t, `p=$(cat)
case "$p" in
*"Your task: #"*) git update-ref refs/heads/main "$(git commit-tree -p main -m moved 'main^{tree}')"; echo DONE;;
*) echo idle; echo DONE;;
esac`)
	ctx := context.Background()
	r := start(t, cfg)
	tk, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "move main"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the move recorded", func() bool { return len(targetMoves(t, r)) == 1 })
	waitFor(t, "the task closed", func() bool {
		got, err := r.tasks.Get(ctx, tk.ID)
		return err == nil && got.State == task.Closed
	})
	first := targetMoves(t, r)
	r.stop(t)
	for range 2 {
		r = start(t, cfg)
		got := targetMoves(t, r)
		r.stop(t)
		if len(got) != 1 {
			t.Fatalf("target_moved %q after a restart, want the one move %q alone", got, first)
		}
	}
}

// On a shared store, a daemon that does not lead follows the leader's
// merges (follow.go): its start records none of them, the follow cut off
// before it was recorded included (its move begun is recorded first:
// merge.Queue.Taking); a move of its own clone's target by hand while it
// is stopped is recorded once, and the leader's own records (its clone's
// row, its batch under test) are not this daemon's.
func TestSharedStoreStartRecordsNoFollow(t *testing.T) {
	ctx := context.Background()
	url, db, _ := anotherLeads(t, "baseline") // throughout
	r, cfg := newCountedRepo(t, "remote: origin\nmerge: {into: main}\n"+sharedYAML(url, 10*time.Second, "alice"))
	d := start(t, cfg)
	d.waitRunning(t, "alice")
	pushed := r.git("rev-parse", "main")
	// The leader merges task 1 and pushes it; its next batch is under
	// test, its move begun, on its own clone.
	merged := r.mergeOf(pushed, 1, true, "the leader's")
	gitRun(t, "-C", r.dir, "push", "-q", r.bare, merged+":refs/heads/main")
	next := r.mergeOf(merged, 2, true, "the leader's next")
	now := store.FormatTime(time.Now())
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO merge_queue (task_id, agent, branch, head, state, result, candidate, notified, enqueued_at, finished_at)
			VALUES (1, 'carol', 'swarm/task/1', ?, 'merged', 'merged', ?, 1, ?, ?)`, []any{merged, merged, now, now}},
		{`INSERT INTO merge_queue (task_id, agent, branch, head, state, target, candidate, enqueued_at)
			VALUES (2, 'carol', 'swarm/task/2', ?, 'testing', ?, ?, ?)`, []any{next, merged, next, now}},
		{`INSERT INTO merge_target (clone, into_branch, tip, pending_from, pending_to, updated_at) VALUES ('elsewhere:/leader', 'main', ?, ?, ?, ?)`,
			[]any{merged, merged, next, now}},
	} {
		if _, err := db.ExecCount(ctx, "the leader's", q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "this daemon's main at the leader's merge", func() bool { return r.git("rev-parse", "main") == merged })
	d.stop(t)
	restart := func() {
		t.Helper()
		d := start(t, cfg)
		d.waitRunning(t, "alice")
		d.stop(t)
	}
	restart()
	if got := storeMoves(t, db); len(got) != 0 {
		t.Fatalf("target_moved %q at a start after the follow, want none", got)
	}
	// The follow cut off between the move and its record: the row still
	// at the tip before, the move begun.
	if _, err := db.ExecCount(ctx, "cut off", `UPDATE merge_target SET tip = ?, pending_from = ?, pending_to = ? WHERE clone <> 'elsewhere:/leader'`,
		pushed, pushed, merged); err != nil {
		t.Fatal(err)
	}
	restart()
	if got := storeMoves(t, db); len(got) != 0 {
		t.Fatalf("target_moved %q at a start after a follow whose record was cut off, want none", got)
	}
	// By hand, while stopped.
	hand := r.git("commit-tree", "-p", "main", "-m", "by hand", "main^{tree}")
	r.git("update-ref", "refs/heads/main", hand)
	restart()
	restart()
	want := fmt.Sprintf("main advanced from %.12s to %.12s by someone other than the merge queue, seen at the daemon's start", merged, hand)
	if got := storeMoves(t, db); len(got) != 1 || got[0] != want {
		t.Fatalf("target_moved %q, want once %q", got, want)
	}
}

// storeMoves is the reasons of the target_moved events in db, oldest first.
func storeMoves(t *testing.T, db *store.DB) []string {
	t.Helper()
	rows, err := db.ReadSQL().QueryContext(context.Background(), `SELECT reason FROM events WHERE event = 'target_moved' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A look whose record the store refuses (an error writing merge_target
// with its event) records nothing else: the move is handed back, and
// recorded once, by a later look, by the queue's next merge or, when the
// daemon stops first, by the next start. An event of its own in the
// journal, besides, would be recorded a second time by that start, which
// finds the target's known tip still before the move.
func TestTargetMoveWhoseRecordFailedIsRecordedOnce(t *testing.T) {
	cfg := agentMovesTarget(t, "echo idle; echo DONE")
	dir := filepath.Dir(cfg)
	ctx := context.Background()
	r := start(t, cfg)
	exec := func(q string) {
		withStore(t, cfg, func(tx *store.Tx) {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		})
	}
	exec(`CREATE TRIGGER refuse_merge_target BEFORE UPDATE ON merge_target BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
	moved := git(t, dir, "commit-tree", "-p", "main", "-m", "moved by hand", "main^{tree}")
	git(t, dir, "update-ref", "refs/heads/main", strings.TrimSpace(moved))
	r.lookAtTarget(ctx, "by the test")
	r.stop(t)
	exec(`DROP TRIGGER refuse_merge_target`)
	for range 2 {
		r = start(t, cfg)
		got := targetMoves(t, r)
		r.stop(t)
		if len(got) != 1 {
			t.Fatalf("target_moved %q after a restart, want the one move", got)
		}
	}
}

// A batch the gate failed leaves no move of the target begun in the store:
// someone who puts the target on its candidate (a commit the gate failed,
// in reach of any unsandboxed agent) while no daemon runs is recorded at
// the next start, not taken for the queue's own move cut off before its
// record.
func TestTargetPutOnAFailedCandidateIsRecordedAtStart(t *testing.T) {
	cfg := repo(t, `
listen: ""
isolation: off
defaults: {backend: worker, grace_period: 1s, min_session_interval: 0s}
merge: {into: main, gate: ["false"]}
backends:
  worker: {type: command, command: sh, args: [-c, 'p=$(cat); case "$p" in *"Your task: #"*) test -f w.txt && exec sleep 3600; date +%s%N > w.txt; git add w.txt; git commit -qm work; echo DONE;; *) echo idle; echo DONE;; esac']}
agents:
  - {name: alice, role: works}
`)
	dir := strings.TrimSuffix(cfg, "/swarmd.yaml")
	ctx := context.Background()
	r := start(t, cfg)
	if _, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "work"}); err != nil {
		t.Fatal(err)
	}
	var candidate string
	waitFor(t, "the task's change rejected by the gate", func() bool {
		return r.db.ReadSQL().QueryRowContext(ctx, `SELECT candidate FROM merge_queue WHERE state = 'rejected'`).Scan(&candidate) == nil
	})
	r.stop(t)
	before := strings.TrimSpace(git(t, dir, "rev-parse", "main"))
	git(t, dir, "update-ref", "refs/heads/main", candidate)
	r = start(t, cfg)
	got := targetMoves(t, r)
	r.stop(t)
	want := fmt.Sprintf("main advanced from %.12s to %.12s by someone other than the merge queue, seen at the daemon's start", before, candidate)
	if len(got) != 1 || got[0] != want {
		t.Fatalf("target_moved %q after main was put on the failed candidate, want once %q", got, want)
	}
}
