package taskboard

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// What a task cost and what its reviewers said: the reads of `task show`
// and the dashboards' task view.

// Verdict is one review round of a task: who reviewed, which round, PASS or
// FAIL, and what the reviewer said.
type Verdict struct {
	Round    int       `json:"round"`
	Reviewer string    `json:"reviewer"`
	Verdict  string    `json:"verdict"` // PASS or FAIL
	Text     string    `json:"text,omitempty"`
	At       time.Time `json:"at"`
}

// Verdicts are the review verdicts on task id, oldest first.
func (b *Board) Verdicts(ctx context.Context, id int64) ([]Verdict, error) {
	rows, err := b.db.ReadSQL().QueryContext(ctx, `SELECT iteration, reviewer, verdict, feedback, at FROM review_rounds
		WHERE task_id = ? ORDER BY iteration`, id)
	if err != nil {
		return nil, fmt.Errorf("taskboard: verdicts of task %d: %w", id, err)
	}
	defer rows.Close()
	out := []Verdict{}
	for rows.Next() {
		var v Verdict
		var at string
		if err := rows.Scan(&v.Round, &v.Reviewer, &v.Verdict, &v.Text, &at); err != nil {
			return nil, fmt.Errorf("taskboard: verdicts of task %d: %w", id, err)
		}
		v.Verdict = strings.ToUpper(v.Verdict)
		v.At, _ = getTime(at)
		out = append(out, v)
	}
	return out, rows.Err()
}

// Spend is what the sessions that worked on or reviewed a task used.
type Spend struct {
	Sessions  int      `json:"sessions"`
	TokensIn  int64    `json:"tokens_in"`
	TokensOut int64    `json:"tokens_out"`
	CostUSD   float64  `json:"cost_usd"`
	IDs       []string `json:"session_ids"` // the sessions counted
}

// Spend sums the tokens and cost of the sessions that worked on or
// reviewed task id: those whose settlement recorded the task (package
// settle writes sessions.task_id with the session's outcome). A session
// still running counts once it has ended.
func (b *Board) Spend(ctx context.Context, id int64) (Spend, error) {
	sp := Spend{IDs: []string{}}
	rows, err := b.db.ReadSQL().QueryContext(ctx, `SELECT session_id, IFNULL(tokens_in, 0), IFNULL(tokens_out, 0), IFNULL(cost_usd, 0)
		FROM sessions WHERE task_id = ? ORDER BY started_at, session_id`, id)
	if err != nil {
		return Spend{}, fmt.Errorf("taskboard: spend of task %d: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var sid string
		var in, out int64
		var usd float64
		if err := rows.Scan(&sid, &in, &out, &usd); err != nil {
			return Spend{}, fmt.Errorf("taskboard: spend of task %d: %w", id, err)
		}
		sp.Sessions, sp.TokensIn, sp.TokensOut, sp.CostUSD = sp.Sessions+1, sp.TokensIn+in, sp.TokensOut+out, sp.CostUSD+usd
		sp.IDs = append(sp.IDs, sid)
	}
	return sp, rows.Err()
}
