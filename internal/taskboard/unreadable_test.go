package taskboard

import (
	"context"
	"errors"
	"testing"

	"github.com/swarmd/swarmd/internal/task"
)

// TestUnreadableReviewResumesAsFailed: a review loop whose stored record
// cannot be read is not an error for the reviewer's verdict, which would
// leave the reviewer's session unsettled and the task waiting for ever: the
// loop resumes as failed and the task fails with it, unreviewed, so it is
// neither closed nor merged. A claim that would start such a loop is
// refused as a state that allows no work.
func TestUnreadableReviewResumesAsFailed(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		corrupt string // SQL that makes the stored loop unreadable
	}{
		{"reviewing at iteration 0", `UPDATE tasks SET iteration = 0 WHERE id = ?`},
		{"a round of the iteration under review", `INSERT INTO review_rounds (task_id, iteration, verdict, feedback, reviewer, at)
			VALUES (?, 1, 'fail', 'x', 'rita', '2026-01-01T00:00:00Z')`},
		{"a verdict that is none", `INSERT INTO review_rounds (task_id, iteration, verdict, feedback, reviewer, at)
			VALUES (?, 0, 'maybe', 'x', 'rita', '2026-01-01T00:00:00Z')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, db := openBoard(t, "", Options{AutoClose: true})
			tk := add(t, b, NewTask{Title: "feature", Reviewer: "rita"})
			started(t, b, tk, "alice", "a-1")
			if _, err := b.Done(ctx, tk.ID, Holder{Agent: "alice", Session: "a-1"}, "done"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.SQL().ExecContext(ctx, tc.corrupt, tk.ID); err != nil {
				t.Fatal(err)
			}
			got, err := b.Verdict(ctx, tk.ID, "rita", "", true, "LGTM")
			if err != nil {
				t.Fatalf("verdict on an unreadable loop: %v", err)
			}
			if got.State != task.Failed || got.ReviewState != "failed" {
				t.Fatalf("task is %s, review %q; want FAILED, failed", got.StateName, got.ReviewState)
			}
			if _, ok, _ := b.ReviewFor(ctx, "rita"); ok {
				t.Error("rita is still asked to review it")
			}
			if rs, _ := b.Rounds(ctx, tk.ID); len(rs) > 1 {
				t.Errorf("the verdict was recorded as a round: %+v", rs)
			}
		})
	}
	t.Run("claim", func(t *testing.T) {
		b, db := openBoard(t, "", Options{})
		tk := add(t, b, NewTask{Title: "feature", Reviewer: "rita"})
		if _, err := db.SQL().ExecContext(ctx, `UPDATE tasks SET iteration = 2 WHERE id = ?`, tk.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Claim(ctx, tk.ID, "alice", "a-1"); !errors.Is(err, ErrState) {
			t.Fatalf("claim of a task whose loop cannot be read = %v, want ErrState", err)
		}
		wantState(t, b, tk.ID, task.Open)
	})
}
