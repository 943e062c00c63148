package taskboard

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/store/storetest"
	"github.com/swarmd/swarmd/internal/task"
)

// TestGiveBackCountsNoRetry: agents stopped for a cause that is not their
// tasks' failure (the operator, a reload, max_sessions) give their tasks
// back OPEN without a retry: IN_PROGRESS -> OPEN and CLAIMED -> OPEN, no
// transition reason, the holding session's abort reason, a new line, the
// review loop still working, a hold over a stop ended; another agent's
// task is left alone. On both engines.
func TestGiveBackCountsNoRetry(t *testing.T) {
	storetest.Engines(t, "giveback", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		db := storetest.OpenTarget(t, fresh(t))
		b := New(db, Options{ReviewerOf: func(string) (string, int) { return "rita", 3 }})
		working := add(t, b, NewTask{Title: "half done"})
		started(t, b, working, "alice", "alice-1")
		endSession(t, db, "alice", "alice-1", 1, "error", "user_interrupt")
		claimed := add(t, b, NewTask{Title: "not begun"})
		if _, err := b.Claim(ctx, claimed.ID, "dave", "dave-1"); err != nil {
			t.Fatal(err)
		}
		others := add(t, b, NewTask{Title: "bob's"})
		started(t, b, others, "bob", "bob-1")
		storetest.HoldLeases(t, db, "d1", "alice", "dave", "bob", "carol")
		if marked, err := b.HoldOver(ctx, "d1", []string{"alice"}); err != nil || len(marked) != 1 {
			t.Fatalf("held over %v, %v; want alice's task", ids(marked), err)
		}

		moved, err := b.GiveBack(ctx, "alice", "agent alice stopped: stop requested by operator")
		if err != nil {
			t.Fatal(err)
		}
		more, err := b.GiveBack(ctx, "dave", "agent dave stopped: stop requested by operator")
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, more...)
		if got, want := ids(moved), ids([]Task{working, claimed}); !slices.Equal(got, want) {
			t.Fatalf("gave back %v, want %v", got, want)
		}
		for _, c := range []struct {
			tk    Task
			from  string
			abort string
		}{{working, "IN_PROGRESS", "user_interrupt"}, {claimed, "CLAIMED", ""}} {
			got := wantState(t, b, c.tk.ID, task.Open)
			if got.Retries != 0 || got.Claimant != "" || got.ClaimSession != "" || got.HeldOver != "" {
				t.Errorf("task %d given back as %+v: want OPEN for anyone, no retry, no hold", c.tk.ID, got)
			}
			e := lastEvent(t, b, c.tk.ID)
			if e.From != c.from || e.To != "OPEN" || e.TransitionReason != "" || e.AbortReason != c.abort || e.Actor != "swarmd" ||
				!strings.Contains(e.Reason, "stop requested by operator") {
				t.Errorf("task %d's event %+v: want %s -> OPEN, no transition reason, abort reason %q, the stop's why", c.tk.ID, e, c.from, c.abort)
			}
			if h, _ := b.History(ctx, c.tk.ID); slices.ContainsFunc(h, func(e Event) bool { return e.To == "ORPHANED" || e.To == "FAILED" }) {
				t.Errorf("task %d orphaned or failed: %+v", c.tk.ID, h)
			}
		}
		if got := wantState(t, b, working.ID, task.Open); got.ReviewState != "working" {
			t.Errorf("review loop %q after the give-back, want working (the work is not finished)", got.ReviewState)
		}
		if got := wantState(t, b, others.ID, task.InProgress); got.Claimant != "bob" {
			t.Errorf("bob's task %+v, want his still", got)
		}
		// Another agent takes it up and works on it as on any OPEN task.
		if _, err := b.Claim(ctx, working.ID, "carol", "carol-1"); err != nil {
			t.Fatalf("claim of the task given back: %v", err)
		}
	})
}

// TestTakeBackAfterLeaseLostIsFenced: on a shared store, the daemon that
// lost an agent's lease (paused past lease_timeout) and then stops the
// agent (the operator, a reload that removes it, its errors) must not take
// back the tasks the agent holds: they are the other daemon's now, which
// runs the agent and whose session may be working on one. GiveBack and
// Orphan of the agent are refused as fenced, and the task stays with the
// session working on it. On both engines.
func TestTakeBackAfterLeaseLostIsFenced(t *testing.T) {
	storetest.Engines(t, "takeback", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		target := fresh(t)
		db0 := storetest.OpenTarget(t, target)
		b0 := New(db0, Options{})
		storetest.HoldLeases(t, db0, "d0", "alice")
		tk := add(t, b0, NewTask{Title: "alice's"})
		started(t, b0, tk, "alice", "alice-1")
		// d0 loses the lease; d1 takes it, takes the task back as a
		// crash's and alice, on d1, works on it again.
		if err := db0.ReleaseLeases(ctx, "d0", nil); err != nil {
			t.Fatal(err)
		}
		db1 := storetest.OpenTarget(t, target)
		b1 := New(db1, Options{})
		storetest.HoldLeases(t, db1, "d1", "alice")
		if _, err := b1.Orphan(ctx, "alice", "lease expired"); err != nil {
			t.Fatal(err)
		}
		started(t, b1, tk, "alice", "alice-2")

		var fenced *store.FencedError
		if moved, err := b0.GiveBack(ctx, "alice", "agent alice stopped: stop requested by operator"); !errors.As(err, &fenced) {
			t.Errorf("give back by the daemon that lost alice's lease = %v, %v; want refused as fenced", ids(moved), err)
		}
		if moved, err := b0.Orphan(ctx, "alice", "agent alice stopped: max_consecutive_errors"); !errors.As(err, &fenced) {
			t.Errorf("orphan by the daemon that lost alice's lease = %v, %v; want refused as fenced", ids(moved), err)
		}
		got, err := b1.Get(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != task.InProgress || got.Claimant != "alice" || got.ClaimSession != "alice-2" {
			t.Fatalf("task %s held by %q (session %q); want IN_PROGRESS with alice-2, the session of the daemon that has the lease",
				got.StateName, got.Claimant, got.ClaimSession)
		}
		// The daemon that has the lease still takes the tasks back.
		if moved, err := b1.GiveBack(ctx, "alice", "agent alice stopped: stop requested by operator"); err != nil || len(moved) != 1 {
			t.Fatalf("give back by the lease's holder = %v, %v; want the task", ids(moved), err)
		}
	})
}
