package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Member is an agent a daemon runs, as that daemon's config last said, with
// what the config says about reviewing the agent's tasks.
type Member struct {
	Daemon        string // the daemon's lease holder name: its host and state dir
	Agent         string
	Reviewer      string // who reviews the tasks the agent claims ("": nobody)
	MaxIterations int
	ReviewOnly    bool // the agent claims no unassigned task
	Recorded      time.Time
}

// SetMembers makes ms (their Daemon and Recorded ignored) daemon's whole
// list of agents, in one transaction: an agent its config no longer names
// leaves the swarm's list with the same commit that records the others.
func (db *DB) SetMembers(ctx context.Context, daemon string, ms []Member, now time.Time) error {
	at := FormatTime(now)
	return db.InTx(ctx, "record the swarm's agents", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM swarm_members WHERE daemon = ?`, daemon); err != nil {
			return err
		}
		for _, m := range ms {
			only := 0
			if m.ReviewOnly {
				only = 1
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO swarm_members (daemon, agent, reviewer, max_iterations, review_only, recorded_at)
				VALUES (?, ?, ?, ?, ?, ?)`, daemon, m.Agent, m.Reviewer, m.MaxIterations, only, at); err != nil {
				return fmt.Errorf("agent %s: %w", m.Agent, err)
			}
		}
		return nil
	})
}

// Members is every daemon's list of agents (SetMembers), by agent, the most
// recently recorded first among daemons naming the same one.
func (db *DB) Members(ctx context.Context) ([]Member, error) {
	ms, err := QueryAll(ctx, db.reads, scanMember, `SELECT daemon, agent, reviewer, max_iterations, review_only, recorded_at
		FROM swarm_members ORDER BY agent, recorded_at DESC, daemon`)
	if err != nil {
		return nil, db.Wrap("read the swarm's agents", err)
	}
	return ms, nil
}

func scanMember(s Scanner) (Member, error) {
	var (
		m        Member
		max      int64
		only     int64
		recorded string
	)
	if err := s.Scan(&m.Daemon, &m.Agent, &m.Reviewer, &max, &only, &recorded); err != nil {
		return Member{}, err
	}
	m.MaxIterations, m.ReviewOnly = int(max), only != 0
	var err error
	if m.Recorded, err = ParseTime(recorded); err != nil {
		return Member{}, fmt.Errorf("agent %s of daemon %s: recorded_at: %w", m.Agent, m.Daemon, err)
	}
	return m, nil
}
