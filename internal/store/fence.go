package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"
)

// ErrFenced: a write for an agent whose lease this daemon no longer holds
// (another daemon took it after it expired, or this one gave it up). The
// error wrapping it is a *FencedError. Not transient: retrying cannot help
// until the lease is taken again.
var ErrFenced = errors.New("agent's lease not held")

// FencedError names the agent and the epoch the write carried.
type FencedError struct {
	Agent string
	Epoch int64
	// Late: the lease may still be this daemon's, but it was not renewed
	// before the deadline of SetFenceDeadline.
	Late bool
	// Expired: Late, and past the lease's own expiry (SetFenceExpiry):
	// another daemon may have reaped it or taken the agent. A write only
	// Late passes once a renewal comes, which a merely slow store delays.
	Expired bool
}

// Lost reports whether err is a write refused because this daemon lost
// the agent's lease, or cannot hold it any more: not held at its epoch, or
// late past the lease's expiry. A write refused only because a renewal is
// late (the lease still unexpired) is not: it passes with the renewal.
func Lost(err error) bool {
	var fe *FencedError
	if errors.As(err, &fe) {
		return !fe.Late || fe.Expired
	}
	return errors.Is(err, ErrFenced)
}

func (e *FencedError) Error() string {
	if e.Late {
		return fmt.Sprintf("agent %s: this daemon no longer holds its lease (epoch %d) for sure: it was not renewed in time, its sessions were stopped, and another daemon may run it once it expires", e.Agent, e.Epoch)
	}
	return fmt.Sprintf("agent %s: this daemon no longer holds its lease (epoch %d): another daemon may run it now", e.Agent, e.Epoch)
}

func (e *FencedError) Unwrap() error { return ErrFenced }

// fences are the leases this process holds, by agent, when it runs agents
// on a shared store. Off (the default, and a single daemon's SQLite), a
// write is never fenced.
type fences struct {
	mu     sync.Mutex
	on     bool
	daemon string
	epochs map[string]int64
	// until is when the leases' last renewal stops vouching for them (zero
	// before the first): past it every write is refused, as the lease
	// guard kills every session, until a renewal moves it.
	until time.Time
	// expires is when the leases' last renewal runs out (zero: unknown):
	// past it a late write is one for a lease that may be another's.
	expires time.Time
}

// Fence turns fencing on for daemon's writes: from now on every write made
// for an agent (its session rows, claims, task starts, outcomes) checks,
// in its own transaction, that daemon still holds the agent's lease at
// the epoch given by SetFence, and fails with a *FencedError otherwise.
func (db *DB) Fence(daemon string) {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	db.fence.on, db.fence.daemon = true, daemon
	if db.fence.epochs == nil {
		db.fence.epochs = map[string]int64{}
	}
}

// SetFence records the epoch of agent's lease this daemon holds; epoch 0
// drops it (the lease is lost or given up): the agent's writes are
// refused until it is set again.
func (db *DB) SetFence(agent string, epoch int64) {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	if db.fence.epochs == nil {
		db.fence.epochs = map[string]int64{}
	}
	if epoch == 0 {
		delete(db.fence.epochs, agent)
		return
	}
	db.fence.epochs[agent] = epoch
}

// FenceEpochs are the epochs of the leases this process holds, by agent
// (nil when it does not fence its writes).
func (db *DB) FenceEpochs() map[string]int64 {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	if !db.fence.on {
		return nil
	}
	return maps.Clone(db.fence.epochs)
}

// DropFence is SetFence(agent, 0) if agent's lease is still held at epoch:
// a lease taken again meanwhile (SetFence with a newer epoch) stays.
func (db *DB) DropFence(agent string, epoch int64) {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	if db.fence.epochs[agent] == epoch {
		delete(db.fence.epochs, agent)
	}
}

// SetFenceDeadline refuses, from until on, every fenced write with a
// *FencedError (Late) until it is called again with a later time: the
// daemon's leases were last renewed in time for until, the deadline its
// lease guard kills its sessions at. A daemon whose renewals fail or hang
// while its other connections work must not start a session the guard is
// no longer there to kill: the lease expires meanwhile, and another
// daemon takes the agent.
func (db *DB) SetFenceDeadline(until time.Time) {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	db.fence.until = until
}

// SetFenceExpiry records when the leases' last renewal runs out (the
// deadline of SetFenceDeadline plus the guard's margin): a write refused
// as late past it is one for a lease this daemon may have lost
// (FencedError.Expired, Lost).
func (db *DB) SetFenceExpiry(expires time.Time) {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	db.fence.expires = expires
}

// fenced reports whether this process fences its writes.
func (db *DB) fenced() bool {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	return db.fence.on
}

// holdsFence reports whether this process's fence lets a write for agent
// through, as far as it knows without asking the store (FenceTx's checks
// before the store's): fencing off, or agent's lease held at an epoch and
// renewed in time.
func (db *DB) holdsFence(agent string) bool {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	if !db.fence.on {
		return true
	}
	return db.fence.epochs[agent] != 0 && (db.fence.until.IsZero() || time.Now().Before(db.fence.until))
}

// fenceOf is this daemon's name and the epoch of agent's lease it holds
// (0: none).
func (db *DB) fenceOf(agent string) (daemon string, epoch int64) {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	return db.fence.daemon, db.fence.epochs[agent]
}

// lateFence reports whether a write for agent waits for a renewal: its
// lease held at an epoch, late (past SetFenceDeadline) but not run out
// (SetFenceExpiry), so that the next renewal either vouches for it again
// or drops it.
func (db *DB) lateFence(agent string) bool {
	db.fence.mu.Lock()
	defer db.fence.mu.Unlock()
	now := time.Now()
	return db.fence.on && db.fence.epochs[agent] != 0 && !db.fence.until.IsZero() && !now.Before(db.fence.until) &&
		!db.fence.expires.IsZero() && now.Before(db.fence.expires)
}

// FenceTx checks, in tx, that this daemon holds agent's lease at the epoch
// it was given, and holds that row until tx ends (FOR KEY SHARE on PostgreSQL;
// SQLite's one writer excludes every other), so that no daemon can take
// the lease between the check and the commit. It does nothing unless Fence
// was called. On PostgreSQL the check goes to the server with the next
// statement of tx, or its commit, and fails that, with the *FencedError.
func (db *DB) FenceTx(ctx context.Context, tx *sql.Tx, agent string) error {
	db.fence.mu.Lock()
	on, daemon, epoch, until, expires := db.fence.on, db.fence.daemon, db.fence.epochs[agent], db.fence.until, db.fence.expires
	db.fence.mu.Unlock()
	if !on {
		return nil
	}
	if epoch == 0 {
		return &FencedError{Agent: agent}
	}
	if now := time.Now(); !until.IsZero() && !now.Before(until) {
		return &FencedError{Agent: agent, Epoch: epoch, Late: true, Expired: !expires.IsZero() && !now.Before(expires)}
	}
	if db.drv.name() == "postgres" {
		// Sent with the writes it fences (pipeline.go): its failure is
		// theirs, or the commit's, as a *FencedError.
		fctx := context.WithValue(ctx, deferredKey{}, &FencedError{Agent: agent, Epoch: epoch})
		_, err := tx.ExecContext(fctx, fenceSQL, agent, daemon, epoch)
		return err
	}
	var n int
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM agent_leases WHERE agent = ? AND daemon = ? AND epoch = ?`,
		agent, daemon, epoch).Scan(&n)
	if err != nil {
		return fmt.Errorf("check the lease of agent %s: %w", agent, err)
	}
	if n == 0 {
		return &FencedError{Agent: agent, Epoch: epoch}
	}
	return nil
}

// forUpdate locks the rows a SELECT reads until the end of the
// transaction on PostgreSQL; SQLite has one writer, whose transaction
// excludes every other already.
func (db *DB) forUpdate() string {
	if db.drv.name() == "postgres" {
		return " FOR UPDATE"
	}
	return ""
}
