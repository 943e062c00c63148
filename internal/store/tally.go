package store

import (
	"context"
	"strings"
	"sync"
)

// agentNamesSQL lists the agents that have sessions by a loose scan of
// sessions_agent_seq: the next name after the last, one seek each, so
// that it reads as many index entries as there are agents, not sessions.
// A query may add terms on names.agent (NoCommits).
const agentNamesSQL = `WITH RECURSIVE names(agent) AS (
	SELECT MIN(agent) FROM sessions
	UNION ALL
	SELECT (SELECT MIN(s.agent) FROM sessions s WHERE s.agent > names.agent) FROM names WHERE names.agent IS NOT NULL)
SELECT agent FROM names WHERE agent IS NOT NULL`

// SpendTally is Spend kept up to date by reading only what changed: each
// agent's sum over its sessions up to the last one before which every
// session is settled. A settled session's row never changes again
// (settleSQL and the orphans' close both write only rows not settled), and
// an agent's next session has a higher seq, so that sum is final, and a
// read adds only the sessions after it: those since the last read, and
// the one running. Spend summed every session ever recorded at each read;
// a dashboard watched for a month re-read the month at every refresh.
//
// Its first read starts from the prefixes saved last (spend_settled, kept
// by Save and made by the migration that added it), so that neither a
// process's first read nor a command's only one sums every session ever
// recorded.
//
// It is safe for concurrent use; a zero SpendTally is ready.
type SpendTally struct {
	mu     sync.Mutex
	agents map[string]*tallied
}

// tallied is an agent's final sum: its sessions up to seq upTo.
type tallied struct {
	upTo uint32
	sum  Spend
}

// Spend returns every agent's spend, by name, as DB.Spend does.
func (t *SpendTally) Spend(ctx context.Context, db *DB) (map[string]Spend, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.agents == nil {
		saved, err := QueryAll(ctx, db.reads, func(s Scanner) (tallied, error) {
			var a tallied
			var upTo int64
			err := s.Scan(&a.sum.Agent, &upTo, &a.sum.Sessions, &a.sum.TokensIn, &a.sum.TokensOut, &a.sum.CostUSD, &a.sum.Commits)
			a.upTo = uint32(upTo)
			return a, err
		}, `SELECT agent, up_to, sessions, tokens_in, tokens_out, cost_usd, commits FROM spend_settled`)
		if err != nil {
			return nil, db.Wrap("spend: saved", err)
		}
		t.agents = make(map[string]*tallied, len(saved))
		for _, a := range saved {
			t.agents[a.sum.Agent] = &a
		}
	}
	names, err := QueryAll(ctx, db.reads, func(s Scanner) (string, error) {
		var a string
		return a, s.Scan(&a)
	}, agentNamesSQL)
	if err != nil {
		return nil, db.Wrap("spend: agents", err)
	}
	out := make(map[string]Spend, len(names))
	if len(names) == 0 {
		return out, nil
	}
	// One statement for every agent's sessions after its final sum: an OR
	// of index ranges, which both engines read range by range.
	var q strings.Builder
	args := make([]any, 0, 2*len(names))
	q.WriteString(`SELECT agent, seq, CASE WHEN settled_at IS NULL THEN 0 ELSE 1 END, COALESCE(tokens_in, 0),
		COALESCE(tokens_out, 0), COALESCE(cost_usd, 0.0), commits FROM sessions WHERE `)
	for i, name := range names {
		if i > 0 {
			q.WriteString(" OR ")
		}
		q.WriteString("(agent = ? AND seq > ?)")
		var after uint32
		if a := t.agents[name]; a != nil {
			after = a.upTo
		}
		args = append(args, name, int64(after))
	}
	q.WriteString(" ORDER BY agent, seq")
	type row struct {
		agent   string
		seq     int64
		settled int
		sp      Spend
	}
	rows, err := QueryAll(ctx, db.reads, func(s Scanner) (row, error) {
		r := row{sp: Spend{Sessions: 1}}
		err := s.Scan(&r.agent, &r.seq, &r.settled, &r.sp.TokensIn, &r.sp.TokensOut, &r.sp.CostUSD, &r.sp.Commits)
		return r, err
	}, q.String(), args...)
	if err != nil {
		return nil, db.Wrap("spend", err)
	}
	open := map[string]bool{} // an agent whose rows read so far left its final sum behind
	for _, name := range names {
		a := t.agents[name]
		if a == nil {
			a = &tallied{sum: Spend{Agent: name}}
			t.agents[name] = a
		}
	}
	for _, r := range rows {
		a := t.agents[r.agent]
		if r.settled == 1 && !open[r.agent] {
			a.upTo = uint32(r.seq)
			a.sum.add(r.sp)
			continue
		}
		open[r.agent] = true
		cur, ok := out[r.agent]
		if !ok {
			cur = Spend{Agent: r.agent}
		}
		cur.add(r.sp)
		out[r.agent] = cur
	}
	for _, name := range names {
		cur := out[name]
		cur.Agent = name
		cur.add(t.agents[name].sum)
		out[name] = cur
	}
	return out, nil
}

// add adds o's sessions and what they used to s.
func (s *Spend) add(o Spend) {
	s.Sessions += o.Sessions
	s.TokensIn += o.TokensIn
	s.TokensOut += o.TokensOut
	s.CostUSD += o.CostUSD
	s.Commits += o.Commits
}

// Save writes each agent's settled prefix to spend_settled where it is
// ahead of what is there (another daemon's, an earlier save), so that the
// next SpendTally, in another process or after a restart, reads only the
// sessions after it.
func (t *SpendTally) Save(ctx context.Context, db *DB) error {
	t.mu.Lock()
	var rows []tallied
	for _, a := range t.agents {
		if a.upTo > 0 {
			rows = append(rows, *a)
		}
	}
	t.mu.Unlock()
	for len(rows) > 0 {
		chunk := rows[:min(len(rows), 100)]
		rows = rows[len(chunk):]
		var q strings.Builder
		args := make([]any, 0, 7*len(chunk))
		q.WriteString(`INSERT INTO spend_settled (agent, up_to, sessions, tokens_in, tokens_out, cost_usd, commits) VALUES `)
		for i, a := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, a.sum.Agent, int64(a.upTo), a.sum.Sessions, a.sum.TokensIn, a.sum.TokensOut, a.sum.CostUSD, a.sum.Commits)
		}
		q.WriteString(` ON CONFLICT (agent) DO UPDATE SET up_to = excluded.up_to, sessions = excluded.sessions,
			tokens_in = excluded.tokens_in, tokens_out = excluded.tokens_out, cost_usd = excluded.cost_usd, commits = excluded.commits
			WHERE excluded.up_to > spend_settled.up_to`)
		if _, err := db.ExecCount(ctx, "save spend", q.String(), args...); err != nil {
			return err
		}
	}
	return nil
}
