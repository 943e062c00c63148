package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// Daemon is one daemon of the swarm as the store knows it: the agents its
// config last recorded (SetMembers) and the agent leases it holds.
type Daemon struct {
	Name     string    // its lease holder name: host and state dir
	Agents   []string  // sorted
	Recorded time.Time // zero: it recorded no agents (a release before the list)
	// Leases it holds: unexpired (it runs) and expired (it died or stopped
	// uncleanly; another daemon reaps them).
	Live, Expired int
	// LiveUntil is when the first of its live leases expires unless
	// renewed (zero: none is live).
	LiveUntil time.Time
}

// Daemons is every daemon that recorded its agents or holds a lease, by
// name, its leases counted live or expired at now.
func (db *DB) Daemons(ctx context.Context, now time.Time) ([]Daemon, error) {
	ms, err := db.Members(ctx)
	if err != nil {
		return nil, err
	}
	leases, err := db.Leases(ctx)
	if err != nil {
		return nil, err
	}
	by := map[string]*Daemon{}
	get := func(name string) *Daemon {
		d := by[name]
		if d == nil {
			d = &Daemon{Name: name, Agents: []string{}}
			by[name] = d
		}
		return d
	}
	for _, m := range ms {
		d := get(m.Daemon)
		d.Agents = append(d.Agents, m.Agent)
		if m.Recorded.After(d.Recorded) {
			d.Recorded = m.Recorded
		}
	}
	for _, l := range leases {
		d := get(l.Daemon)
		if l.Expires.After(now) {
			d.Live++
			if d.LiveUntil.IsZero() || l.Expires.Before(d.LiveUntil) {
				d.LiveUntil = l.Expires
			}
		} else {
			d.Expired++
		}
	}
	out := make([]Daemon, 0, len(by))
	for _, d := range by {
		slices.Sort(d.Agents)
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b Daemon) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// LiveDaemonError is ForgetMembers' refusal: the daemon holds leases that
// have not expired, so it runs (or stopped moments ago and may be back).
type LiveDaemonError struct {
	Daemon string
	Leases int // unexpired
}

func (e *LiveDaemonError) Error() string {
	return fmt.Sprintf("daemon %s holds %d unexpired agent lease(s): it runs; stop it (or wait for its leases to expire) first", e.Daemon, e.Leases)
}

// ErrUnknownDaemon is ForgetMembers' refusal of a daemon that recorded no
// agents.
var ErrUnknownDaemon = errors.New("no such daemon in the swarm's list of agents")

// ForgetMembers removes daemon's list of agents (SetMembers) and the
// settings it recorded as its own (SetDaemonSetting), for a daemon
// retired for good: its agents stop being the swarm's, and tasks assigned
// to them wait for a person. It returns how many rows it removed. A daemon
// whose leases have not expired by now is refused (*LiveDaemonError), in
// the statement that deletes: a daemon takes its leases before it records
// its agents, so a start racing the removal keeps its list.
func (db *DB) ForgetMembers(ctx context.Context, daemon string, now time.Time) (int64, error) {
	var n int64
	err := db.InTx(ctx, "forget a daemon's agents", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM swarm_members WHERE daemon = ?
			AND NOT EXISTS (SELECT 1 FROM agent_leases WHERE daemon = ? AND expires_at > ?)`, daemon, daemon, FormatTime(now))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if n > 0 {
			// Its own settings (SetDaemonSetting) go with it.
			prefix := daemonPrefix + daemon + "/"
			_, err := tx.ExecContext(ctx, `DELETE FROM settings WHERE substr(key, 1, ?) = ?`, len(prefix), prefix)
			return err
		}
		var live, rows int
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM agent_leases WHERE daemon = ? AND expires_at > ?),
			(SELECT COUNT(*) FROM swarm_members WHERE daemon = ?)`, daemon, FormatTime(now), daemon).Scan(&live, &rows); err != nil {
			return err
		}
		switch {
		case live > 0:
			return &LiveDaemonError{Daemon: daemon, Leases: live}
		case rows == 0:
			return fmt.Errorf("%w: %q", ErrUnknownDaemon, daemon)
		}
		return nil
	})
	return n, err
}
