package store

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"time"
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

// writeGate is a mutex with a FIFO queue per priority. It also keeps how
// long its turns were held and waited for (WriterStats): the share of time
// a process's one writer is busy is what tells an operator whether the
// store's write path bounds the swarm.
type writeGate struct {
	mu     sync.Mutex
	busy   bool
	queues [nPriorities][]waiter
	since  time.Time // when the turn in progress was granted
	stats  WriterStats
}

// waiter is a writer in line: closing ch grants it the turn.
type waiter struct {
	ch chan struct{}
	at time.Time
}

// acquire takes the writer's turn, waiting in line; the caller must call
// release exactly once after it succeeds.
func (g *writeGate) acquire(ctx context.Context) error {
	q := priorityOf(ctx)
	g.mu.Lock()
	now := time.Now()
	if !g.busy {
		g.busy, g.since = true, now
		g.stats.Turns++
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.queues[q] = append(g.queues[q], waiter{ch: ch, at: now})
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		i := slices.IndexFunc(g.queues[q], func(w waiter) bool { return w.ch == ch })
		if i >= 0 {
			g.stats.Waited += time.Since(g.queues[q][i].at)
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
	now := time.Now()
	g.stats.Busy += now.Sub(g.since)
	for i := range g.queues {
		if len(g.queues[i]) > 0 {
			w := g.queues[i][0]
			g.queues[i][0] = waiter{}
			g.queues[i] = g.queues[i][1:]
			g.stats.Waited += now.Sub(w.at)
			g.stats.Turns++
			g.since = now
			close(w.ch)
			return
		}
	}
	g.busy = false
}

// WriterStats is what a process's writes cost its one write connection,
// since the store was opened.
type WriterStats struct {
	// Turns counts the writes that held the connection: transactions,
	// and single statements outside one.
	Turns int64
	// Busy is how long the connection was held, the turn in progress
	// included: on PostgreSQL a transaction's wait for the swarm's
	// writers' lock is part of it.
	Busy time.Duration
	// Waited sums, over the writes, their time in line for the turn.
	Waited time.Duration
}

// WriterStats reports the write connection's turns so far.
func (db *DB) WriterStats() WriterStats {
	g := &db.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	now := time.Now()
	if g.busy {
		s.Busy += now.Sub(g.since)
	}
	for _, q := range g.queues {
		for _, w := range q {
			s.Waited += now.Sub(w.at)
		}
	}
	return s
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
