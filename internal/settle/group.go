package settle

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"

	"github.com/swarmd/swarmd/internal/store"
)

// Outcomes (and sessions' starts) that wait for the store at once are
// committed together: the first to arrive leads, and when it gets the
// writer's turn it applies every write queued by then in one transaction
// (one that fails is rolled back alone and told why). When 200 sessions
// end, or start, together, they cost a few commits instead of 200: a
// commit (its WAL frames, one write each) is most of a settlement's cost,
// and every transaction is one more turn for the writer, which a busy
// process's scheduler hands out late. Nothing waits for a group to fill: a
// lone write is committed at once. Its zero value is ready; one group
// serves the Settlers of every agent.
type Group struct {
	mu      sync.Mutex
	pending []*call
	leading bool
}

// call is one write in the group: an outcome, or a session's start.
type call struct {
	do    func(ctx context.Context, tx *sql.Tx) error // applies the write in tx; may run again after a rollback
	batch int                                         // how many calls the committed batch held
	err   error
	done  chan struct{} // closed once batch and err are set
	lead  chan struct{} // closed when this call is to lead the next batch
}

// errAgain tells a call that its batch failed for a reason of the
// leader's alone (its context ended): it queues again at once.
var errAgain = errors.New("settle: the batch's leader left; queue again")

// apply applies rec in the next batch and returns what it did.
func (g *Group) apply(ctx context.Context, s *Settler, rec Record) (Result, error) {
	var res Result
	n, err := g.write(ctx, s, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		res, err = s.applyTx(ctx, tx, rec)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	res.Batch = n
	return res, nil
}

// begin records a session's start in the next batch: the sessions of a
// swarm start together as often as they end together (200 at a daemon's
// start), and one transaction each queued them behind each other's turn
// for the writer. inserted is false when the row was there already or its
// seq is another session's (store.DB.SessionBegun tells which).
func (g *Group) begin(ctx context.Context, s *Settler, rec store.SessionRecord) (inserted bool, err error) {
	_, err = g.write(ctx, s, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		inserted, err = s.DB.BeginSessionTx(ctx, tx, rec)
		return err
	})
	return inserted, err
}

// write runs do in the next batch and returns the batch's size.
func (g *Group) write(ctx context.Context, s *Settler, do func(context.Context, *sql.Tx) error) (int, error) {
	for {
		c := &call{do: do, done: make(chan struct{}), lead: make(chan struct{})}
		g.mu.Lock()
		g.pending = append(g.pending, c)
		if !g.leading {
			g.leading = true
			close(c.lead)
		}
		g.mu.Unlock()
		n, err := g.wait(ctx, s, c)
		if errors.Is(err, errAgain) {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			continue
		}
		return n, err
	}
}

// wait waits for c's batch, leading it when its turn comes. A call whose
// context ends while it is still queued leaves the line; one already in a
// batch waits for the batch (it is short) so that it reports what happened.
func (g *Group) wait(ctx context.Context, s *Settler, c *call) (int, error) {
	for {
		select {
		case <-c.done:
			return c.batch, c.err
		case <-c.lead:
			g.run(ctx, s)
			c.lead = nil // led once: its batch held c (it was queued)
		case <-ctx.Done():
			g.mu.Lock()
			i := slices.Index(g.pending, c)
			if i >= 0 {
				g.pending = slices.Delete(g.pending, i, i+1)
				select {
				case <-c.lead: // c was to lead the next batch: pass it on
					g.handOff()
				default:
				}
			}
			g.mu.Unlock()
			if i >= 0 {
				return 0, ctx.Err()
			}
			<-c.done
			return c.batch, c.err
		}
	}
}

// run leads one batch: it takes the writer's turn, then every call queued
// by then, applies them in one transaction, and hands the lead to the
// first call queued after.
func (g *Group) run(ctx context.Context, s *Settler) {
	var batch []*call
	take := func() []*call {
		g.mu.Lock()
		defer g.mu.Unlock()
		b := g.pending
		g.pending = nil
		return b
	}
	s.DB.PrepareSettle(ctx)
	// A batch goes ahead of this process's other writes (claims, the event
	// log): its agents wait on it. It is applied without savepoints first;
	// if one write fails (rare), the transaction is rolled back and the
	// batch applied again with a savepoint each, so that only that one is
	// left out.
	var err error
	for _, each := range []bool{false, true} {
		err = s.DB.InTx(store.WithPriority(ctx, store.Outcome), "settle sessions", func(tx *sql.Tx) error {
			if batch == nil {
				batch = take()
			}
			return applyBatch(ctx, s, tx, batch, each)
		})
		// A write the store held back (store.Deferred) fails at the
		// commit, when no later statement carried it: whose it was is
		// found with savepoints too.
		if !errors.Is(err, errOneFailed) && (each || err == nil || len(batch) < 2 || !ownFailure(s.DB, err) || ctx.Err() != nil) {
			break
		}
	}
	if batch == nil { // the transaction never began
		batch = take()
	}
	for _, c := range batch {
		switch {
		case err == nil:
			c.batch = len(batch)
		case ctx.Err() != nil:
			c.err = errAgain // the leader's context ended, not (yet) c's
		case c.err == nil:
			c.err = err // the transaction's error: every call's
		}
		close(c.done)
	}
	g.mu.Lock()
	g.handOff()
	g.mu.Unlock()
}

// errOneFailed rolls back a batch applied without savepoints in which a
// write failed.
var errOneFailed = errors.New("settle: a write of the batch failed")

// applyBatch applies batch in tx; with savepoints, each write under one of
// its own, so that one that fails is rolled back alone. Statements run
// without ctx's cancellation (the transaction still ends with ctx): the
// driver watches a cancellable context with a goroutine per statement.
func applyBatch(ctx context.Context, s *Settler, tx *sql.Tx, batch []*call, savepoints bool) error {
	sctx := context.WithoutCancel(ctx)
	if len(batch) == 1 {
		c := batch[0]
		c.err = c.do(sctx, tx)
		return c.err
	}
	for _, c := range batch {
		if savepoints {
			if err := savepoint(sctx, tx, "SAVEPOINT settle"); err != nil {
				return err
			}
		}
		c.err = c.do(sctx, tx)
		if savepoints && c.err == nil {
			// The RELEASE sends what c's writes left for the store to send
			// with the next statement (store.Deferred): their failure is c's.
			if c.err = savepoint(sctx, tx, "RELEASE settle"); c.err == nil {
				continue
			}
		}
		switch {
		case c.err == nil:
		case !ownFailure(s.DB, c.err):
			return c.err // the store refused the transaction: all retry
		case !savepoints:
			return errOneFailed
		default:
			if err := savepoint(sctx, tx, "ROLLBACK TO settle"); err != nil {
				return err
			}
			if err := savepoint(sctx, tx, "RELEASE settle"); err != nil {
				return err
			}
		}
	}
	return nil
}

// ownFailure reports whether err is a failure of one call's write, to be
// left out of its batch alone, rather than the store refusing the whole
// transaction (busy, away: all retry). A write fenced by its agent's lost
// lease is its own: the others' agents still hold theirs.
func ownFailure(db *store.DB, err error) bool {
	return !db.Transient(err) || errors.Is(err, store.ErrFenced)
}

// handOff passes the lead to the first call queued, if any; g.mu is held.
func (g *Group) handOff() {
	if len(g.pending) > 0 {
		close(g.pending[0].lead)
		return
	}
	g.leading = false
}

func savepoint(ctx context.Context, tx *sql.Tx, stmt string) error {
	_, err := tx.ExecContext(ctx, stmt)
	return err
}
