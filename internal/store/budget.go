package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Event names of budgets in the event log. A budget is kept beside the
// state machine, so these are not transitions: from and to are the state
// the agent was in.
const (
	EventBudgetWarning   = "BudgetWarning"   // 80% or 95% of a budget spent
	EventBudgetExhausted = "BudgetExhausted" // 100%: the agent is paused
	EventBudgetSet       = "BudgetSet"       // swarmd budget set
	EventToolDenied      = "ToolDenied"      // a session called a tool its policy refuses
)

// BudgetLimit is a limit set at runtime (swarmd budget set).
type BudgetLimit struct {
	Scope string // an agent's name, or the swarm's scope name
	USD   float64
	Actor string
	SetAt time.Time
}

// SetBudgetLimit stores l, replacing scope's, and records e in the event
// log, in one transaction. While a Journal runs, use Journal.SetBudgetLimit.
func (db *DB) SetBudgetLimit(ctx context.Context, l BudgetLimit, e EventRecord) error {
	return db.InTx(ctx, "set budget of "+l.Scope, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO budget_limits (scope, usd, actor, set_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (scope) DO UPDATE SET usd = excluded.usd, actor = excluded.actor, set_at = excluded.set_at`,
			l.Scope, l.USD, l.Actor, FormatTime(l.SetAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, insertEventSQL, appendEventArgs(nil, &e)...)
		return err
	})
}

// ClearBudgetLimit deletes scope's runtime limit and, if it had one,
// records e, in one transaction; it reports whether there was one.
func (db *DB) ClearBudgetLimit(ctx context.Context, scope string, e EventRecord) (bool, error) {
	found := false
	err := db.InTx(ctx, "clear budget of "+scope, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM budget_limits WHERE scope = ?`, scope)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		found = true
		_, err = tx.ExecContext(ctx, insertEventSQL, appendEventArgs(nil, &e)...)
		return err
	})
	return found, err
}

// BudgetLimits returns every runtime limit, by scope.
func (db *DB) BudgetLimits(ctx context.Context) (map[string]BudgetLimit, error) {
	ls, err := QueryAll(ctx, db.reads, func(s Scanner) (BudgetLimit, error) {
		var (
			l  BudgetLimit
			at string
		)
		if err := s.Scan(&l.Scope, &l.USD, &l.Actor, &at); err != nil {
			return l, err
		}
		var err error
		if l.SetAt, err = time.Parse(TimeLayout, at); err != nil {
			return l, fmt.Errorf("budget limit of %s: set_at: %w", l.Scope, err)
		}
		return l, nil
	}, `SELECT scope, usd, actor, set_at FROM budget_limits`)
	if err != nil {
		return nil, db.Wrap("budget limits", err)
	}
	out := make(map[string]BudgetLimit, len(ls))
	for _, l := range ls {
		out[l.Scope] = l
	}
	return out, nil
}

// SpendSince returns what every agent's sessions that ended at or after
// since used, by name.
func (db *DB) SpendSince(ctx context.Context, since time.Time) (map[string]Spend, error) {
	sp, err := QueryAll(ctx, db.reads, func(s Scanner) (Spend, error) {
		var v Spend
		err := s.Scan(&v.Agent, &v.Sessions, &v.TokensIn, &v.TokensOut, &v.CostUSD, &v.Commits)
		return v, err
	}, `SELECT agent, COUNT(*), IFNULL(SUM(tokens_in), 0), IFNULL(SUM(tokens_out), 0),
		IFNULL(SUM(cost_usd), 0.0), IFNULL(SUM(commits), 0) FROM sessions
		WHERE ended_at IS NOT NULL AND ended_at >= ? GROUP BY agent`, FormatTime(since))
	if err != nil {
		return nil, db.Wrap("spend since "+FormatTime(since), err)
	}
	out := make(map[string]Spend, len(sp))
	for _, v := range sp {
		out[v.Agent] = v
	}
	return out, nil
}

// SetBudgetLimit is DB.SetBudgetLimit ordered after everything the journal
// holds: the sessions whose spend led to it are written first.
func (j *Journal) SetBudgetLimit(ctx context.Context, l BudgetLimit, e EventRecord) error {
	if err := j.acquire(ctx); err != nil {
		return fmt.Errorf("store: set budget of %s: %w", l.Scope, err)
	}
	defer j.release()
	if err := j.writeLocked(ctx); err != nil {
		return err
	}
	return j.db.SetBudgetLimit(ctx, l, e)
}

// ClearBudgetLimit is DB.ClearBudgetLimit ordered after everything the
// journal holds.
func (j *Journal) ClearBudgetLimit(ctx context.Context, scope string, e EventRecord) (bool, error) {
	if err := j.acquire(ctx); err != nil {
		return false, fmt.Errorf("store: clear budget of %s: %w", scope, err)
	}
	defer j.release()
	if err := j.writeLocked(ctx); err != nil {
		return false, err
	}
	return j.db.ClearBudgetLimit(ctx, scope, e)
}
