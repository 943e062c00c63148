package store

import "context"

// NoCommits returns the agents whose last n successful sessions (at least
// n of them recorded) made no commit between them: sessions that succeed
// but leave nothing on the branch, such as an agent whose git cannot
// commit, or one that only talks.
func (db *DB) NoCommits(ctx context.Context, n int) (map[string]bool, error) {
	names, err := QueryAll(ctx, db.reads, func(s Scanner) (string, error) {
		var agent string
		return agent, s.Scan(&agent)
	}, `SELECT agent FROM (
			SELECT agent, commits, ROW_NUMBER() OVER (PARTITION BY agent ORDER BY started_at DESC, seq DESC) AS nth
			FROM sessions WHERE outcome = ?) AS recent
		WHERE nth <= ? GROUP BY agent HAVING COUNT(*) = ? AND SUM(commits) = 0`, OutcomeSuccess, n, n)
	if err != nil {
		return nil, db.Wrap("sessions without commits", err)
	}
	out := make(map[string]bool, len(names))
	for _, a := range names {
		out[a] = true
	}
	return out, nil
}
