package store

import "context"

// NoCommits returns the agents whose last n successful sessions (at least
// n of them recorded) made no commit between them: sessions that succeed
// but leave nothing on the branch, such as an agent whose git cannot
// commit, or one that only talks.
//
// It reads a few index entries an agent, not every session: the agents by
// a loose scan of sessions_agent_seq (the next name after the last, one
// seek each), then each one's last successes from its newest session back.
// Ranked over the whole table, `swarmd status` took longer with every
// session the swarm had run.
func (db *DB) NoCommits(ctx context.Context, n int) (map[string]bool, error) {
	names, err := QueryAll(ctx, db.reads, func(s Scanner) (string, error) {
		var agent string
		return agent, s.Scan(&agent)
	}, agentNamesSQL+`
			AND (SELECT COUNT(*) FROM (SELECT 1 AS one FROM sessions s WHERE s.agent = names.agent AND s.outcome = ?
				ORDER BY s.seq DESC LIMIT ?) AS recent) = ?
			AND (SELECT COALESCE(SUM(commits), 0) FROM (SELECT s.commits FROM sessions s WHERE s.agent = names.agent AND s.outcome = ?
				ORDER BY s.seq DESC LIMIT ?) AS recent) = 0`, OutcomeSuccess, n, n, OutcomeSuccess, n)
	if err != nil {
		return nil, db.Wrap("sessions without commits", err)
	}
	out := make(map[string]bool, len(names))
	for _, a := range names {
		out[a] = true
	}
	return out, nil
}
