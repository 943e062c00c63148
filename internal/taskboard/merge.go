package taskboard

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/task"
)

// Ready is a DONE task whose work waits to be merged: nobody reviews it, or
// its review passed.
type Ready struct {
	ID     int64
	Worker string // the agent whose branch holds the work
	// Head is the commit frozen when the task was reported DONE: exactly
	// what is merged. "" when the operator reported it (no session's line):
	// the worker's branch as it stands then.
	Head string
}

// readyToMergeSQL reads the DONE tasks through their own index (tasks_done),
// in its order: the merge feeder asks it after every change of the
// database, and the board's CLOSED history is not read for it.
// A task split into subtasks is not ready: it has no change of its own
// (closeParent closes it once they are merged), unless its worker
// reported it done at a head after the split (its review failed and sent
// it back): that change is merged once every subtask is, as it builds on
// them.
const readyToMergeSQL = `SELECT id, IIF(worker <> '', worker, claimant), head FROM tasks
	WHERE state = 'DONE' AND review_state IN ('', ?)
	AND NOT EXISTS (SELECT 1 FROM tasks kid WHERE kid.parent_id = tasks.id
		AND (tasks.head = '' OR kid.state <> 'CLOSED')) ORDER BY updated_at, id`

// ReadyToMerge lists DONE tasks that passed review (or need none) and that
// skip does not exclude (those already queued), oldest first.
func (b *Board) ReadyToMerge(ctx context.Context, skip func(id int64) bool) ([]Ready, error) {
	rows, err := b.db.ReadSQL().QueryContext(ctx, readyToMergeSQL, review.Complete.String())
	if err != nil {
		return nil, fmt.Errorf("taskboard: ready to merge: %w", err)
	}
	defer rows.Close()
	var out []Ready
	for rows.Next() {
		var r Ready
		if err := rows.Scan(&r.ID, &r.Worker, &r.Head); err != nil {
			return nil, fmt.Errorf("taskboard: ready to merge: %w", err)
		}
		if r.Worker != "" && (skip == nil || !skip(r.ID)) {
			out = append(out, r)
		}
	}
	return out, rows.Err()
}

// Mergeable says whether the merge queue may merge task id's change at
// commit head now: nil when it may, else an error wrapping ErrState that
// names the task, its state and both heads (ErrNotFound: no such task).
// The rule is ReadyToMerge's, and one more: head is the task's frozen
// head (the commit its reviewer was shown). A queue entry at any other
// commit (an attempt the queue rejected, which the task's worker has
// reworked and reported done since) is not the task's work: merged, it
// would close the task on a change nobody reviewed, and the work that
// was would never merge. A task reported done by the operator has no
// frozen head: the queue took its worker's branch when it first queued it.
func (b *Board) Mergeable(ctx context.Context, id int64, head string) error {
	return mergeable(ctx, b.db.ReadSQL(), id, head)
}

// MergeableTx is Mergeable in the caller's transaction.
func (b *Board) MergeableTx(ctx context.Context, tx *sql.Tx, id int64, head string) error {
	return mergeable(ctx, tx, id, head)
}

func mergeable(ctx context.Context, q querier, id int64, head string) error {
	t, err := getTask(ctx, q, id)
	if err != nil {
		return err
	}
	return mergeableTask(ctx, q, t, head)
}

// mergeableTask is mergeable for t, as read in q.
func mergeableTask(ctx context.Context, q querier, t Task, head string) error {
	if err := workAt(t, head); err != nil {
		return err
	}
	frozen := cmp.Or(short(t.Head), "none")
	switch {
	case t.ReviewState != "" && t.ReviewState != review.Complete.String():
		return &NotMergeable{fmt.Sprintf("task %d is DONE at frozen head %s with its review %s: it is merged once its review passed, not before",
			t.ID, frozen, t.ReviewState)}
	}
	// A split task: with no head of its own, closeParent closes it; with
	// one, it is merged once every subtask is (readyToMergeSQL).
	kids := `SELECT EXISTS (SELECT 1 FROM tasks WHERE parent_id = ? AND state <> 'CLOSED')`
	if t.Head == "" {
		kids = `SELECT EXISTS (SELECT 1 FROM tasks WHERE parent_id = ?)`
	}
	var waiting bool
	if err := q.QueryRowContext(ctx, kids, t.ID).Scan(&waiting); err != nil {
		return fmt.Errorf("taskboard: subtasks of task %d: %w", t.ID, err)
	}
	if waiting {
		return &NotMergeable{fmt.Sprintf("task %d is DONE at frozen head %s with subtasks not all merged: it is merged after them, not at %s",
			t.ID, frozen, short(head))}
	}
	return nil
}

// workAt says whether commit head is task t's work: t is DONE at that
// frozen head (or at none: the operator reported it done). nil when it
// is, else a *NotMergeable.
func workAt(t Task, head string) error {
	frozen := cmp.Or(short(t.Head), "none")
	switch {
	case t.State != task.Done:
		return &NotMergeable{fmt.Sprintf("task %d is %s (frozen head %s), not DONE at %s: only a DONE task's frozen head is merged",
			t.ID, t.State, frozen, short(head))}
	case t.Head != "" && t.Head != head:
		return &NotMergeable{fmt.Sprintf("task %d is DONE at frozen head %s, not at %s: it was reported done again since",
			t.ID, frozen, short(head))}
	}
	return nil
}

// Merged closes a DONE task whose work the merge queue integrated: the
// queue's entry at commit head, merged as commit. It is refused (ErrState)
// unless head is the task's work (DONE at that frozen head, or at none): a
// change that is not the task's work does not close it. Whether the task
// was ready to merge (its review passed, no subtask left unmerged) is
// asked before the target moves (Mergeable), not here: once its frozen
// head is on the target the task is closed on it, even when the operator
// hung a subtask on it since, as the queue never merges a merged head
// again, and the task would stay DONE for good.
func (b *Board) Merged(ctx context.Context, id int64, head, commit string) (Task, error) {
	var t Task
	err := b.write(ctx, "merged", func(tx *sql.Tx) error {
		var err error
		if t, err = getTask(ctx, tx, id); err != nil {
			return err
		}
		if err := workAt(t, head); err != nil {
			return fmt.Errorf("merged as %s: %w", short(commit), err)
		}
		if err := b.apply(ctx, tx, &t, move{to: task.Closed, reason: task.ReasonCompleted, actor: "merge-queue",
			why: "merged as " + short(commit)}); err != nil {
			return err
		}
		t, err = getTask(ctx, tx, id)
		return err
	})
	return t, err
}

// Rejected sends a DONE task back to its worker: the merge queue could not
// integrate it (a conflict, a red gate). DONE -> FAILED -> OPEN, assigned to
// the worker with what went wrong as its result, no retry counted. The
// max-th rejection (max > 0) fails the task for good: it stays FAILED
// (merge_rejected), and gaveUp says so. head is the commit the queue
// rejected: a rejection of a change that is not the task's to merge now
// (Mergeable) is refused (ErrState), so that a stale attempt's red gate
// does not send back the work the task was reported done with since.
func (b *Board) Rejected(ctx context.Context, id int64, head, why, detail string, max int) (t Task, gaveUp bool, err error) {
	err = b.write(ctx, "merge rejected", func(tx *sql.Tx) error {
		var err error
		if t, err = getTask(ctx, tx, id); err != nil {
			return err
		}
		if err := mergeableTask(ctx, tx, t, head); err != nil {
			return fmt.Errorf("rejected at %s: %w", short(head), err)
		}
		var before int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM events WHERE task_id = ? AND effect = 'task'
			AND actor = 'merge-queue' AND to_state = 'FAILED'`, id).Scan(&before); err != nil {
			return err
		}
		worker := t.Worker
		if worker == "" {
			worker = t.Claimant
		}
		if gaveUp = max > 0 && before+1 >= max; gaveUp {
			return b.apply(ctx, tx, &t, move{to: task.Failed, reason: task.ReasonAborted, actor: "merge-queue",
				why:  fmt.Sprintf("merge_rejected: %d rejections (merge.max_rejections %d), the last: %s", before+1, max, oneLine(why, detail)),
				set:  []string{"result = ?"},
				args: []any{why + "\n\n" + detail}})
		}
		if err := b.apply(ctx, tx, &t, move{to: task.Failed, actor: "merge-queue", why: oneLine(why, detail)}); err != nil {
			return err
		}
		set := released("assignee = ?", "result = ?")
		args := []any{worker, why + "\n\n" + detail}
		// The rework is reviewed again: the worker's branch decides what
		// the gate runs, so merging a rework on the old PASS would merge
		// work no reviewer saw (review.Loop.Reopen).
		if st, it, ok, err := reopenReview(ctx, tx, t); err != nil {
			return err
		} else if ok {
			set, args = append(set, "review_state = ?", "iteration = ?"), append(args, st, it)
		}
		if err := b.apply(ctx, tx, &t, move{to: task.Open, actor: "merge-queue", why: "back to " + worker, set: set, args: args}); err != nil {
			return err
		}
		t, err = getTask(ctx, tx, id)
		return err
	})
	if gaveUp && err == nil {
		t, err = getTask(ctx, b.db.ReadSQL(), id)
	}
	return t, gaveUp, err
}

// reopenReview is t's review loop reopened (review.Loop.Reopen) when it
// was complete: its new state and iteration; ok is false when t has no
// passed review to reopen.
func reopenReview(ctx context.Context, tx *sql.Tx, t Task) (state string, iteration int, ok bool, err error) {
	if t.Reviewer == "" || t.ReviewState != review.Complete.String() {
		return "", 0, false, nil
	}
	l, unreadable, err := loopOf(ctx, tx, t)
	if err != nil || unreadable != nil {
		return "", 0, false, errors.Join(err, unreadable)
	}
	if err := l.Reopen(); err != nil {
		return "", 0, false, fmt.Errorf("task %d: %w", t.ID, err)
	}
	return l.State().String(), int(l.Iteration()), true, nil
}

// retryReview restarts t's failed review loop for the operator's retry
// (review.Loop.Retry), and ok; ok is false when t has no failed loop. A
// loop whose record cannot be read stays failed: the retry is refused.
func retryReview(ctx context.Context, tx *sql.Tx, t Task) (l *review.Loop, ok bool, err error) {
	if t.Reviewer == "" || t.ReviewState != review.Failed.String() {
		return nil, false, nil
	}
	l, unreadable, err := loopOf(ctx, tx, t)
	if err != nil || unreadable != nil {
		return nil, false, errors.Join(err, unreadable)
	}
	if err := l.Retry(); err != nil {
		return nil, false, fmt.Errorf("task %d: %w", t.ID, err)
	}
	return l, true, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
