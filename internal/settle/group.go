package settle

import (
	"context"
	"database/sql"
	"sync"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// Group commits outcomes (and sessions' starts) that wait for the store at
// once together (store.Group): when 200 sessions end, or start, together,
// they cost a few commits instead of 200. A batch goes ahead of this
// process's other writes (claims, the event log): its agents wait on it.
// Its zero value is ready; one group serves the Settlers of every agent.
type Group struct {
	once sync.Once
	w    store.Group
}

// apply runs do, one outcome's writes, in the next batch and returns what
// it did, with the batch's size.
func (g *Group) apply(ctx context.Context, s *Settler, do func(context.Context, *sql.Tx) (Result, error)) (Result, error) {
	var res Result
	n, err := g.write(ctx, s, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		res, err = do(ctx, tx)
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
// for the writer. The task the session starts on (task, unless 0) moves to
// IN_PROGRESS in the same transaction, held by the session, if the row is
// the session's; a transaction of its own was one more commit a task.
// inserted is false when the row was there already or its seq is another
// session's (store.DB.SessionBegun tells which); started, once inserted
// said, tells whether the task moved (taskboard.Board.StartHeldTx).
func (g *Group) begin(ctx context.Context, s *Settler, rec store.SessionRecord, task int64) (inserted func() (bool, error), started func(context.Context) error, err error) {
	_, err = g.write(ctx, s, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		started = nil
		if inserted, err = s.DB.BeginSessionTx(ctx, tx, rec); err != nil || task == 0 || s.Tasks == nil {
			return err
		}
		started, err = s.Tasks.StartHeldTx(ctx, tx, task, taskboard.Holder{Agent: rec.Agent, Session: rec.SessionID})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	// Read after the commit: the writes went with the batch's next
	// statement or its commit, not in a round trip of their own.
	return inserted, started, nil
}

// write runs do in the next batch, ahead of the process's other writes,
// and returns the batch's size.
func (g *Group) write(ctx context.Context, s *Settler, do func(context.Context, *sql.Tx) error) (int, error) {
	g.once.Do(func() {
		g.w.Op = "settle sessions"
		g.w.Prepare = func(ctx context.Context, db *store.DB) { db.PrepareSettle(ctx) }
	})
	return s.DB.Grouped(store.WithPriority(ctx, store.Outcome), &g.w, do)
}
