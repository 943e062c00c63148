package store

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// A write transaction waits for another process's write lock at its BEGIN
// IMMEDIATE; once it has begun it holds the lock, and its statements never
// wait. SQLite's busy handler sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50,
// 50 and then 100 ms between tries, so under many writers (twenty claimants
// on one file) a waiter soon sleeps tens of milliseconds while the lock,
// held for a fraction of one, is free for most of that time: a profile of
// BenchmarkClaims (internal/taskboard) found the CPUs idle 60% of the run.
// The write connection therefore begins its transactions with SQLite's
// handler off and waits in Go instead: sleeps growing from beginWaitMin to
// beginWaitMax, jittered so that the waiters do not retry in step, for as
// long as busy_timeout would have waited. Statements run outside a
// transaction keep SQLite's handler: busy_timeout is set back when the
// transaction ends (two cheap statements, neither under the lock).

// beginWaitMin and beginWaitMax bound a waiting BEGIN's sleeps: the first
// is about one short transaction, the longest a few of them, so that the
// lock is seldom free with nobody trying for it, and twenty waiters' tries
// (each a few µs of locking syscalls) stay a small share of the CPU.
const (
	beginWaitMin = 50 * time.Microsecond
	beginWaitMax = 2 * time.Millisecond
)

// busyTimeoutSQL sets the connection's busy_timeout: 0 for BEGIN, which
// waits in Go, and busyTimeout for statements outside a transaction.
func busyTimeoutSQL(on bool) string {
	if !on {
		return "PRAGMA busy_timeout = 0"
	}
	return "PRAGMA busy_timeout = " + strconv.FormatInt(busyTimeout.Milliseconds(), 10)
}

// setHandler turns SQLite's busy handler on (busy_timeout) or off (0) for
// this connection, if it is not so already.
func (c *cachingConn) setHandler(ctx context.Context, on bool) error {
	if c.handlerOff == !on {
		return nil
	}
	q := busyTimeoutSQL(on)
	s := c.stmt(ctx, q)
	if s == nil {
		_, err := c.Conn.(sqldriver.ExecerContext).ExecContext(ctx, q, nil)
		if err != nil {
			return err
		}
	} else if _, err := s.st.(sqldriver.StmtExecContext).ExecContext(ctx, nil); err != nil {
		return err
	}
	c.handlerOff = !on
	return nil
}

// beginWait begins a transaction, trying again after a jittered, growing
// sleep while another connection holds the write lock, until busyTimeout
// has passed or ctx ends.
func (c *cachingConn) beginWait(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	if err := c.setHandler(ctx, false); err != nil {
		return nil, err
	}
	begin := c.Conn.(sqldriver.ConnBeginTx)
	var deadline time.Time
	delay := beginWaitMin
	for {
		tx, err := begin.BeginTx(ctx, opts)
		if err == nil {
			return tx, nil
		}
		now := time.Now()
		if !(sqliteDriver{}).busy(err) || !deadline.IsZero() && now.After(deadline) {
			return nil, c.handlerBack(err)
		}
		if deadline.IsZero() {
			deadline = now.Add(busyTimeout)
		}
		// Uniform in [delay/2, delay*3/2).
		sleep := delay/2 + rand.N(delay)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, c.handlerBack(ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, beginWaitMax)
	}
}

// connTx is a transaction of a cachingConn: when it ends, the statements
// the connection runs outside a transaction get SQLite's busy handler back.
type connTx struct {
	sqldriver.Tx
	c *cachingConn
}

func (t connTx) Commit() error {
	err := t.Tx.Commit()
	return t.c.handlerBack(err)
}

func (t connTx) Rollback() error {
	err := t.Tx.Rollback()
	return t.c.handlerBack(err)
}

// handlerBack gives the connection SQLite's busy handler back once its
// transaction has ended (or never began), with err, the transaction's
// outcome, as it is unless that fails too. The transaction's context may
// have ended.
func (c *cachingConn) handlerBack(err error) error {
	if herr := c.setHandler(context.Background(), true); herr != nil {
		return errors.Join(err, fmt.Errorf("store: busy_timeout after a transaction: %w", herr))
	}
	return err
}
