package taskboard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
)

// EventKeptOverRestart is the event of a task a daemon's start gave back to
// the agent that held it over the daemon's orderly stop: it moves no state
// (the task machine has no row for it) and counts no retry.
const EventKeptOverRestart = "kept_over_restart"

// heldOverSQL selects what HoldOver marks (its parameters: the agents): a
// task held by one of them whose holding session ended and was settled by
// its daemon, not closed as orphaned (a daemon that died, a lost lease),
// or never began (its prompt took the task, and the stop came before its
// start: no session will ever run under that id).
const heldOverSQL = `SELECT ` + taskCols + ` FROM tasks WHERE state IN ('CLAIMED', 'IN_PROGRESS')%s
	AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = tasks.claim_session
		AND (s.settled_at IS NULL OR s.outcome = '` + store.OutcomeOrphaned + `'))`

// HoldOver marks, as held over the orderly stop of daemon (its name, as
// Recovery.Daemon gives it), the tasks agents hold whose holding sessions
// ended and were recorded: call it once every runner of the daemon has
// stopped. Recover then gives them back to their agents at the daemon's
// next start, counting no retry; the mark stays until a session of the
// agent takes the task back (Continue, Start) or the task moves. A task
// whose session was cut off without its end recorded (a force stop past
// the grace period, a store away) is not marked, and the next start takes
// it back as after a crash. Only agents whose lease the daemon still holds
// have their tasks marked (a shared store): the others are another
// daemon's to recover. It returns the tasks marked.
func (b *Board) HoldOver(ctx context.Context, daemon string, agents []string) ([]Task, error) {
	if daemon == "" {
		return nil, invalidf("hold over: no daemon named")
	}
	out, err := b.holdOver(ctx, daemon, agents)
	var fenced *store.FencedError
	if !errors.As(err, &fenced) {
		return out, err
	}
	// An agent's lease is lost: each agent on its own, the ones fenced
	// left to the daemon that has them now.
	out = nil
	for _, a := range agents {
		ts, err := b.holdOver(ctx, daemon, []string{a})
		if errors.As(err, &fenced) {
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, ts...)
	}
	return out, nil
}

func (b *Board) holdOver(ctx context.Context, daemon string, agents []string) ([]Task, error) {
	var out []Task
	err := b.write(ctx, "hold over", func(tx *sql.Tx) error {
		out = nil
		scope, args := store.AndIn("claimant", agents)
		ts, err := queryTasks(ctx, tx, fmt.Sprintf(heldOverSQL, scope), args...)
		if err != nil {
			return err
		}
		fenced := map[string]bool{}
		for _, t := range ts {
			if !fenced[t.Claimant] {
				if err := b.db.FenceTx(ctx, tx, t.Claimant); err != nil {
					return err
				}
				fenced[t.Claimant] = true
			}
			if _, err := tx.ExecContext(ctx, `UPDATE tasks SET held_over = ? WHERE id = ?`, daemon, t.ID); err != nil {
				return err
			}
			t.HeldOver = daemon
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("taskboard: hold over: %w", err)
	}
	return out, nil
}

// Recovery says what a daemon's start takes back of the tasks agents held
// when it (or its predecessor) stopped.
type Recovery struct {
	// Agents: the agents whose held tasks are this daemon's to recover;
	// nil: every held task (a daemon on a store of its own).
	Agents []string
	// Daemon: this daemon, as HoldOver named it; its marks are the ones it
	// left, and it also recovers the tasks it held over for an agent it no
	// longer runs. "": every mark is this daemon's (a store of its own).
	Daemon string
	// Runs reports whether this daemon runs agent now.
	Runs func(agent string) bool
	// Why is the reason recorded for the tasks taken back as after a crash.
	Why string
}

// Recovered is what Recover did, task by task.
type Recovered struct {
	// Kept: held over this daemon's orderly stop, given back to the agent
	// that held them, whose next session continues them (an event
	// EventKeptOverRestart, no move, no retry; still marked until then).
	Kept []Task
	// Requeued: held over an orderly stop for an agent this daemon does not
	// run, or by another daemon, whose worktree has the work: OPEN, with no
	// transition reason (no retry), as `task requeue` does.
	Requeued []Task
	// Orphaned: held by a session that no orderly stop ended (its daemon
	// died, or lost the agent's lease): taken back as Orphan does, a retry.
	Orphaned []Task
}

// Recover takes back, at a daemon's start, the tasks r's agents held (no
// session runs yet, so none is held by a live session): what the daemon's
// orderly stop held over (HoldOver) stays with its agent, or is requeued
// without a retry when the agent is gone; the rest is orphaned.
func (b *Board) Recover(ctx context.Context, r Recovery) (Recovered, error) {
	var out Recovered
	err := b.write(ctx, "recover", func(tx *sql.Tx) error {
		out = Recovered{}
		q := `SELECT ` + taskCols + ` FROM tasks WHERE state IN ('CLAIMED', 'IN_PROGRESS')`
		var args []any
		if r.Agents != nil {
			scope, in := store.AndIn("claimant", r.Agents)
			args = in
			if r.Daemon == "" {
				q += scope
			} else {
				// and what it held over for an agent it no longer runs
				q += ` AND (` + strings.TrimPrefix(scope, " AND ") + ` OR held_over = ?)`
				args = append(args, r.Daemon)
			}
		}
		ts, err := queryTasks(ctx, tx, q, args...)
		if err != nil {
			return err
		}
		for i := range ts {
			t := &ts[i]
			mark := t.HeldOver
			mine := mark != "" && (r.Daemon == "" || mark == r.Daemon)
			switch {
			case mine && r.Runs != nil && r.Runs(t.Claimant):
				err = b.keepTx(ctx, tx, t)
				out.Kept = append(out.Kept, *t)
			case mark != "":
				why := fmt.Sprintf("requeued after swarmd's orderly stop: %s is no longer configured", t.Claimant)
				if !mine {
					why = fmt.Sprintf("requeued after the orderly stop of daemon %s, whose worktree of %s has the work", mark, t.Claimant)
				}
				err = b.requeueTx(ctx, tx, t, why)
				out.Requeued = append(out.Requeued, *t)
			default:
				err = b.orphanTx(ctx, tx, t, r.Why)
				out.Orphaned = append(out.Orphaned, *t)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Recovered{}, err
	}
	return out, nil
}

// keepTx gives t, held over an orderly stop, back to its claimant, and
// records it (once per holding session: a start run again after its first
// try's commit went unanswered, or a second restart before the agent ran a
// session, records nothing more). The claim and the mark stay where they
// are: the agent's next prompt moves the claim to its session (Continue),
// which ends the hold; a daemon killed before that keeps it again.
func (b *Board) keepTx(ctx context.Context, tx *sql.Tx, t *Task) error {
	var last, lastSession string
	err := tx.QueryRowContext(ctx, `SELECT event, session_id FROM events WHERE task_id = ? ORDER BY id DESC LIMIT 1`, t.ID).
		Scan(&last, &lastSession)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("taskboard: keep task %d: %w", t.ID, err)
	}
	if last == EventKeptOverRestart && lastSession == t.ClaimSession {
		return nil
	}
	abort, err := abortOf(ctx, tx, t.ClaimSession)
	if err != nil {
		return err
	}
	why := fmt.Sprintf("kept for %s over swarmd's restart: its session ended with the daemon's orderly stop, "+
		"and %s's next session continues it (no retry)", t.Claimant, t.Claimant)
	if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
		abort_reason, session_id, seq, task_id) VALUES (?, '', ?, ?, ?, 'task', 'swarmd', ?, ?, ?, 0, ?)`,
		b.now(), t.StateName, EventKeptOverRestart, t.StateName, why, string(abort), t.ClaimSession, t.ID); err != nil {
		return fmt.Errorf("taskboard: keep task %d: %w", t.ID, err)
	}
	return nil
}

// requeueTx makes t, held by an agent that will not continue it for a cause
// that is not the task's failure (held over an orderly stop for an agent
// gone, or another daemon's; GiveBack's stops), OPEN: no transition reason,
// so no retry (CLAIMED or IN_PROGRESS -> OPEN, as `task requeue`), a new
// line, and the abort reason of how its session ended.
func (b *Board) requeueTx(ctx context.Context, tx *sql.Tx, t *Task, why string) error {
	abort, err := abortOf(ctx, tx, t.ClaimSession)
	if err != nil {
		return err
	}
	return b.apply(ctx, tx, t, move{to: task.Open, abort: abort, actor: "swarmd", why: why, set: newLine()})
}
