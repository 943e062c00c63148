package store

import (
	"context"
	"database/sql"
	"slices"
	"sync"
)

// The write pool has one connection, and database/sql hands a freed
// connection to a random waiter: under load (hundreds of agents' claims,
// reports and the journal's batches) a write could wait for seconds, and
// its neighbour for nothing. The gate serves this process's writers in
// order of arrival instead, within two ranks: what a session did (its
// outcome, in package settle's batches with the rows of sessions about to
// start and the tasks their sessions started; and the lease that lets this
// process write at all) ahead of the rest, so that an agent's outcome is
// recorded in a transaction's time however many claims are queued behind
// it.

// Priority is a write's rank in this process's line for the store.
type Priority int

const (
	// Outcome: a finished session's outcome (and, in package settle's
	// batches with it, the rows of sessions starting and their tasks
	// moving to IN_PROGRESS), the lease. First of all.
	Outcome Priority = iota
	// Normal: everything else (claims, mail, the event log).
	Normal
	nPriorities
)

type priorityKey struct{}

// WithPriority ranks ctx's writes in this process's line for the store.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

func priorityOf(ctx context.Context) Priority {
	if p, ok := ctx.Value(priorityKey{}).(Priority); ok && p >= Outcome && p < nPriorities {
		return p
	}
	return Normal
}

// writeGate is a mutex with a FIFO queue per priority.
type writeGate struct {
	mu     sync.Mutex
	busy   bool
	queues [nPriorities][]chan struct{}
}

// acquire takes the writer's turn, waiting in line; the caller must call
// release exactly once after it succeeds.
func (g *writeGate) acquire(ctx context.Context) error {
	q := priorityOf(ctx)
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.queues[q] = append(g.queues[q], ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		i := slices.Index(g.queues[q], ch)
		if i >= 0 {
			g.queues[q] = slices.Delete(g.queues[q], i, i+1)
		}
		g.mu.Unlock()
		if i < 0 {
			g.release() // granted as ctx ended: pass the turn on
		}
		return ctx.Err()
	}
}

// release hands the turn to the first in line of the highest rank.
func (g *writeGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.queues {
		if len(g.queues[i]) > 0 {
			ch := g.queues[i][0]
			g.queues[i][0] = nil
			g.queues[i] = g.queues[i][1:]
			close(ch)
			return
		}
	}
	g.busy = false
}

// Tx is a write transaction that holds this process's writer turn: Commit
// or Rollback gives it back (a Rollback after Commit is harmless, as
// sql.Tx's). Pass Tx.Tx to functions that take a *sql.Tx.
type Tx struct {
	*sql.Tx
	gate *writeGate
}

// Commit commits and gives the writer's turn back.
func (t *Tx) Commit() error {
	err := t.Tx.Commit()
	t.done()
	return err
}

// Rollback rolls back (if not committed) and gives the writer's turn back.
func (t *Tx) Rollback() error {
	err := t.Tx.Rollback()
	t.done()
	return err
}

func (t *Tx) done() {
	if g := t.gate; g != nil {
		t.gate = nil
		g.release()
	}
}

// Write runs f with the write pool while holding the writer's turn: for
// one statement outside a transaction (an UPDATE … RETURNING, say).
func (db *DB) Write(ctx context.Context, f func(w *sql.DB) error) error {
	if err := db.Check(); err != nil {
		return err
	}
	if err := db.gate.acquire(ctx); err != nil {
		return err
	}
	defer db.gate.release()
	return f(db.write)
}
