package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// maxCachedStmts bounds a Pool's statements. The store and the packages on
// it run a small fixed set of query texts; the ones built with an IN list
// per call (AndIn) make more, and past the bound they simply run unprepared.
const maxCachedStmts = 256

// Pool runs queries on a connection pool with each distinct query text
// prepared once and reused: SQLite parses and plans a statement on every
// unprepared query, which cost more of the daemon's CPU per session than
// running the statements did. database/sql prepares a cached statement
// again, transparently, on each connection it lands on.
type Pool struct {
	db *sql.DB
	// local says the database is a local file (SQLite): a one-row read is
	// over in microseconds and never waits on a network.
	local bool

	mu     sync.RWMutex
	stmts  map[string]*sql.Stmt
	closed bool
}

func newPool(db *sql.DB, local bool) *Pool {
	return &Pool{db: db, local: local, stmts: make(map[string]*sql.Stmt)}
}

// QueryContext runs query, prepared once for all callers.
func (p *Pool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return p.db.QueryContext(ctx, query, args...)
}

// QueryRowContext runs query, prepared once for all callers. On a local
// database a live ctx's cancellation is not passed on: watching it costs
// two goroutines per query (database/sql's and the driver's), and a
// prompt's reads started four per session for reads of microseconds.
func (p *Pool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if p.local && ctx.Err() == nil {
		ctx = context.WithoutCancel(ctx)
	}
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.db.QueryRowContext(ctx, query, args...)
}

// ExecContext runs query, prepared once for all callers.
func (p *Pool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.db.ExecContext(ctx, query, args...)
}

// stmt is query's cached statement, prepared now if it is new; nil when it
// cannot be cached (the cache is full or closed, or preparing failed): the
// caller runs the query unprepared, which reports any error in the query
// itself.
func (p *Pool) stmt(ctx context.Context, query string) *sql.Stmt {
	p.mu.RLock()
	st, full := p.stmts[query], len(p.stmts) >= maxCachedStmts || p.closed
	p.mu.RUnlock()
	if st != nil || full {
		return st
	}
	// Prepared without the lock, so that a slow prepare (a busy pool)
	// holds up no other query; a racing prepare of the same text loses.
	st, err := p.db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev := p.stmts[query]; prev != nil || p.closed || len(p.stmts) >= maxCachedStmts {
		st.Close()
		return prev
	}
	p.stmts[query] = st
	return st
}

// cachedStmt is query's statement if it was prepared already (nil if
// not): for a transaction, which cannot prepare on the pool it holds.
func (p *Pool) cachedStmt(query string) *sql.Stmt {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.stmts[query]
}

// cached is how many statements the pool holds.
func (p *Pool) cached() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.stmts)
}

// close closes every cached statement; the pool runs later queries
// unprepared (and database/sql fails them once the pool is closed).
func (p *Pool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for q, st := range p.stmts {
		if err := st.Close(); err != nil {
			errs = append(errs, err)
		}
		delete(p.stmts, q)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close statements: %w", err)
	}
	return nil
}
