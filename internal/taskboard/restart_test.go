package taskboard

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/store/storetest"
	"github.com/swarmd/swarmd/internal/task"
)

func ids(ts []Task) []int64 {
	var out []int64
	for _, t := range ts {
		out = append(out, t.ID)
	}
	slices.Sort(out)
	return out
}

func runs(agents ...string) func(string) bool {
	return func(a string) bool { return slices.Contains(agents, a) }
}

// lastEvent is task id's latest event.
func lastEvent(t *testing.T, b *Board, id int64) Event {
	t.Helper()
	h, err := b.History(context.Background(), id)
	if err != nil || len(h) == 0 {
		t.Fatalf("history of task %d: %v, %v", id, h, err)
	}
	return h[len(h)-1]
}

// TestOrderlyStopHoldsTasksOver: a daemon's orderly stop marks the tasks
// whose holding sessions it ended and recorded, for the agents whose
// leases it holds; its next start gives each back to its agent (no move, no
// retry, one kept_over_restart event), requeues one whose agent it no
// longer runs (OPEN, no retry), and orphans the rest as after a crash (a
// retry): a session closed as orphaned, a task a later session took since.
// An agent whose lease is another daemon's is left alone. On both engines.
func TestOrderlyStopHoldsTasksOver(t *testing.T) {
	storetest.Engines(t, "holdover", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		db := storetest.OpenTarget(t, fresh(t))
		b := New(db, Options{})
		held := map[string]Task{}
		for _, h := range []struct{ agent, outcome, abort string }{
			{"alice", "error", "shutdown_signal"}, // ended by the stop
			{"bob", store.OutcomeOrphaned, ""},    // its daemon died while it ran
			{"carol", "error", "shutdown_signal"}, // ended by the stop; not configured after it
			{"eve", "error", "shutdown_signal"},   // another daemon's agent now
			{"frank", "success", ""},              // idle when the daemon stopped
			{"gina", "success", ""},               // her next prompt took it, the stop came before its session
		} {
			tk := add(t, b, NewTask{Title: h.agent + "'s"})
			started(t, b, tk, h.agent, h.agent+"-1")
			endSession(t, db, h.agent, h.agent+"-1", 1, h.outcome, h.abort)
			held[h.agent] = tk
		}
		if err := b.Continue(ctx, held["gina"].ID, "gina", "gina-2"); err != nil { // never begun: no row
			t.Fatal(err)
		}
		storetest.HoldLeases(t, db, "d1", "alice", "bob", "carol", "frank", "gina")

		marked, err := b.HoldOver(ctx, "d1", []string{"alice", "bob", "carol", "eve", "frank", "gina"})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(marked), ids([]Task{held["alice"], held["carol"], held["frank"], held["gina"]}); !slices.Equal(got, want) {
			t.Fatalf("held over %v, want %v (alice's, carol's, frank's, gina's)", got, want)
		}
		if got, _ := b.Get(ctx, held["alice"].ID); got.HeldOver != "d1" {
			t.Fatalf("alice's task held over %q, want d1", got.HeldOver)
		}
		// A session took frank's task after the mark: it is not as the stop left it.
		if err := b.Continue(ctx, held["frank"].ID, "frank", "frank-2"); err != nil {
			t.Fatal(err)
		}
		if got, _ := b.Get(ctx, held["frank"].ID); got.HeldOver != "" {
			t.Fatalf("frank's task continued, still held over %q", got.HeldOver)
		}

		recovery := Recovery{Agents: []string{"alice", "bob", "frank", "gina"}, Daemon: "d1",
			Runs: runs("alice", "bob", "frank", "gina"), Why: "swarmd restarted"}
		got, err := b.Recover(ctx, recovery)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got.Kept), ids([]Task{held["alice"], held["gina"]})) || !slices.Equal(ids(got.Requeued), ids([]Task{held["carol"]})) ||
			!slices.Equal(ids(got.Orphaned), ids([]Task{held["bob"], held["frank"]})) {
			t.Fatalf("recovered kept %v, requeued %v, orphaned %v; want alice's and gina's, carol's, bob's and frank's",
				ids(got.Kept), ids(got.Requeued), ids(got.Orphaned))
		}
		events, _ := b.History(ctx, held["alice"].ID)
		// A start run again (its first try's answer lost, or killed before
		// alice ran a session) keeps the task again, and records it once.
		if again, err := b.Recover(ctx, recovery); err != nil || !slices.Equal(ids(again.Kept), ids(got.Kept)) ||
			len(again.Requeued)+len(again.Orphaned) != 0 {
			t.Fatalf("recovery again = %+v, %v; want the same tasks kept, nothing else", again, err)
		}
		if h, _ := b.History(ctx, held["alice"].ID); len(h) != len(events) {
			t.Fatalf("recovery again recorded %+v", h[len(events):])
		}

		kept := wantState(t, b, held["alice"].ID, task.InProgress)
		if kept.Claimant != "alice" || kept.ClaimSession != "alice-1" || kept.Retries != 0 || kept.HeldOver != "d1" {
			t.Fatalf("kept task %+v: want alice's, claim at alice-1, no retry, held over until her session takes it", kept)
		}
		if e := lastEvent(t, b, kept.ID); e.TransitionReason != EventKeptOverRestart || e.From != "IN_PROGRESS" || e.To != "IN_PROGRESS" ||
			e.AbortReason != "shutdown_signal" || e.Actor != "swarmd" || e.Session != "alice-1" {
			t.Fatalf("kept task's event %+v: want kept_over_restart, IN_PROGRESS, shutdown_signal, session alice-1", e)
		}
		// Her next session continues it, which ends the hold, and reports it.
		if err := b.Continue(ctx, kept.ID, "alice", "alice-2"); err != nil {
			t.Fatal(err)
		}
		if got, _ := b.Get(ctx, kept.ID); got.HeldOver != "" {
			t.Fatalf("kept task continued, still held over %q", got.HeldOver)
		}
		if _, err := b.Done(ctx, kept.ID, Holder{Agent: "alice", Session: "alice-2"}, "finished"); err != nil {
			t.Fatal(err)
		}

		requeued := wantState(t, b, held["carol"].ID, task.Open)
		if requeued.Claimant != "" || requeued.Retries != 0 || requeued.HeldOver != "" {
			t.Fatalf("requeued task %+v: want nobody's, no retry", requeued)
		}
		if e := lastEvent(t, b, requeued.ID); e.From != "IN_PROGRESS" || e.TransitionReason != "" || e.AbortReason != "shutdown_signal" ||
			!strings.Contains(e.Reason, "carol is no longer configured") {
			t.Fatalf("requeued task's event %+v: want IN_PROGRESS -> OPEN, no transition reason, shutdown_signal, carol gone", e)
		}
		for _, a := range []string{"bob", "frank"} {
			orphaned := wantState(t, b, held[a].ID, task.Open)
			if e := lastEvent(t, b, orphaned.ID); orphaned.Retries != 1 || e.From != "ORPHANED" || e.TransitionReason != "orphan_recovered" {
				t.Fatalf("%s's task %+v, last event %+v: want ORPHANED -> OPEN, orphan_recovered, a retry", a, orphaned, e)
			}
		}
		if other := wantState(t, b, held["eve"].ID, task.InProgress); other.Claimant != "eve" || other.HeldOver != "" {
			t.Fatalf("eve's task %+v: want it left to eve's daemon, unmarked", other)
		}
	})
}

// TestHeldOverByAnotherDaemonIsRequeued: a task one daemon held over its
// orderly stop, whose agent another daemon runs now, is requeued by that
// daemon's start without a retry (the work is in the first daemon's
// worktree), and not kept.
func TestHeldOverByAnotherDaemonIsRequeued(t *testing.T) {
	storetest.Engines(t, "holdelse", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		target := fresh(t)
		db0 := storetest.OpenTarget(t, target)
		b0 := New(db0, Options{})
		tk := add(t, b0, NewTask{Title: "dave's"})
		started(t, b0, tk, "dave", "dave-1")
		endSession(t, db0, "dave", "dave-1", 1, "error", "user_interrupt")
		storetest.HoldLeases(t, db0, "d0", "dave")
		if marked, err := b0.HoldOver(ctx, "d0", []string{"dave"}); err != nil || len(marked) != 1 {
			t.Fatalf("d0 held over %v, %v; want dave's task", ids(marked), err)
		}
		if err := db0.ReleaseLeases(ctx, "d0", nil); err != nil { // its orderly stop gives them up
			t.Fatal(err)
		}

		db1 := storetest.OpenTarget(t, target)
		storetest.HoldLeases(t, db1, "d1", "dave")
		b1 := New(db1, Options{})
		got, err := b1.Recover(ctx, Recovery{Agents: []string{"dave"}, Daemon: "d1", Runs: runs("dave"), Why: "swarmd restarted"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kept) != 0 || len(got.Orphaned) != 0 || !slices.Equal(ids(got.Requeued), []int64{tk.ID}) {
			t.Fatalf("recovered %+v; want dave's task requeued", got)
		}
		requeued := wantState(t, b1, tk.ID, task.Open)
		e := lastEvent(t, b1, tk.ID)
		if requeued.Retries != 0 || e.TransitionReason != "" || e.AbortReason != "user_interrupt" || !strings.Contains(e.Reason, "daemon d0") {
			t.Fatalf("task %+v, event %+v: want OPEN, no retry, user_interrupt, naming d0", requeued, e)
		}
	})
}
