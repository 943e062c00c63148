package taskboard

import (
	"context"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
)

// endSession records session id of agent as started and ended with
// outcome and abort reason, as settling it does.
func endSession(t *testing.T, db *store.DB, agent, id string, seq uint32, outcome, abort string) {
	t.Helper()
	ctx := context.Background()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(seq) * time.Minute)
	rec := store.SessionRecord{SessionID: id, Agent: agent, Seq: seq, Started: start}
	if err := db.BeginSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	end := start.Add(time.Second)
	rec.Ended, rec.Outcome, rec.AbortReason = &end, outcome, abort
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := db.SettleSessionTx(ctx, tx.Tx, rec, end); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// started claims and starts tk for agent's session.
func started(t *testing.T, b *Board, tk Task, agent, session string) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.Claim(ctx, tk.ID, agent, session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Start(ctx, tk.ID, Holder{Agent: agent, Session: session}); err != nil {
		t.Fatal(err)
	}
}

// TestOrphanRecordsTheAbortReason: a task taken back from an agent whose
// session ended abnormally carries that end's seed abort reason on every
// event of the move (ORPHANED, then OPEN or FAILED); a normal end carries
// none.
func TestOrphanRecordsTheAbortReason(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name           string
		outcome, abort string // how the holding session ended; outcome "" : never recorded
		maxRetries     int
		want           task.AbortReason
		wantTo         []string
	}{
		{"timed out, retried", "timeout", "timeout", 3, task.AbortTimeout, []string{"ORPHANED", "OPEN"}},
		{"timed out, retries used up", "timeout", "timeout", 1, task.AbortTimeout, []string{"ORPHANED", "FAILED"}},
		{"killed by its cgroup's OOM killer", "error", "oom_killed", 1, task.AbortOOM, []string{"ORPHANED", "FAILED"}},
		{"SIGKILL not ours", "error", "oom", 3, task.AbortOOM, []string{"ORPHANED", "OPEN"}},
		{"stopped with SIGTERM", "error", "shutdown_signal", 3, task.AbortShutdownSignal, []string{"ORPHANED", "OPEN"}},
		{"budget ran out", "budget_exhausted", "budget_exhausted", 3, task.AbortParentAborted, []string{"ORPHANED", "OPEN"}},
		{"its daemon died", store.OutcomeOrphaned, "", 3, task.AbortParentAborted, []string{"ORPHANED", "OPEN"}},
		{"a value swarmd does not know", "error", "gremlins", 3, task.AbortUnknown, []string{"ORPHANED", "OPEN"}},
		{"ended normally", "success", "", 3, "", []string{"ORPHANED", "OPEN"}},
		{"no row", "", "", 3, "", []string{"ORPHANED", "OPEN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, db := openBoard(t, "", Options{})
			tk := add(t, b, NewTask{Title: "fragile", MaxRetries: tt.maxRetries})
			if tt.maxRetries == 1 { // its one retry used by an earlier crash
				started(t, b, tk, "a", "a-0")
				if _, err := b.Orphan(ctx, "a", "agent a stopped"); err != nil {
					t.Fatal(err)
				}
			}
			started(t, b, tk, "a", "a-1")
			if tt.outcome != "" {
				endSession(t, db, "a", "a-1", 1, tt.outcome, tt.abort)
			}
			before, _ := b.History(ctx, tk.ID)
			if _, err := b.Orphan(ctx, "a", "agent a stopped"); err != nil {
				t.Fatal(err)
			}
			h, err := b.History(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			moved := h[len(before):]
			if len(moved) != len(tt.wantTo) {
				t.Fatalf("orphaning wrote %+v, want moves to %v", moved, tt.wantTo)
			}
			for i, e := range moved {
				if e.To != tt.wantTo[i] || task.AbortReason(e.AbortReason) != tt.want {
					t.Errorf("event %d: to %s, abort reason %q; want to %s, %q", i, e.To, e.AbortReason, tt.wantTo[i], tt.want)
				}
			}
		})
	}
}

// TestOnlyAbnormalEndsCarryAnAbortReason: the moves a session's report or
// the operator makes record none.
func TestOnlyAbnormalEndsCarryAnAbortReason(t *testing.T) {
	ctx := context.Background()
	b, db := openBoard(t, "", Options{AutoClose: true})
	tk := add(t, b, NewTask{Title: "fine"})
	started(t, b, tk, "a", "a-1")
	endSession(t, db, "a", "a-1", 1, "timeout", "timeout") // the task is kept, then reported by its next session
	if err := b.Continue(ctx, tk.ID, "a", "a-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Fail(ctx, tk.ID, Holder{Agent: "a", Session: "a-2"}, "cannot"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Retry(ctx, tk.ID); err != nil {
		t.Fatal(err)
	}
	h, _ := b.History(ctx, tk.ID)
	for _, e := range h {
		if e.AbortReason != "" {
			t.Errorf("event %s -> %s by %s carries abort reason %q", e.From, e.To, e.Actor, e.AbortReason)
		}
	}
}
