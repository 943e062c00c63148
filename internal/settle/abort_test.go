package settle_test

import (
	"context"
	"testing"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// TestStoppedAgentsTaskCarriesTheSessionsAbortReason: alice's session on a
// task times out (the runner's timeout, the SIGKILL after it), then alice
// stops for good; the task the board takes back from her is FAILED, its
// one retry used, each event of that move names the timeout, and the
// Settler's Orphaned hears of it (the daemon's task_failed alert).
func TestStoppedAgentsTaskCarriesTheSessionsAbortReason(t *testing.T) {
	for _, tc := range []struct {
		name  string
		abort string // the session's own, as the runner records it
		want  task.AbortReason
	}{
		{"timed out", backend.AbortTimeout, task.AbortTimeout},
		{"killed by the OOM killer", backend.AbortOOMKilled, task.AbortOOM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := sqliteEnv(t)
			ctx := context.Background()
			tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "slow", MaxRetries: 1})
			if err != nil {
				t.Fatal(err)
			}
			e.begin(t, 1) // an earlier crash used the one retry
			if err := e.s.Stopped(ctx, "alice", "agent alice stopped: crashed", true, nil); err != nil {
				t.Fatal(err)
			}
			s1 := e.begin(t, 2)
			if s1.task != tk.ID {
				t.Fatalf("session 2 took task %d, want %d", s1.task, tk.ID)
			}
			st := s1.ended("")
			st.Completed, st.Note = false, "that session timed out"
			st.Session.Outcome = agent.ExitOutcome{Kind: agent.Timeout}
			st.Session.Result.Outcome, st.Session.Result.AbortReason = backend.OutcomeError, tc.abort
			if _, err := e.s.Settle(ctx, st, nil); err != nil {
				t.Fatal(err)
			}
			var told []taskboard.Task // Settler.Orphaned, which alerts the operator
			e.s.Orphaned = func(agent, why string, moved []taskboard.Task) {
				if agent == "alice" && why == "agent alice stopped: 3 consecutive errors" {
					told = append(told, moved...)
				}
			}
			if err := e.s.Stopped(ctx, "alice", "agent alice stopped: 3 consecutive errors", true, nil); err != nil {
				t.Fatal(err)
			}
			if got := e.task(t, tk.ID); got.StateName != "FAILED" {
				t.Fatalf("task is %s, want FAILED", got.StateName)
			}
			if len(told) != 1 || told[0].ID != tk.ID || told[0].State != task.Failed {
				t.Errorf("Orphaned told of %+v; want task %d, FAILED", told, tk.ID)
			}
			h, err := e.board.History(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			last := h[len(h)-2:]
			for i, want := range []string{"ORPHANED", "FAILED"} {
				if last[i].To != want || last[i].AbortReason != string(tc.want) {
					t.Errorf("event to %s, abort reason %q; want to %s, %q", last[i].To, last[i].AbortReason, want, tc.want)
				}
			}
		})
	}
}

// TestEveryAbortReasonHasASeedValue: each abort reason a backend or the
// runner records is a seed value or maps to one other than unknown (only
// backend.AbortUnknown and the turn limit, which the seed has no abort
// value for, are unknown).
func TestEveryAbortReasonHasASeedValue(t *testing.T) {
	for _, r := range []string{
		backend.AbortUserInterrupt, backend.AbortShutdownSignal, backend.AbortTimeout, backend.AbortOOM,
		backend.AbortOOMKilled, backend.AbortPermissionDenied, backend.AbortUnknown,
		backend.AbortUrgentMessage, backend.AbortMaxTurns, backend.AbortBudgetExhausted,
	} {
		got := task.AbortOf(r)
		wantUnknown := r == backend.AbortUnknown || r == backend.AbortMaxTurns
		if !got.Valid() || (got == task.AbortUnknown) != wantUnknown {
			t.Errorf("AbortOf(%q) = %q", r, got)
		}
	}
}
