package store

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
)

// Group commits together the writes of this process that wait for the
// writer's turn at once: the first to arrive leads, and when it gets the
// turn it applies every write queued by then in one transaction (one that
// fails is rolled back alone and told why). When 200 sessions end, or 20
// agents claim, together, they cost a few commits instead of 200 or 20: a
// commit (its WAL frames, one write each; PostgreSQL's flush of its WAL) is
// most of a small write's cost, and every transaction is one more turn for
// the writer, which a busy process's scheduler hands out late. Nothing
// waits for a group to fill: a lone write is committed at once.
//
// Pkg and Op name the group's transactions in errors ("<Pkg>: <Op>: …");
// Prepare, if set, runs before each batch takes the writer's turn (to
// prepare its statements outside the turn). Set them before the first
// write (DB.Grouped); the zero value is otherwise ready. A batch has its
// leader's priority (WithPriority): one group should hold writes of one
// rank.
type Group struct {
	Pkg, Op string
	Prepare func(ctx context.Context, db *DB)

	mu      sync.Mutex
	pending []*groupCall
	leading bool
}

// groupCall is one write in a group.
type groupCall struct {
	// do applies the write in tx, or its first step, then the rest (see
	// GroupedThen); it may run again after a rollback.
	do    func(ctx context.Context, tx *sql.Tx) (then func() error, err error)
	batch int // how many calls the committed batch held
	err   error
	done  chan struct{} // closed once batch and err are set
	lead  chan struct{} // closed when this call is to lead the next batch
}

// errAgain tells a call that its batch failed for a reason of the
// leader's alone (its context ended): it queues again at once.
var errAgain = errors.New("store: the batch's leader left; queue again")

// errOneFailed rolls back a batch applied without savepoints in which a
// write failed.
var errOneFailed = errors.New("store: a write of the batch failed")

// Grouped applies do in db in g's next batch and returns how many writes
// the committed batch held. do may run more than once (a batch in
// which another write failed is rolled back and applied again without it),
// so it must set its results afresh each time; its statements run without
// the context's cancellation (the driver would watch each with a
// goroutine), the transaction still ends with it. The error is do's own,
// or the transaction's (wrapped with Pkg and Op).
func (db *DB) Grouped(ctx context.Context, g *Group, do func(context.Context, *sql.Tx) error) (int, error) {
	return db.GroupedThen(ctx, g, func(ctx context.Context, tx *sql.Tx) (func() error, error) { return nil, do(ctx, tx) })
}

// GroupedThen is Grouped for a write in two steps: do asks what the write
// needs answered, as Deferred statements (on PostgreSQL held back, a
// query's rows read when first asked for), and returns then, which reads
// the answers and writes the rest. In a batch on PostgreSQL every call's
// do runs before any then, so the batch's questions go to the server
// together, one round trip for all; elsewhere, and with savepoints, each
// call's then follows its do. After a failure no other then runs: what
// their dos asked is left unread (database/sql closes a transaction's
// open rows when it ends) and the batch is applied again without the
// failed call, or not at all. A nil then is a write done in do.
func (db *DB) GroupedThen(ctx context.Context, g *Group, do func(context.Context, *sql.Tx) (then func() error, err error)) (int, error) {
	for {
		c := &groupCall{do: do, done: make(chan struct{}), lead: make(chan struct{})}
		g.mu.Lock()
		g.pending = append(g.pending, c)
		if !g.leading {
			g.leading = true
			close(c.lead)
		}
		g.mu.Unlock()
		n, err := g.wait(ctx, db, c)
		if errors.Is(err, errAgain) {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			continue
		}
		return n, err
	}
}

// Queued is how many writes wait for the group's next batch.
func (g *Group) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// wait waits for c's batch, leading it when its turn comes. A call whose
// context ends while it is still queued leaves the line; one already in a
// batch waits for the batch (it is short) so that it reports what happened.
func (g *Group) wait(ctx context.Context, db *DB, c *groupCall) (int, error) {
	for {
		select {
		case <-c.done:
			return c.batch, c.err
		case <-c.lead:
			g.run(ctx, db)
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
func (g *Group) run(ctx context.Context, db *DB) {
	var batch []*groupCall
	take := func() []*groupCall {
		g.mu.Lock()
		defer g.mu.Unlock()
		b := g.pending
		g.pending = nil
		return b
	}
	if g.Prepare != nil {
		g.Prepare(ctx, db)
	}
	pkg, op := g.Pkg, g.Op
	if pkg == "" {
		pkg = "store"
	}
	if op == "" {
		op = "grouped write"
	}
	// Applied without savepoints first; if one write fails (rare), the
	// transaction is rolled back and the batch applied again with a
	// savepoint each, so that only that one is left out.
	var err error
	for _, each := range []bool{false, true} {
		err = db.inTxFor(ctx, pkg, op, func(tx *sql.Tx) error {
			if batch == nil {
				batch = take()
			}
			return applyBatch(ctx, db, tx, batch, each)
		})
		// A write held back (Deferred) fails at the commit, when no later
		// statement carried it: whose it was is found with savepoints too.
		if !errors.Is(err, errOneFailed) && (each || err == nil || len(batch) < 2 || !ownFailure(db, err) || ctx.Err() != nil) {
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

// applyBatch applies batch in tx; with savepoints, each write under one of
// its own, so that one that fails is rolled back alone. Statements run
// without ctx's cancellation (the transaction still ends with ctx): the
// driver watches a cancellable context with a goroutine per statement.
func applyBatch(ctx context.Context, db *DB, tx *sql.Tx, batch []*groupCall, savepoints bool) error {
	sctx := context.WithoutCancel(ctx)
	if len(batch) == 1 {
		c := batch[0]
		c.err = both(sctx, tx, c)
		return c.err
	}
	if !savepoints && db.drv.name() == "postgres" {
		return applyInSteps(sctx, db, tx, batch)
	}
	for _, c := range batch {
		if savepoints {
			if err := exec(sctx, tx, "SAVEPOINT grouped"); err != nil {
				return err
			}
		}
		c.err = both(sctx, tx, c)
		if savepoints && c.err == nil {
			// The RELEASE sends what c's writes left for the store to send
			// with the next statement (Deferred): their failure is c's.
			if c.err = exec(sctx, tx, "RELEASE grouped"); c.err == nil {
				continue
			}
		}
		switch {
		case c.err == nil:
		case !savepoints || !ownFailure(db, c.err):
			return batchFailure(db, c.err)
		default:
			if err := exec(sctx, tx, "ROLLBACK TO grouped"); err != nil {
				return err
			}
			if err := exec(sctx, tx, "RELEASE grouped"); err != nil {
				return err
			}
		}
	}
	return nil
}

// both runs c's write, its then right after its do.
func both(ctx context.Context, tx *sql.Tx, c *groupCall) error {
	then, err := c.do(ctx, tx)
	if err == nil && then != nil {
		err = then()
	}
	return err
}

// applyInSteps applies batch without savepoints, every call's do before
// any then, so that what the dos held back goes to the server together.
// The first failure ends it, as in applyBatch.
func applyInSteps(ctx context.Context, db *DB, tx *sql.Tx, batch []*groupCall) error {
	thens := make([]func() error, len(batch))
	for i, c := range batch {
		if thens[i], c.err = c.do(ctx, tx); c.err != nil {
			return batchFailure(db, c.err)
		}
	}
	for i, then := range thens {
		if then == nil {
			continue
		}
		c := batch[i]
		if c.err = then(); c.err != nil {
			return batchFailure(db, c.err)
		}
	}
	return nil
}

// batchFailure is what a batch applied without savepoints returns when
// one call failed with err: errOneFailed when the failure is that call's
// own (it is left out and the rest applied again), err itself when the
// store refused the transaction (every call retries).
func batchFailure(db *DB, err error) error {
	if !ownFailure(db, err) {
		return err
	}
	return errOneFailed
}

// ownFailure reports whether err is a failure of one call's write, to be
// left out of its batch alone, rather than the store refusing the whole
// transaction (busy, away: all retry). A write fenced by its agent's lost
// lease is its own: the others' agents still hold theirs.
func ownFailure(db *DB, err error) bool {
	return !db.Transient(err) || errors.Is(err, ErrFenced)
}

// handOff passes the lead to the first call queued, if any; g.mu is held.
func (g *Group) handOff() {
	if len(g.pending) > 0 {
		close(g.pending[0].lead)
		return
	}
	g.leading = false
}

func exec(ctx context.Context, tx *sql.Tx, stmt string) error {
	_, err := tx.ExecContext(ctx, stmt)
	return err
}
