package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Lease is one daemon's hold on an agent's name in a shared store.
type Lease struct {
	Agent  string
	Daemon string // the holder: its host and state dir
	Host   string
	PID    int
	// Boot is the holder's kernel boot id ("" for a lease written before
	// it was kept): with PID, it tells a dead predecessor on this machine
	// from a live daemon elsewhere under the same name.
	Boot     string
	Acquired time.Time
	Expires  time.Time
	// Epoch is raised each time a daemon takes the name (fence.go): a
	// write made for the agent checks it.
	Epoch int64
}

// ErrLeaseHeld: another daemon holds the agent and its lease has not
// expired. The error wrapping it is a *LeaseHeldError.
var ErrLeaseHeld = errors.New("agent held by another daemon")

// LeaseHeldError names who holds an agent.
type LeaseHeldError struct{ Lease Lease }

func (e *LeaseHeldError) Error() string {
	l := e.Lease
	return fmt.Sprintf("agent %s is run by another daemon, %s (host %s, pid %d), whose lease lasts until %s: "+
		"agent names are unique across the swarm (stop that daemon, or wait for its lease to expire if it is dead)",
		l.Agent, l.Daemon, l.Host, l.PID, l.Expires.UTC().Format(time.RFC3339))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

const leaseCols = `agent, daemon, host, pid, acquired_at, expires_at, epoch, boot`

// AcquireLeases takes, for holder (Agent ignored), the leases of agents
// until now+ttl, all or none: it refuses with a *LeaseHeldError when one is
// held by another daemon whose lease has not expired. Each lease taken
// gets a new epoch, even one holder had (a restarted daemon is a new
// incarnation: whatever the old one still had in flight must be refused).
// It returns the leases it holds now, by agent, and the leases it replaced
// that another daemon let expire: that daemon died holding them, and its
// sessions and tasks are the caller's to recover.
func (db *DB) AcquireLeases(ctx context.Context, holder Lease, agents []string, now time.Time, ttl time.Duration) (held, expired []Lease, err error) {
	return db.acquireLeases(ctx, holder, agents, now, ttl, false)
}

// RetakeLease is AcquireLeases of one agent whose lease this process
// lost: a lease under holder's own name that has not expired is then
// another incarnation's (a daemon of the same host name and state dir,
// elsewhere, took it), refused like any other daemon's.
func (db *DB) RetakeLease(ctx context.Context, holder Lease, agent string, now time.Time, ttl time.Duration) (held Lease, expired []Lease, err error) {
	ls, expired, err := db.acquireLeases(ctx, holder, []string{agent}, now, ttl, true)
	if err != nil {
		return Lease{}, nil, err
	}
	return ls[0], expired, nil
}

func (db *DB) acquireLeases(ctx context.Context, holder Lease, agents []string, now time.Time, ttl time.Duration, retake bool) (held, expired []Lease, err error) {
	err = db.InTx(ctx, "acquire leases", func(tx *sql.Tx) error {
		held, expired = held[:0], expired[:0]
		for _, a := range agents {
			cur, err := scanLease(tx.QueryRowContext(ctx, `SELECT `+leaseCols+` FROM agent_leases WHERE agent = ?`+db.forUpdate(), a))
			switch {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return err
			case cur.Daemon == holder.Daemon && !retake:
			case cur.Expires.After(now):
				return &LeaseHeldError{Lease: cur}
			default:
				expired = append(expired, cur)
			}
			l, err := scanLease(tx.QueryRowContext(ctx, `INSERT INTO agent_leases (`+leaseCols+`) VALUES (?, ?, ?, ?, ?, ?, 1, ?)
				ON CONFLICT (agent) DO UPDATE SET daemon = excluded.daemon, host = excluded.host, pid = excluded.pid,
				acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, epoch = agent_leases.epoch + 1,
				boot = excluded.boot
				RETURNING `+leaseCols,
				a, holder.Daemon, holder.Host, holder.PID, FormatTime(now), FormatTime(now.Add(ttl)), holder.Boot))
			if err != nil {
				return err
			}
			held = append(held, l)
		}
		return nil
	})
	return held, expired, err
}

// RenewLeases extends every lease daemon holds to now+ttl and returns
// them: a lease another daemon took meanwhile is not among them. On
// PostgreSQL it runs on a connection of its own, outside the swarm's
// writer lock and this process's write queue: a renewal that waited behind
// a burst of writes could let the lease run out.
func (db *DB) RenewLeases(ctx context.Context, daemon string, now time.Time, ttl time.Duration) ([]Lease, error) {
	return db.RenewHeld(ctx, daemon, nil, now, ttl)
}

// RenewHeld is RenewLeases of the leases daemon holds at the epochs given,
// by agent (every lease under its name when epochs is nil): a lease under
// the same name at another epoch is another incarnation's (a daemon of the
// same host name and state dir, elsewhere), which this one must neither
// keep alive nor count as its own. It returns the leases renewed.
func (db *DB) RenewHeld(ctx context.Context, daemon string, epochs map[string]int64, now time.Time, ttl time.Duration) ([]Lease, error) {
	q := `UPDATE agent_leases SET expires_at = ? WHERE daemon = ?`
	args := []any{FormatTime(now.Add(ttl)), daemon}
	if epochs != nil {
		if len(epochs) == 0 {
			return nil, nil
		}
		var held []string
		for _, a := range slices.Sorted(maps.Keys(epochs)) {
			held = append(held, `(agent = ? AND epoch = ?)`)
			args = append(args, a, epochs[a])
		}
		q += ` AND (` + strings.Join(held, ` OR `) + `)`
	}
	q += ` RETURNING ` + leaseCols
	if db.drv.name() == "postgres" {
		ls, err := QueryAll(ctx, db.read, scanLease, q, args...)
		if err != nil {
			return nil, db.Wrap("renew leases", err)
		}
		return ls, nil
	}
	var ls []Lease
	err := db.InTx(ctx, "renew leases", func(tx *sql.Tx) error {
		var err error
		ls, err = QueryAll(ctx, tx, scanLease, q, args...)
		return err
	})
	return ls, err
}

// ReleaseLeases gives up daemon's leases of agents (every one it holds
// when agents is nil).
func (db *DB) ReleaseLeases(ctx context.Context, daemon string, agents []string) error {
	if agents == nil {
		_, err := db.ExecCount(ctx, "release leases", `DELETE FROM agent_leases WHERE daemon = ?`, daemon)
		return err
	}
	return db.InTx(ctx, "release leases", func(tx *sql.Tx) error {
		for _, a := range agents {
			if _, err := tx.ExecContext(ctx, `DELETE FROM agent_leases WHERE agent = ? AND daemon = ?`, a, daemon); err != nil {
				return err
			}
		}
		return nil
	})
}

// Leases lists every lease, by agent.
func (db *DB) Leases(ctx context.Context) ([]Lease, error) {
	ls, err := QueryAll(ctx, db.reads, scanLease, `SELECT `+leaseCols+` FROM agent_leases ORDER BY agent`)
	if err != nil {
		return nil, db.Wrap("leases", err)
	}
	return ls, nil
}

// ReapExpired deletes, in one statement, every lease of a daemon other
// than self that has expired by now, and returns them: of several daemons
// reaping at once, each expired lease is returned to exactly one, whose
// work it is to recover the dead daemon's sessions and tasks. recover (nil:
// none) does that work, for each lease, in the same transaction: until it
// commits no daemon can take the name (its row's deletion is not yet
// committed), so the recovery cannot close a session or requeue a claim
// of a daemon that took the agent since (the dead one, continuing after
// a pause, among them). An error of recover rolls the reap back: the
// leases stay expired, for the next reap.
func (db *DB) ReapExpired(ctx context.Context, self string, now time.Time, recover func(tx *sql.Tx, l Lease) error) ([]Lease, error) {
	var ls []Lease
	err := db.InTx(ctx, "reap expired leases", func(tx *sql.Tx) error {
		var err error
		ls, err = QueryAll(ctx, tx, scanLease, `DELETE FROM agent_leases WHERE daemon <> ? AND expires_at <= ? RETURNING `+leaseCols,
			self, FormatTime(now))
		if err != nil || recover == nil {
			return err
		}
		for _, l := range ls {
			if err := recover(tx, l); err != nil {
				return fmt.Errorf("recover agent %s of daemon %s: %w", l.Agent, l.Daemon, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ls, func(a, b Lease) int { return strings.Compare(a.Agent, b.Agent) })
	return ls, nil
}

func scanLease(s Scanner) (Lease, error) {
	var (
		l              Lease
		pid            int64
		acquired, exps string
	)
	if err := s.Scan(&l.Agent, &l.Daemon, &l.Host, &pid, &acquired, &exps, &l.Epoch, &l.Boot); err != nil {
		return Lease{}, err
	}
	l.PID = int(pid)
	var err error
	if l.Acquired, err = ParseTime(acquired); err != nil {
		return Lease{}, fmt.Errorf("lease of %s: acquired_at: %w", l.Agent, err)
	}
	if l.Expires, err = ParseTime(exps); err != nil {
		return Lease{}, fmt.Errorf("lease of %s: expires_at: %w", l.Agent, err)
	}
	return l, nil
}
