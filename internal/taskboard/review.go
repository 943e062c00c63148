package taskboard

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
)

// The review loop of seed 002 on top of the task machine of seed 004
// (docs/task-lifecycle.md): a claim by the worker starts the loop (init ->
// working); the worker's DONE takes the task to DONE and the loop to
// reviewing, and the task is not closed; the reviewer's PASS completes the
// loop and closes the task (DONE -> CLOSED); its FAIL sends the task back to
// the same worker (DONE -> FAILED -> OPEN, assigned to the worker, the
// feedback as its result, iteration + 1), or, at max_iterations, leaves it
// FAILED (reason max_iterations).

// loopOf rebuilds t's review loop from what the board stores. A record
// that cannot be read resumes as failed (review.Restore): unreadable says
// why, and err is only a failure to read it at all.
func loopOf(ctx context.Context, q querier, t Task) (l *review.Loop, unreadable, err error) {
	rounds, err := rounds(ctx, q, t.ID)
	if err != nil {
		return nil, nil, err
	}
	l, unreadable = review.Restore(t.ReviewState, review.Snapshot{Iteration: uint32(t.Iteration),
		MaxIterations: uint32(t.MaxIterations), History: rounds, Failure: review.FailureReason(t.ReviewFailure)})
	return l, unreadable, nil
}

func rounds(ctx context.Context, q querier, id int64) ([]review.Round, error) {
	rows, err := q.QueryContext(ctx, `SELECT iteration, verdict, feedback, at FROM review_rounds WHERE task_id = ? ORDER BY iteration`, id)
	if err != nil {
		return nil, fmt.Errorf("taskboard: review rounds of task %d: %w", id, err)
	}
	defer rows.Close()
	var out []review.Round
	for rows.Next() {
		var r review.Round
		var verdict, at string
		if err := rows.Scan(&r.Iteration, &verdict, &r.Feedback, &at); err != nil {
			return nil, err
		}
		// A verdict that is not one is kept as it is, for Restore to refuse.
		r.Verdict, _ = review.ParseSignal(verdict)
		r.At, _ = getTime(at)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Rounds are the review verdicts on task id, oldest first.
func (b *Board) Rounds(ctx context.Context, id int64) ([]review.Round, error) {
	return rounds(ctx, b.db.ReadSQL(), id)
}

// reviewOf is the review columns of a new task with reviewer (""; none):
// its loop's state, init when it has one, and its max_iterations, the
// default for max 0 or less.
func reviewOf(reviewer string, max int) (state string, maxIterations int) {
	if reviewer != "" {
		state = review.Init.String()
	}
	if max <= 0 {
		max = int(review.DefaultMaxIterations)
	}
	return state, max
}

// reviewOnClaim starts the review loop when a worker first claims a task
// that has (or, by the worker's config, gets) a reviewer.
func (b *Board) reviewOnClaim(ctx context.Context, tx *sql.Tx, t *Task, agent string, m *move) error {
	if t.ReviewState == "" && t.Reviewer == "" && b.opts.ReviewerOf != nil {
		if r, max := b.opts.ReviewerOf(agent); r != "" && r != agent {
			t.Reviewer = r
			t.ReviewState, t.MaxIterations = reviewOf(r, max)
		}
	}
	if t.ReviewState == review.Working.String() && t.Worker != agent {
		// Back on the board after its worker stopped: whoever claims it works on.
		t.Worker = agent
		m.set, m.args = append(m.set, "worker = ?"), append(m.args, agent)
	}
	if t.ReviewState != review.Init.String() {
		return nil
	}
	l, unreadable, err := loopOf(ctx, tx, *t)
	if err != nil {
		return err
	}
	if unreadable != nil {
		// Failed: nobody works on it. (The claim's write is undone, so
		// there is no storing the failure here; the operator cancels it.)
		return fmt.Errorf("task %d: its review record cannot be read, so its loop is failed: %w: %w", t.ID, unreadable, ErrState)
	}
	if err := l.Start(); err != nil {
		return fmt.Errorf("task %d: %w", t.ID, err)
	}
	t.ReviewState, t.Iteration, t.Worker = l.State().String(), int(l.Iteration()), agent
	m.set = append(m.set, "reviewer = ?", "max_iterations = ?", "review_state = ?", "iteration = ?", "worker = ?")
	m.args = append(m.args, t.Reviewer, t.MaxIterations, t.ReviewState, t.Iteration, t.Worker)
	return nil
}

// reviewOnDone moves the loop on at the worker's DONE: the task is DONE
// and waits for its reviewer.
func (b *Board) reviewOnDone(t *Task, m *move) error {
	if t.ReviewState != review.Working.String() {
		return nil
	}
	t.ReviewState = review.Reviewing.String()
	m.set = append(m.set, "review_state = ?")
	m.args = append(m.args, t.ReviewState)
	return nil
}

// failLoop has m fail t's review loop for reason when the loop still runs
// (init, working or reviewing): the task fails or is cancelled under it
// (seed 002's failed rows: the worker's FAIL, an agent error, a cancel).
// A loop that completed stays complete (the merge queue's rejections
// reopen it), one already failed keeps its first reason, and one whose
// state cannot be read resumes as failed anyway.
func failLoop(t *Task, reason review.FailureReason, m *move) {
	st, err := review.ParseState(t.ReviewState)
	if t.Reviewer == "" || err != nil || !review.CanTransition(st, review.Failed) {
		return
	}
	t.ReviewState, t.ReviewFailure = review.Failed.String(), string(reason)
	m.set = append(m.set, "review_state = ?", "review_failure = ?")
	m.args = append(m.args, t.ReviewState, t.ReviewFailure)
}

// reviewing is a task waiting for the verdict of the reviewer (the one
// parameter).
const reviewing = `reviewer = ? AND review_state = 'reviewing' AND state = 'DONE'`

// ReviewFor is the oldest task waiting for reviewer's verdict, if any.
func (b *Board) ReviewFor(ctx context.Context, reviewer string) (Task, bool, error) {
	ts, err := queryTasks(ctx, b.db.ReadSQL(), `SELECT `+taskCols+` FROM tasks
		WHERE `+reviewing+` ORDER BY updated_at, id LIMIT 1`, reviewer)
	if err != nil || len(ts) == 0 {
		return Task{}, false, err
	}
	return ts[0], true, nil
}

// Verdict records reviewer's PASS (pass) or FAIL on task id, with
// feedback: the verdict on head, the commit the reviewer was shown (the
// task's frozen head then; "" for a task that had none). It applies only
// while head is still the task's frozen head: a verdict on a commit the
// task is no longer reported done at is refused (ErrState), so that a PASS
// never passes work its reviewer was not shown.
func (b *Board) Verdict(ctx context.Context, id int64, reviewer, head string, pass bool, feedback string) (Task, error) {
	var t Task
	err := b.write(ctx, "review verdict", func(tx *sql.Tx) error {
		var err error
		t, err = b.VerdictTx(ctx, tx, id, reviewer, head, pass, feedback)
		return err
	})
	return t, err
}

// VerdictTx is Verdict in the caller's transaction (a session's
// settlement).
func (b *Board) VerdictTx(ctx context.Context, tx *sql.Tx, id int64, reviewer, head string, pass bool, feedback string) (Task, error) {
	var t Task
	err := func() error {
		var err error
		if t, err = getTask(ctx, tx, id); err != nil {
			return err
		}
		if t.ReviewState != review.Reviewing.String() || t.State != task.Done {
			return fmt.Errorf("task %d is %s with review %q: no verdict is awaited: %w", id, t.State, t.ReviewState, ErrState)
		}
		if t.Reviewer != reviewer {
			return fmt.Errorf("task %d is reviewed by %s, not %s: %w", id, t.Reviewer, reviewer, ErrNotHolder)
		}
		if t.Head != head {
			return fmt.Errorf("task %d is DONE at frozen head %s, not at %s, the commit %s was shown: the verdict is on other work: %w",
				id, cmp.Or(short(t.Head), "none"), cmp.Or(short(head), "none"), reviewer, ErrState)
		}
		l, unreadable, err := loopOf(ctx, tx, t)
		if err != nil {
			return err
		}
		if unreadable != nil {
			// The loop resumes as failed: no verdict applies, and the task
			// fails with it (DONE -> FAILED) instead of waiting for one
			// forever; the reviewer's session is settled all the same.
			if err := b.unreadableLoop(ctx, tx, &t, l, "agent:"+reviewer, unreadable); err != nil {
				return err
			}
			t, err = getTask(ctx, tx, id)
			return err
		}
		sig := review.Fail
		if pass {
			sig = review.Pass
		}
		now := b.opts.Now()
		if err := l.ReviewResult(sig, feedback, now); err != nil {
			return fmt.Errorf("task %d: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO review_rounds (task_id, iteration, verdict, feedback, reviewer, at)
			VALUES (?, ?, ?, ?, ?, ?)`, id, t.Iteration, sig.String(), feedback, reviewer, store.FormatTime(now)); err != nil {
			return fmt.Errorf("taskboard: review round: %w", err)
		}
		if err := b.afterVerdict(ctx, tx, &t, l, reviewer, feedback); err != nil {
			return err
		}
		t, err = getTask(ctx, tx, id) // as stored, with what the moves set
		return err
	}()
	return t, err
}

// GaveUpSince is task id as stored when a verdict of reviewer's made at
// since or later left it FAILED for good, and ok; ok is false when the task
// is not FAILED, or no verdict of reviewer's since failed it. A settlement
// whose COMMIT's answer was lost learns from it what its verdict did.
// since is a time of this process's clock (Options.Now).
func (b *Board) GaveUpSince(ctx context.Context, id int64, reviewer string, since time.Time) (t Task, ok bool, err error) {
	// FAILED with its review loop failed by a verdict (max_iterations, or
	// a record the verdict found unreadable): a FAIL that sent the task
	// back to its worker moved it to FAILED too (then OPEN), and the
	// worker may have failed it since, or the operator cancelled it,
	// failing the loop for another reason.
	if t, err = b.Get(ctx, id); err != nil || t.State != task.Failed || t.ReviewState != review.Failed.String() ||
		t.ReviewFailure != "" && t.ReviewFailure != string(review.ReasonMaxIterations) {
		return t, false, err
	}
	err = b.db.ReadSQL().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM events
		WHERE task_id = ? AND to_state = ? AND actor = ? AND at >= ?)`,
		id, task.Failed.String(), "agent:"+reviewer, store.FormatTime(since)).Scan(&ok)
	if err != nil {
		return t, false, fmt.Errorf("taskboard: gave up: %w", err)
	}
	return t, ok, nil
}

// eventReviewPass is the event of a PASS that moves no state (the merge
// queue closes the task once merged).
const eventReviewPass = "review_pass"

// afterVerdict moves the task as the loop now stands.
func (b *Board) afterVerdict(ctx context.Context, tx *sql.Tx, t *Task, l *review.Loop, reviewer, feedback string) error {
	actor := "agent:" + reviewer
	t.ReviewState, t.Iteration, t.ReviewFailure = l.State().String(), int(l.Iteration()), string(l.Failure())
	loopCols := []string{"review_state = ?", "iteration = ?", "review_failure = ?"}
	loopArgs := []any{t.ReviewState, t.Iteration, t.ReviewFailure}
	switch l.State() {
	case review.Complete:
		why := oneLine(fmt.Sprintf("review PASS by %s (round %d)", reviewer, t.Iteration), feedback)
		if !b.opts.AutoClose {
			// The task stays DONE for the merge queue; the verdict is still
			// a line of its history (task show, events --task).
			if _, err := tx.ExecContext(ctx, `UPDATE tasks SET review_state = ? WHERE id = ?`, t.ReviewState, t.ID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
				session_id, seq, task_id) VALUES (?, ?, ?, ?, ?, 'task', ?, ?, '', 0, ?)`,
				b.now(), reviewer, t.State.String(), eventReviewPass, t.State.String(), actor, why, t.ID); err != nil {
				return err
			}
			if err := b.closeParent(ctx, tx, t); err != nil { // a split task: nothing of its own to merge
				return err
			}
			// A subtask passed is done for its parent (parentCheck), as a
			// subtask's DONE with no review is: its parent may be done now.
			return b.parentCheck(ctx, tx, t.Parent)
		}
		return b.apply(ctx, tx, t, move{to: task.Closed, reason: task.ReasonCompleted, actor: actor,
			why: why, set: loopCols, args: loopArgs})
	case review.Working:
		if err := b.apply(ctx, tx, t, move{to: task.Failed, actor: actor,
			why: oneLine(fmt.Sprintf("review FAIL (round %d)", t.Iteration-1), feedback), set: loopCols, args: loopArgs}); err != nil {
			return err
		}
		return b.apply(ctx, tx, t, move{to: task.Open, actor: "swarmd", why: "back to " + orAnyAgent(t.Worker) + " with the review",
			set:  released("assignee = ?", "result = ?"),
			args: []any{t.Worker, feedback}})
	default: // failed: max_iterations
		return b.apply(ctx, tx, t, move{to: task.Failed, actor: actor,
			why:  fmt.Sprintf("%s: %d review rounds failed", l.Failure(), len(l.History())),
			set:  append(loopCols, "result = ?"),
			args: append(loopArgs, feedback)})
	}
}

// unreadableLoop stores t's loop, which could not be read, as the failed
// loop it resumed as, and fails the task (DONE -> FAILED): the work is not
// reviewed, so it is neither closed nor merged, until a person retries it.
func (b *Board) unreadableLoop(ctx context.Context, tx *sql.Tx, t *Task, l *review.Loop, actor string, why error) error {
	t.ReviewState, t.Iteration, t.ReviewFailure = l.State().String(), int(l.Iteration()), ""
	return b.apply(ctx, tx, t, move{to: task.Failed, actor: actor,
		why:  oneLine("review record unreadable, the loop resumed as failed", why.Error()),
		set:  []string{"review_state = ?", "iteration = ?", "review_failure = ?"},
		args: []any{t.ReviewState, t.Iteration, t.ReviewFailure}})
}
