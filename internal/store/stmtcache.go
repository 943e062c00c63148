package store

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"

	"modernc.org/sqlite"
)

// SQLite parses and plans every statement that is not prepared, and the
// statements run inside transactions (a claim, a report, a settlement) are
// run by their text on the transaction's connection, where Pool's cache of
// database/sql statements cannot reach. A profile of 200 agents showed the
// parser at a sixth of the daemon's CPU, all of it spent while holding the
// one write connection. The write pool's connections therefore keep each
// query text they run prepared, as the driver's own statements, and reuse
// it (the driver resets it between runs).

// maxConnStmts bounds the statements one connection keeps; past it a query
// runs unprepared, as before (the store runs a small fixed set of texts;
// AndIn builds a few more).
const maxConnStmts = 256

// cachingConnector opens SQLite connections that keep their statements.
type cachingConnector struct{ base sqldriver.Connector }

func newCachingConnector(dsn string) (sqldriver.Connector, error) {
	base, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return cachingConnector{base}, nil
}

func (c cachingConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	for _, ok := range []bool{isA[sqldriver.ExecerContext](conn), isA[sqldriver.QueryerContext](conn),
		isA[sqldriver.ConnPrepareContext](conn), isA[sqldriver.ConnBeginTx](conn)} {
		if !ok {
			conn.Close()
			return nil, errors.New("store: the SQLite driver's connection lacks a context method")
		}
	}
	return &cachingConn{Conn: conn, stmts: map[string]*connStmt{}}, nil
}

func (c cachingConnector) Driver() sqldriver.Driver { return c.base.Driver() }

func isA[T any](v any) bool { _, ok := v.(T); return ok }

// cachingConn is one connection with its statements. database/sql uses a
// connection from one goroutine at a time, so it needs no lock.
type cachingConn struct {
	sqldriver.Conn
	stmts map[string]*connStmt
}

// connStmt is a kept statement; busy while rows read from it are open (a
// second run of the same text meanwhile gets a statement of its own).
type connStmt struct {
	st   sqldriver.Stmt
	busy bool
}

// stmt returns query's kept statement, preparing it if it is new; nil when
// it cannot be kept (the cache is full, it is busy, or it does not prepare,
// in which case running it unprepared reports the error).
func (c *cachingConn) stmt(ctx context.Context, query string) *connStmt {
	if s, ok := c.stmts[query]; ok {
		if s.busy {
			return nil
		}
		return s
	}
	if len(c.stmts) >= maxConnStmts {
		return nil
	}
	st, err := c.Conn.(sqldriver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	s := &connStmt{st: st}
	c.stmts[query] = s
	return s
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	if s := c.stmt(ctx, query); s != nil {
		return s.st.(sqldriver.StmtExecContext).ExecContext(ctx, args)
	}
	return c.Conn.(sqldriver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	s := c.stmt(ctx, query)
	if s == nil {
		return c.Conn.(sqldriver.QueryerContext).QueryContext(ctx, query, args)
	}
	rows, err := s.st.(sqldriver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	s.busy = true
	return &connRows{Rows: rows, s: s}, nil
}

func (c *cachingConn) PrepareContext(ctx context.Context, query string) (sqldriver.Stmt, error) {
	return c.Conn.(sqldriver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *cachingConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	return c.Conn.(sqldriver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *cachingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(sqldriver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *cachingConn) IsValid() bool {
	if v, ok := c.Conn.(sqldriver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *cachingConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(sqldriver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *cachingConn) Close() error {
	var errs []error
	for q, s := range c.stmts {
		errs = append(errs, s.st.Close())
		delete(c.stmts, q)
	}
	return errors.Join(append(errs, c.Conn.Close())...)
}

// connRows frees its statement for the next run when closed.
type connRows struct {
	sqldriver.Rows
	s *connStmt
}

func (r *connRows) Close() error {
	err := r.Rows.Close()
	r.s.busy = false
	return err
}
