package store

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// On PostgreSQL every statement of a write transaction was a round trip to
// the server, made while the swarm's writer lock is held: about 27 of them
// for a task's lifecycle (11 now), each CPU on the daemon and the server
// and time every other writer waits. Many return nothing their caller
// reads before its next statement: the BEGIN and the lock, a lease's
// check, an appended event. The write connection holds those back and
// sends them in one pipeline with the next statement whose answer is
// awaited, or with the COMMIT; a transaction that ends without either
// never sends them. A held-back statement's failure is the error of the
// statement it went with, or of the commit.

// Deferred marks ctx's statement as a write whose result its caller need
// not read at once: on PostgreSQL a write transaction sends it with its
// next statement or its commit, and its failure is reported there. Reads
// later in the transaction still see it (they follow it in the same
// pipeline). Its result's RowsAffected, read after the statement went,
// costs no round trip; read before, it sends what is held back, in a round
// trip of its own. (After the commit, read the count from a HeldCount:
// database/sql's Result waits for the connection.) A query (a write with
// RETURNING) is held back the same way, its rows read when first asked
// for; read them before the transaction ends. Outside a write
// transaction, without arguments, and on SQLite, it changes nothing.
func Deferred(ctx context.Context) context.Context {
	return context.WithValue(ctx, deferredKey{}, noFence)
}

// deferredKey's value is the *FencedError a deferred lease check's failure
// stands for (FenceTx), or noFence.
type deferredKey struct{}

// HeldCount keeps a Deferred write's count (its rows affected) for its
// caller to read once the transaction has committed. database/sql's
// Result would do, but reading it waits for the write connection, which
// by then is another writer's, waiting for the swarm's lock.
type HeldCount struct {
	r *heldResult // the held statement's result; nil if it ran at once
	// A statement that ran at once (SQLite): its count, read by Ran.
	ran    bool
	n      int64
	ranErr error
}

type heldCountKey struct{}

// Defer is Deferred(ctx), with the statement's count kept in h.
func (h *HeldCount) Defer(ctx context.Context) context.Context {
	return context.WithValue(Deferred(ctx), heldCountKey{}, h)
}

// Ran takes the statement's result (ExecContext's, with Defer's ctx).
// Where the statement ran at once (SQLite, or outside a transaction), its
// count is read now, while the connection is still the caller's.
func (h *HeldCount) Ran(res sql.Result) {
	if h.r == nil {
		h.n, h.ranErr = res.RowsAffected()
		h.ran = true
	}
}

// RowsAffected is the write's count: a held statement's once its
// transaction committed (before that, or for one never sent, an error),
// one that ran at once's from its result.
func (h *HeldCount) RowsAffected() (int64, error) {
	switch {
	case h.ran:
		return h.n, h.ranErr
	case h.r == nil:
		return 0, errUnsent
	}
	return h.r.count()
}

var noFence *FencedError

func deferral(ctx context.Context) (fence *FencedError, ok bool) {
	fence, ok = ctx.Value(deferredKey{}).(*FencedError)
	return fence, ok
}

// heldBack is a statement a write connection has not sent yet: its
// rebound SQL and arguments, and for a lease's check the error its
// failure means.
type heldBack struct {
	sql   string
	args  []any
	fence *FencedError
	res   *heldResult // a Deferred statement's result, filled when it is sent
	rows  *heldRows   // a Deferred query's rows, read when it is sent
}

var (
	heldBegin    = heldBack{sql: "BEGIN"}
	heldLock     = heldBack{sql: "SELECT pg_advisory_xact_lock(" + strconv.Itoa(writerLock) + ")"}
	heldMailLock = heldBack{sql: "SELECT pg_advisory_xact_lock(" + strconv.Itoa(mailLock) + ")"}
	// heldAppendLock is the appenders' turn (appendLock): the journal's
	// transactions take it first, a write transaction before its first
	// event (pgConn.note).
	heldAppendLock = heldBack{sql: "SELECT pg_advisory_xact_lock(" + strconv.Itoa(appendLock) + ")"}
	heldCommit     = heldBack{sql: "COMMIT"}
	commitOnly     = []heldBack{heldCommit}
)

// fenceSQL checks an agent's lease and holds its row until the transaction
// ends, failing when this daemon does not hold it at the epoch given: a
// check whose answer need not be read before the writes it fences, so it
// travels with them. FOR KEY SHARE holds off what takes a lease away (a
// takeover's SELECT … FOR UPDATE, a release's or a reap's DELETE) and not
// the holder's own renewal, an UPDATE of expires_at alone: with FOR SHARE
// the renewal waited for every write transaction that checked one of its
// leases, and deadlocked with one that checked two (each holding a row the
// other wanted) until the server broke the cycle after deadlock_timeout.
// It fails by dividing by the count of rows held, zero (SQLSTATE
// fenceFailed, which the daemon turns back into the *FencedError): a
// statement of its own, planned like any other. As a PL/pgSQL function
// that raised an error of its own it cost the server 0.23 ms a call under
// load, against 0.034 for this.
const fenceSQL = `SELECT 1 / COUNT(*) FROM (SELECT 1 FROM agent_leases WHERE agent = $1 AND daemon = $2 AND epoch = $3 FOR KEY SHARE) held`

// fenceFailed is division_by_zero, fenceSQL's failure when the lease is
// not held; it means that only for a lease check.
const fenceFailed = "22012"

// commitWrite ends a write transaction that touched ch: a notification
// saying what, then COMMIT; a transaction that wrote nothing tells no one.
// When nothing of the transaction has gone yet (its writes were all held
// back, as the journal's and a batch of session starts are), the
// notification rides in the lock's statement instead, one statement less
// for the server to bind and run: a notification is delivered at the
// commit wherever the transaction made it.
func (c *pgConn) commitWrite(ch Change) []heldBack {
	switch {
	case ch == 0:
		return commitOnly
	case !c.began() && len(c.held) > 1 && c.held[1].sql == c.lock.sql:
		c.held[1] = heldBack{sql: c.lock.sql + `, pg_notify($1, $2)`, args: notifyArgs(ch)}
		return commitOnly
	}
	return []heldBack{{sql: `SELECT pg_notify($1, $2)`, args: notifyArgs(ch)}, heldCommit}
}

func notifyArgs(ch Change) []any { return []any{changesChannel, strconv.Itoa(int(ch))} }

func (c *pgConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	if !c.write {
		tx, err := c.Conn.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		c.inTx = true
		return &pgTx{tx: tx, c: c}, nil
	}
	if c.Conn.Conn().IsClosed() {
		return nil, sqldriver.ErrBadConn
	}
	c.inTx, c.touched, c.fenced = true, 0, c.fenced[:0]
	c.held = append(c.held[:0], heldBegin, c.lock)
	c.appending = c.lock.sql == heldAppendLock.sql
	return &pgTx{c: c}, nil
}

// note records what a statement of the write transaction in progress
// touches, and holds back the appenders' turn ahead of its first event:
// ids are drawn in the order the turn is taken, and the turn is held until
// the commit, so events become visible in id order however the writers'
// and the journal's transactions interleave. Taken late, after rows the
// transaction has locked, it cannot deadlock: its other holders (the
// journal, on its own connection) lock no row a writer holds.
func (c *pgConn) note(orig string) {
	k := c.kinds.kind(orig)
	c.touched |= k.change
	if k.events && !c.appending {
		c.held = append(c.held, heldAppendLock)
		c.appending = true
	}
}

func (c *pgConn) ExecContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	orig := query
	query = c.rebind(query, len(args))
	switch {
	case !c.write:
		return c.Conn.ExecContext(ctx, query, args)
	case c.inTx:
		c.note(orig)
		return c.execInTx(ctx, orig, query, args)
	}
	tag, _, err := c.locked(ctx, orig, heldBack{sql: query, args: namedArgs(args)}, false)
	if err != nil {
		return nil, err
	}
	return sqldriver.RowsAffected(tag.RowsAffected()), nil
}

// execInTx runs a statement of the write transaction in progress: held
// back if its caller reads no result (Deferred), else sent with what is
// held back. A statement without arguments goes by the simple protocol,
// which takes several statements (a migration) but is no pipeline: what
// is held back goes ahead of it, alone.
func (c *pgConn) execInTx(ctx context.Context, orig, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	fence, later := deferral(ctx)
	switch {
	case fence != nil && slices.Contains(c.fenced, *fence):
		// The lease's row is held since the first check in this
		// transaction, until its end: the agent's next write needs none.
		return unsent{}, nil
	case len(args) > 0 && later:
		r := &heldResult{c: c}
		if h, ok := ctx.Value(heldCountKey{}).(*HeldCount); ok {
			h.r = r
		}
		c.held = append(c.held, heldBack{sql: query, args: namedArgs(args), fence: fence, res: r})
		if fence != nil {
			c.fenced = append(c.fenced, *fence)
		}
		return r, nil
	case rollbackTo(orig) && c.began():
		// What is held back was issued after the newest savepoint (a
		// SAVEPOINT is sent, with what was held, when issued): this
		// undoes it, so it is never sent. The leases checked since are
		// let go with it (PostgreSQL releases a row lock taken after the
		// savepoint): each is checked again at its next write, as the
		// appenders' turn is taken again at the next event (taking a
		// lock the transaction holds is a no-op).
		c.held, c.fenced = c.held[:0], c.fenced[:0]
		c.appending = c.lock.sql == heldAppendLock.sql
	case len(c.held) > 0 && len(args) == 0:
		if _, _, err := c.sendHeld(ctx, nil, false, nil); err != nil {
			return nil, err
		}
	case len(c.held) > 0:
		tag, _, err := c.sendHeld(ctx, &heldBack{sql: query, args: namedArgs(args)}, false, nil)
		if err != nil {
			return nil, err
		}
		return sqldriver.RowsAffected(tag.RowsAffected()), nil
	}
	c.trips.Add(1)
	return c.Conn.ExecContext(ctx, query, args)
}

func (c *pgConn) QueryContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	orig := query
	query = c.rebind(query, len(args))
	switch {
	case !c.write:
		return c.Conn.QueryContext(ctx, query, args)
	case c.inTx:
		c.note(orig)
		if _, later := deferral(ctx); later && len(args) > 0 {
			// Its rows are read when first asked for: what is held back
			// goes then, this with it, or sooner with another statement.
			r := &heldRows{c: c}
			c.held = append(c.held, heldBack{sql: query, args: namedArgs(args), rows: r})
			return r, nil
		}
		if len(c.held) == 0 {
			c.trips.Add(1)
			return c.Conn.QueryContext(ctx, query, args)
		}
		_, rows, err := c.sendHeld(ctx, &heldBack{sql: query, args: namedArgs(args)}, true, nil)
		return rows, err
	}
	// A query on the write pool outside a transaction is a write with
	// RETURNING, or a read that may as well wait its turn: it runs in a
	// transaction of its own, its rows read before the commit.
	_, rows, err := c.locked(ctx, orig, heldBack{sql: query, args: namedArgs(args)}, true)
	return rows, err
}

// began reports whether the write transaction in progress has sent its
// BEGIN.
func (c *pgConn) began() bool {
	return len(c.held) == 0 || c.held[0].sql != heldBegin.sql
}

// locked runs q, a statement issued outside any transaction, in a write
// transaction of its own: the BEGIN, the lock, q, the notification and the
// COMMIT in one round trip. Without arguments, q goes by the simple
// protocol (it may be several statements), alone.
func (c *pgConn) locked(ctx context.Context, orig string, q heldBack, rows bool) (pgconn.CommandTag, sqldriver.Rows, error) {
	k := c.kinds.kind(orig)
	touched := k.change
	c.held = append(c.held[:0], heldBegin, c.lock)
	if k.events && c.lock.sql != heldAppendLock.sql {
		c.held = append(c.held, heldAppendLock)
	}
	if len(q.args) > 0 || rows {
		tag, r, err := c.sendHeld(ctx, &q, rows, c.commitWrite(touched))
		if err != nil {
			_ = c.rollback() // the statement's error says more
		}
		return tag, r, err
	}
	if _, _, err := c.sendHeld(ctx, nil, false, nil); err != nil {
		_ = c.rollback() // the statement's error says more
		return pgconn.CommandTag{}, nil, err
	}
	c.trips.Add(1)
	tag, err := c.Conn.Conn().PgConn().Exec(ctx, q.sql).ReadAll()
	if err == nil {
		_, _, err = c.sendHeld(context.Background(), nil, false, c.commitWrite(touched))
	}
	if err != nil {
		_ = c.rollback() // the statement's error says more
		return pgconn.CommandTag{}, nil, err
	}
	if len(tag) == 0 { // no statement in q (only comments)
		return pgconn.CommandTag{}, nil, nil
	}
	return tag[len(tag)-1].CommandTag, nil, nil
}

// sendHeld sends what is held back, then q (if any), then after, in one
// pipeline, and returns q's result: its command tag, or its rows read to
// the end when rows is set. The first failure is returned, a held-back
// statement's as the error it stands for (a lease check's *FencedError);
// what follows a failure in the pipeline is not run, and the held-back
// statements among it are unsent for that failure (errUnsent wrapping it).
func (c *pgConn) sendHeld(ctx context.Context, q *heldBack, rows bool, after []heldBack) (pgconn.CommandTag, sqldriver.Rows, error) {
	held := c.held
	c.held = c.held[:0]
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(held)+1+len(after))}
	for _, h := range held {
		b.Queue(h.sql, h.args...)
	}
	if q != nil {
		b.Queue(q.sql, q.args...)
	}
	for _, h := range after {
		b.Queue(h.sql, h.args...)
	}
	c.trips.Add(1)
	br := c.Conn.Conn().SendBatch(ctx, b)
	var (
		tag pgconn.CommandTag
		out sqldriver.Rows
		err error
	)
	for i := range held {
		var htag pgconn.CommandTag
		if r := held[i].rows; r != nil {
			r.rows, err = readRows(br, c.Conn.Conn().TypeMap())
			if err != nil {
				err = heldErr(&held[i], err)
			}
			r.err, r.sent = err, true
		} else {
			htag, err = br.Exec()
			if err != nil {
				err = heldErr(&held[i], err)
			}
		}
		if r := held[i].res; r != nil {
			r.tag, r.err, r.sent = htag, err, true
		}
		if err != nil {
			// What follows is not run: its statements are unsent
			// (errUnsent) because of this failure, which they carry
			// whenever they are read, so that one that passes (a
			// connection lost) is waited out as such, not taken for a
			// refusal. Dropped without it, the failure was lost to a
			// reader that asks twice (database/sql asks a query's Columns,
			// which return no error, before its Next).
			unsentErr := fmt.Errorf("%w: %w", errUnsent, err)
			for _, h := range held[i+1:] {
				if h.rows != nil {
					h.rows.err, h.rows.sent = unsentErr, true
				}
				if h.res != nil {
					h.res.err, h.res.sent = unsentErr, true
				}
			}
			break
		}
	}
	if err == nil && q != nil {
		if rows {
			out, err = readRows(br, c.Conn.Conn().TypeMap())
		} else {
			tag, err = br.Exec()
		}
	}
	for i := 0; err == nil && i < len(after); i++ {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if pgconn.SafeToRetry(err) {
			// Nothing reached the server (a connection that died idle):
			// as pgx's own driver says, so that database/sql takes another
			// connection for a statement outside a transaction.
			return pgconn.CommandTag{}, nil, sqldriver.ErrBadConn
		}
		return pgconn.CommandTag{}, nil, err
	}
	return tag, out, nil
}

// rollback ends a write transaction the server still holds open, and
// drops what is held back.
func (c *pgConn) rollback() error {
	c.held = c.held[:0]
	if c.Conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	c.trips.Add(1)
	_, err := c.Conn.ExecContext(context.Background(), "ROLLBACK", nil)
	return err
}

// Commit tells the listeners as it commits (see Changes): a notification
// is delivered when, and only if, its transaction commits. What is held
// back goes with it; a transaction that sent nothing and holds back no
// write never began on the server, and ends without a round trip.
func (t *pgTx) Commit() error {
	c := t.c
	c.inTx = false
	if t.tx != nil {
		return t.tx.Commit()
	}
	if !c.began() && len(c.held) == 2 {
		c.held = c.held[:0]
		return nil
	}
	if _, _, err := c.sendHeld(context.Background(), nil, false, c.commitWrite(c.touched)); err != nil {
		_ = c.rollback() // the statement's error says more
		return err
	}
	return nil
}

func (t *pgTx) Rollback() error {
	t.c.inTx = false
	if t.tx != nil {
		return t.tx.Rollback()
	}
	return t.c.rollback()
}

// heldErr is the error a held-back statement's failure stands for.
func heldErr(h *heldBack, err error) error {
	var pe *pgconn.PgError
	if h.fence != nil && errors.As(err, &pe) && pe.Code == fenceFailed {
		return h.fence
	}
	return err
}

// heldResult is the result of a statement held back (Deferred), filled in
// when its pipeline runs. database/sql reads it under the connection's
// lock, so a read before then can send what is held.
type heldResult struct {
	c    *pgConn
	sent bool // its pipeline ran (err says how it went)
	tag  pgconn.CommandTag
	err  error
}

var (
	errHeldResult = errors.New("store: a deferred write has no insert id (store.Deferred)")
	errUnsent     = errors.New("store: a deferred write was not sent: its transaction or savepoint was rolled back, or an earlier statement of its pipeline failed")
)

func (*heldResult) LastInsertId() (int64, error) { return 0, errHeldResult }

func (r *heldResult) RowsAffected() (int64, error) {
	if !r.sent {
		if err := r.c.sendIfHeld(func(h heldBack) bool { return h.res == r }); err != nil && !r.sent {
			return 0, err
		}
	}
	return r.count()
}

// count is the statement's rows affected as its pipeline left them,
// without sending anything.
func (r *heldResult) count() (int64, error) {
	if err := sentErr(r.sent, r.err); err != nil {
		return 0, err
	}
	return r.tag.RowsAffected(), nil
}

// sendIfHeld sends what is held back, in a round trip of its own, if the
// statement mine picks is still among it: its answer is asked for now.
func (c *pgConn) sendIfHeld(mine func(heldBack) bool) error {
	if !slices.ContainsFunc(c.held, mine) {
		return nil
	}
	_, _, err := c.sendHeld(context.Background(), nil, false, nil)
	return err
}

// sentErr is why a held statement has no answer: never sent, or failed.
func sentErr(sent bool, err error) error {
	if !sent {
		return errUnsent
	}
	return err
}

// heldRows are the rows of a query held back (Deferred), read when its
// pipeline runs; asked for before then, they send what is held.
type heldRows struct {
	c    *pgConn
	sent bool // its pipeline ran (err says how it went)
	rows sqldriver.Rows
	err  error
}

// ready sends what is held if the query is still among it.
func (r *heldRows) ready() error {
	if !r.sent {
		if err := r.c.sendIfHeld(func(h heldBack) bool { return h.rows == r }); err != nil && !r.sent {
			return err
		}
	}
	return sentErr(r.sent, r.err)
}

func (r *heldRows) Columns() []string {
	if r.ready() != nil {
		return nil // Next says why
	}
	return r.rows.Columns()
}

func (r *heldRows) Next(dest []sqldriver.Value) error {
	if err := r.ready(); err != nil {
		return err
	}
	return r.rows.Next(dest)
}

func (r *heldRows) Close() error { return nil }

// unsent is the result of a lease check left out: the lease's row is
// held already.
type unsent struct{}

func (unsent) LastInsertId() (int64, error) { return 0, errHeldResult }
func (unsent) RowsAffected() (int64, error) { return 0, errUnsent }

// rollbackTo reports whether query is a ROLLBACK TO (a savepoint).
func rollbackTo(query string) bool {
	q := strings.TrimSpace(query)
	return len(q) > len("ROLLBACK TO") && strings.EqualFold(q[:len("ROLLBACK TO")], "ROLLBACK TO")
}

func namedArgs(args []sqldriver.NamedValue) []any {
	if len(args) == 0 {
		return nil
	}
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a.Value
	}
	return out
}

// readRows reads a pipelined query's rows to the end, as the values pgx's
// own database/sql driver gives (every integer an int64, every float a
// float64); the store's schema has no column types but those, text and
// booleans.
func readRows(br pgx.BatchResults, m *pgtype.Map) (sqldriver.Rows, error) {
	rs, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	fds := rs.FieldDescriptions()
	b := &bufferedRows{cols: make([]string, len(fds))}
	for i, fd := range fds {
		b.cols[i] = fd.Name
	}
	for rs.Next() {
		raw := rs.RawValues()
		row := make([]sqldriver.Value, len(raw))
		for i, v := range raw {
			if v == nil {
				continue
			}
			if row[i], err = decodeValue(m, fds[i], v); err != nil {
				return nil, fmt.Errorf("read column %s: %w", fds[i].Name, err)
			}
		}
		b.rows = append(b.rows, row)
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	return b, nil
}

func decodeValue(m *pgtype.Map, fd pgconn.FieldDescription, src []byte) (sqldriver.Value, error) {
	switch fd.DataTypeOID {
	case pgtype.BoolOID:
		var d bool
		err := m.Scan(fd.DataTypeOID, fd.Format, src, &d)
		return d, err
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		var d int64
		err := m.Scan(fd.DataTypeOID, fd.Format, src, &d)
		return d, err
	case pgtype.Float4OID, pgtype.Float8OID:
		var d float64
		err := m.Scan(fd.DataTypeOID, fd.Format, src, &d)
		return d, err
	case pgtype.ByteaOID:
		var d []byte
		err := m.Scan(fd.DataTypeOID, fd.Format, src, &d)
		return d, err
	default:
		var d string
		err := m.Scan(fd.DataTypeOID, fd.Format, src, &d)
		return d, err
	}
}
