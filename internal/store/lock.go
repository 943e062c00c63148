package store

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Lock is a named lock TryLock took: on PostgreSQL a session-level
// advisory lock, held by one connection of this handle for as long as the
// connection lives. PostgreSQL frees it when the connection ends, so the
// lock of a daemon that died (or lost its network) passes to another.
type Lock struct {
	db   *DB
	name string
	conn *sql.Conn // nil on SQLite

	once sync.Once
	err  error
}

// TryLock takes the lock name if no other handle holds it, without
// waiting: ok is false when another holds it. Release it with
// Lock.Release; closing the DB releases it too. On SQLite it always
// succeeds: one daemon uses a file (the state dir lock sees to that).
//
// The lock's connection comes from the read pool, whose statements run as
// they are (no writer transaction wraps them): a session-level lock must
// not live in a transaction that ends.
func (db *DB) TryLock(ctx context.Context, name string) (_ *Lock, ok bool, err error) {
	return db.TryLockFor(ctx, name, 0)
}

// TryLockFor is TryLock of a lock that a holder gone silent for silent
// (0: never) loses: on PostgreSQL the server ends the lock's session once
// it has been idle that long (idle_session_timeout, PostgreSQL 14 and
// later) or its peer stops answering TCP keepalives. Without it the lock of
// a holder that was stopped (SIGSTOP, a frozen VM) or lost its network
// stayed held as long as the server kept the connection: hours for a
// silent network, for ever for a stopped holder. The holder must use the
// connection (Check) more often than silent.
func (db *DB) TryLockFor(ctx context.Context, name string, silent time.Duration) (_ *Lock, ok bool, err error) {
	l := &Lock{db: db, name: name}
	if _, pg := db.drv.(*pgDriver); !pg {
		return l, true, db.track(l)
	}
	conn, err := db.read.Conn(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("store: lock %s: %w", name, err)
	}
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(hashtext(?))`, name).Scan(&ok); err != nil || !ok {
		conn.Close()
		if err != nil {
			return nil, false, fmt.Errorf("store: lock %s: %w", name, err)
		}
		return nil, false, nil
	}
	l.conn = conn
	if silent > 0 {
		if err := bound(ctx, conn, silent); err != nil {
			l.Release()
			return nil, false, fmt.Errorf("store: lock %s: %w", name, err)
		}
	}
	if err := db.track(l); err != nil {
		l.Release()
		return nil, false, err
	}
	return l, true, nil
}

// bound makes the server end conn's session when it stays silent for d:
// idle that long, or its peer not answering keepalives for about that long.
// A server before 14 has no idle_session_timeout: keepalives alone.
func bound(ctx context.Context, conn *sql.Conn, d time.Duration) error {
	probe := max(int(d.Seconds()/4), 1)
	for _, q := range []string{
		fmt.Sprintf(`SET tcp_keepalives_idle = %d`, probe),
		fmt.Sprintf(`SET tcp_keepalives_interval = %d`, probe),
		`SET tcp_keepalives_count = 3`,
		fmt.Sprintf(`SET idle_session_timeout = %d`, max(d.Milliseconds(), 1)),
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42704" { // undefined_object: no such setting here
				continue
			}
			return err
		}
	}
	return nil
}

// track records l, to be released by Close.
func (db *DB) track(l *Lock) error {
	db.lockMu.Lock()
	defer db.lockMu.Unlock()
	if db.stopCtx.Err() != nil {
		return fmt.Errorf("store: lock %s: %w", l.name, sql.ErrConnDone) // closed
	}
	if db.locks == nil {
		db.locks = map[*Lock]struct{}{}
	}
	db.locks[l] = struct{}{}
	return nil
}

// Check reports whether the lock is still held: its connection answers.
// A lock whose connection failed is lost (PostgreSQL freed it, and another
// handle may hold it now); release it and try again.
func (l *Lock) Check(ctx context.Context) error {
	if l.conn == nil {
		return nil
	}
	// The session holds the lock until it unlocks or ends: a session that
	// answers still holds it.
	var one int
	if err := l.conn.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("store: check lock %s: %w", l.name, err)
	}
	return nil
}

// Release gives the lock up. It is idempotent.
func (l *Lock) Release() error {
	l.once.Do(func() {
		l.db.lockMu.Lock()
		delete(l.db.locks, l)
		l.db.lockMu.Unlock()
		if l.conn == nil {
			return
		}
		// Unlock explicitly: closing a pooled conn only returns it to the
		// pool, where the session (and its lock) would live on.
		_, err := l.conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock(hashtext(?))`, l.name)
		// Never back to the pool: the session may be gone already (its
		// lock with it), or carry TryLockFor's timeouts, which would end
		// an idle pooled connection under its next user.
		_ = l.conn.Raw(func(any) error { return sqldriver.ErrBadConn })
		// A connection that is gone took its session's lock with it.
		if err != nil && !errors.Is(err, sqldriver.ErrBadConn) && !errors.Is(err, sql.ErrConnDone) {
			l.err = fmt.Errorf("store: release lock %s: %w", l.name, err)
		}
	})
	return l.err
}
