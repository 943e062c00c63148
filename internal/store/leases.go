package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Lease is one daemon's hold on an agent's name in a shared store.
type Lease struct {
	Agent    string
	Daemon   string // the holder: its host and state dir
	Host     string
	PID      int
	Acquired time.Time
	Expires  time.Time
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

const leaseCols = `agent, daemon, host, pid, acquired_at, expires_at`

// AcquireLeases takes, for holder (Agent ignored), the leases of agents
// until now+ttl, all or none: it refuses with a *LeaseHeldError when one is
// held by another daemon whose lease has not expired. It returns the
// leases it replaced that another daemon let expire: that daemon died
// holding them, and its tasks are the caller's to requeue.
func (db *DB) AcquireLeases(ctx context.Context, holder Lease, agents []string, now time.Time, ttl time.Duration) (expired []Lease, err error) {
	err = db.InTx(ctx, "acquire leases", func(tx *sql.Tx) error {
		for _, a := range agents {
			cur, err := scanLease(tx.QueryRowContext(ctx, `SELECT `+leaseCols+` FROM agent_leases WHERE agent = ?`, a))
			switch {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return err
			case cur.Daemon == holder.Daemon:
			case cur.Expires.After(now):
				return &LeaseHeldError{Lease: cur}
			default:
				expired = append(expired, cur)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO agent_leases (`+leaseCols+`) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (agent) DO UPDATE SET daemon = excluded.daemon, host = excluded.host, pid = excluded.pid,
				acquired_at = excluded.acquired_at, expires_at = excluded.expires_at`,
				a, holder.Daemon, holder.Host, holder.PID, FormatTime(now), FormatTime(now.Add(ttl))); err != nil {
				return err
			}
		}
		return nil
	})
	return expired, err
}

// RenewLeases extends every lease daemon holds to now+ttl and returns how
// many it holds.
func (db *DB) RenewLeases(ctx context.Context, daemon string, now time.Time, ttl time.Duration) (int, error) {
	return db.ExecCount(ctx, "renew leases", `UPDATE agent_leases SET expires_at = ? WHERE daemon = ?`,
		FormatTime(now.Add(ttl)), daemon)
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

// ReapLease deletes l if it is still the lease it was (same holder) and
// has expired by now; ok says whether this call did, so that of several
// daemons that see a dead one's lease expire exactly one recovers its work.
func (db *DB) ReapLease(ctx context.Context, l Lease, now time.Time) (ok bool, err error) {
	n, err := db.ExecCount(ctx, "reap lease", `DELETE FROM agent_leases WHERE agent = ? AND daemon = ? AND expires_at <= ?`,
		l.Agent, l.Daemon, FormatTime(now))
	return n == 1, err
}

func scanLease(s Scanner) (Lease, error) {
	var (
		l              Lease
		pid            int64
		acquired, exps string
	)
	if err := s.Scan(&l.Agent, &l.Daemon, &l.Host, &pid, &acquired, &exps); err != nil {
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
