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
	moved  bool // a final sum moved on since the last Save
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
	// One statement (one snapshot) sums every agent's sessions after its
	// final sum, in two groups: those before its first session not
	// settled since, which are final now, and the rest. The sums are the
	// database's: a first read over a long history (nothing saved yet)
	// fetched every session's row.
	var q strings.Builder
	args := make([]any, 0, 2*len(names))
	q.WriteString(`WITH tallied (agent, after) AS (VALUES `)
	for i, name := range names {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(CAST(? AS TEXT), CAST(? AS BIGINT))")
		var after uint32
		if a := t.agents[name]; a != nil {
			after = a.upTo
		}
		args = append(args, name, int64(after))
	}
	// An agent's first session not settled after its tallied seq: the
	// rows after it are read once more, not the agent's history.
	q.WriteString(`), open_from (agent, after, first) AS MATERIALIZED (
	SELECT agent, after, (SELECT MIN(u.seq) FROM sessions u WHERE u.agent = tallied.agent AND u.seq > tallied.after AND u.settled_at IS NULL)
	FROM tallied)
SELECT agent, final, MAX(seq), COUNT(*), SUM(tokens_in), SUM(tokens_out), SUM(cost_usd), SUM(commits)
FROM (SELECT s.agent, CASE WHEN o.first IS NULL OR s.seq < o.first THEN 1 ELSE 0 END AS final, s.seq,
		COALESCE(s.tokens_in, 0) AS tokens_in, COALESCE(s.tokens_out, 0) AS tokens_out,
		COALESCE(s.cost_usd, 0.0) AS cost_usd, s.commits
	FROM open_from o JOIN sessions s ON s.agent = o.agent AND s.seq > o.after) AS after_tallied
GROUP BY agent, final`)
	type group struct {
		agent  string
		final  int
		maxSeq int64
		sp     Spend
	}
	groups, err := QueryAll(ctx, db.reads, func(s Scanner) (group, error) {
		var g group
		err := s.Scan(&g.agent, &g.final, &g.maxSeq, &g.sp.Sessions, &g.sp.TokensIn, &g.sp.TokensOut, &g.sp.CostUSD, &g.sp.Commits)
		return g, err
	}, q.String(), args...)
	if err != nil {
		return nil, db.Wrap("spend", err)
	}
	for _, name := range names {
		if t.agents[name] == nil {
			t.agents[name] = &tallied{sum: Spend{Agent: name}}
		}
	}
	for _, g := range groups {
		a := t.agents[g.agent]
		if a == nil { // a name the listing did not have: not possible in one swarm's store
			continue
		}
		if g.final == 1 {
			a.upTo = uint32(g.maxSeq)
			a.sum.add(g.sp)
			t.moved = true
			continue
		}
		cur := out[g.agent]
		cur.add(g.sp)
		out[g.agent] = cur
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
	if !t.moved {
		t.mu.Unlock()
		return nil // nothing to write: an idle swarm's store stays idle
	}
	t.moved = false
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
			t.mu.Lock()
			t.moved = true // the next Save writes it all again
			t.mu.Unlock()
			return err
		}
	}
	return nil
}
