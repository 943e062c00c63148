package taskboard

import (
	"context"
	"slices"
	"strings"
	"testing"

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
