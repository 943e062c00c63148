package settle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// A review verdict is on the commit its session was shown. A PASS whose
// task has been reported done at another commit since is refused like a
// stale report: the session is settled all the same, the task is not
// passed (nor closed), no round is recorded, and the reviewer is asked
// again about what the task is now. The head travels with the session's
// settlement and its outbox record: a verdict recovered from the log at a
// restart applies on the same terms.
//
// No move of the board changes a task's frozen head while its review is
// awaited today (the queue's results and a worker's late report are
// refused for it), so the test moves it by writing the task's row.
func TestVerdictOnlyOnTheHeadItWasShown(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		a, b := strings.Repeat("a", 40), strings.Repeat("b", 40)
		review := func(seq uint32, moved, recovered bool) taskboard.Task {
			t.Helper()
			tk, err := e.board.Add(ctx, taskboard.NewTask{Title: fmt.Sprint("work ", seq), Reviewer: "rita", Assignee: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			s := e.begin(t, seq)
			if s.task != tk.ID {
				t.Fatalf("alice's session carried task %d, want %d", s.task, tk.ID)
			}
			done := s.ended("done\nDONE")
			done.Session.HeadAfter = a // frozen at a
			if _, err := e.s.Settle(ctx, done, nil); err != nil {
				t.Fatal(err)
			}
			if got := e.task(t, tk.ID); got.StateName != "DONE" || got.Head != a || got.ReviewState != "reviewing" {
				t.Fatalf("task after alice's DONE: %s at %q, review %q", got.StateName, got.Head, got.ReviewState)
			}
			// rita's session is shown the task at a.
			id, log := fmt.Sprintf("rita-%d-%012x", seq, seq), fmt.Sprintf("%s/rita-%d.log", e.dir, seq)
			now := time.Now()
			if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "rita", SessionID: id, Seq: seq, Started: now, LogPath: log}, nil); err != nil {
				t.Fatal(err)
			}
			if moved {
				if _, err := e.db.SQL().ExecContext(ctx, `UPDATE tasks SET head = ?, work_head = ? WHERE id = ?`, b, b, tk.ID); err != nil {
					t.Fatal(err)
				}
			}
			st := runner.Settlement{
				Session: runner.SessionRecord{Agent: "rita", SessionID: id, Seq: seq, LogPath: log,
					Outcome: agent.ExitOutcome{Kind: agent.Success},
					Result:  backend.Result{Outcome: backend.OutcomeSuccess, Started: now, Ended: now.Add(time.Second), Text: "fine\nPASS"}},
				Completed: true, Review: tk.ID, ReviewHead: a, Result: "fine\nPASS",
			}
			if recovered {
				// The daemon dies once the outcome is in the log.
				rec, err := json.Marshal(e.s.RecordOf(st))
				if err != nil {
					t.Fatal(err)
				}
				if err := logs.AppendOutcome(log, rec); err != nil {
					t.Fatal(err)
				}
				if got, err := e.s.Recover(ctx, []string{"rita"}); err != nil || len(got) != 1 {
					t.Fatalf("Recover = %+v, %v", got, err)
				}
			} else if _, err := e.s.Settle(ctx, st, nil); err != nil {
				t.Fatalf("Settle of a verdict on another head: %v; want it settled", err)
			}
			if open := unsettledIDs(t, e); len(open) != 0 {
				t.Fatalf("unsettled %v: the review session must be settled all the same", open)
			}
			return e.task(t, tk.ID)
		}
		for i, recovered := range []bool{false, true} {
			// The head it was shown: the PASS closes it (no merge queue here).
			if got := review(uint32(2*i+1), false, recovered); got.StateName != "CLOSED" || got.ReviewState != "complete" {
				t.Fatalf("recovered %v: a PASS on the head shown left the task %s, review %q; want CLOSED, complete",
					recovered, got.StateName, got.ReviewState)
			}
			got := review(uint32(2*i+2), true, recovered)
			if got.StateName != "DONE" || got.ReviewState != "reviewing" || got.Head != b {
				t.Fatalf("recovered %v: a PASS on %s, the task at %s since: task %s, review %q at %s; want DONE, still reviewing",
					recovered, a[:12], b[:12], got.StateName, got.ReviewState, got.Head)
			}
			if rounds, err := e.board.Rounds(ctx, got.ID); err != nil || len(rounds) != 0 {
				t.Fatalf("recovered %v: rounds %+v, %v; want none recorded", recovered, rounds, err)
			}
		}
	})
}
