package merge

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// A merge whose ref moved and whose record the store refused leaves its
// batch under test and its move begun; the next step finds the target
// holding its candidate and records it merged (landed). Until the queue's
// next merge writes a tip, its move begun is what tells the next start
// that the target's tip is the queue's: a start after that step records
// no target_moved.
func TestLandedMergeIsTheQueuesAtTheNextStart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	opts := e.options()
	opts.Clone = "test:" + e.repo
	q := e.open(opts)
	if err := q.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	alice := e.worker("alice")
	commitFile(t, alice, "a.txt", "a\n", "alice: a")
	if _, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	exec := func(s string) {
		t.Helper()
		if err := e.db.Write(ctx, func(w *sql.DB) error { _, err := w.ExecContext(ctx, s); return err }); err != nil {
			t.Fatal(err)
		}
	}
	before := e.main()
	exec(`CREATE TRIGGER refuse_merged BEFORE UPDATE ON merge_queue WHEN NEW.state = 'merged'
		BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
	if _, err := q.Step(ctx); err == nil || !strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("Step with the merge's record refused: %v", err)
	}
	if e.main() == before {
		t.Fatal("main did not move")
	}
	exec(`DROP TRIGGER refuse_merged`)
	step(t, q, OutcomeMerged) // the target holds the candidate: landed
	q.Stop()

	again := e.open(opts) // the next start
	if err := again.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ev := range e.events() {
		if strings.Contains(ev, "target_moved") {
			t.Fatalf("the queue's own merge recorded as someone else's at the next start: %q", ev)
		}
	}
}
