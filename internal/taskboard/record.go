package taskboard

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/swarmd/swarmd/internal/store"
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
// reviewed task id. The event log links them to the task:
//
//   - every session a transition of the task names (the claim, the start,
//     the report);
//   - every session of an agent that started while the agent held the task
//     (from its claim to the transition that took the task from it: an
//     agent holds one task at a time), which counts the sessions that
//     continued the work without reporting;
//   - for each review verdict, the reviewer's session that gave it: the
//     verdict is recorded when that session is settled, so it is the
//     reviewer's last session that ended by then, started after the task
//     was reported DONE.
//
// A session is counted once; one still running counts what it has reported.
func (b *Board) Spend(ctx context.Context, id int64) (Spend, error) {
	fail := func(err error) (Spend, error) { return Spend{}, fmt.Errorf("taskboard: spend of task %d: %w", id, err) }
	q := b.db.ReadSQL()
	type hold struct{ agent, from, to string }
	var (
		named []string
		holds []hold
		done  []string // when the task was reported DONE, in order
		cur   *hold
	)
	rows, err := q.QueryContext(ctx, `SELECT at, agent, from_state, to_state, session_id FROM events WHERE task_id = ? AND effect = 'task' ORDER BY id`, id)
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var at, agent, from, to, session string
		if err := rows.Scan(&at, &agent, &from, &to, &session); err != nil {
			rows.Close()
			return fail(err)
		}
		if session != "" {
			named = append(named, session)
		}
		held := to == "CLAIMED" || to == "IN_PROGRESS"
		switch {
		case held && cur == nil && agent != "":
			cur = &hold{agent: agent, from: at}
		case !held && cur != nil:
			cur.to = at
			holds = append(holds, *cur)
			cur = nil
		}
		if to == "DONE" && from != "DONE" { // not a PASS, which leaves it DONE
			done = append(done, at)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if cur != nil {
		cur.to = "9999" // held still: every later session so far
		holds = append(holds, *cur)
	}
	var sp Spend
	seen := map[string]bool{}
	add := func(query string, args ...any) error {
		rows, err := q.QueryContext(ctx, `SELECT session_id, COALESCE(tokens_in, 0), COALESCE(tokens_out, 0), COALESCE(cost_usd, 0.0)
			FROM sessions WHERE `+query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var sid string
			var in, out int64
			var usd float64
			if err := rows.Scan(&sid, &in, &out, &usd); err != nil {
				return err
			}
			if seen[sid] {
				continue
			}
			seen[sid] = true
			sp.Sessions, sp.TokensIn, sp.TokensOut, sp.CostUSD = sp.Sessions+1, sp.TokensIn+in, sp.TokensOut+out, sp.CostUSD+usd
			sp.IDs = append(sp.IDs, sid)
		}
		return rows.Err()
	}
	for _, s := range named {
		if err := add(`session_id = ?`, s); err != nil {
			return fail(err)
		}
	}
	for _, h := range holds {
		if err := add(`agent = ? AND started_at >= ? AND started_at < ? ORDER BY started_at`, h.agent, h.from, h.to); err != nil {
			return fail(err)
		}
	}
	vs, err := b.Verdicts(ctx, id)
	if err != nil {
		return Spend{}, err
	}
	for _, v := range vs {
		after := ""
		for _, d := range done {
			if d <= store.FormatTime(v.At) {
				after = d
			}
		}
		if err := add(`agent = ? AND ended_at IS NOT NULL AND ended_at <= ? AND started_at >= ? ORDER BY ended_at DESC LIMIT 1`,
			v.Reviewer, store.FormatTime(v.At), after); err != nil {
			return fail(err)
		}
	}
	if sp.IDs == nil {
		sp.IDs = []string{}
	}
	return sp, nil
}
