// Package store is swarmd's database (<state_dir>/swarm.db): opening it,
// its schema and migrations, and the daemon's persistent state (agents,
// sessions, the event log, pauses, tool calls, budgets and settings), written
// by a Journal and read back for restart recovery. The packages that keep
// their own tables in it (mailbox, taskboard, merge) run their queries on a
// *DB; none of them opens the file itself, so every writer, the daemon and
// every short-lived command alike, gets the same pragmas, schema checks and
// guards.
//
// The file is shared by the daemon and by many short-lived processes, so
// every guarantee here holds across processes: writes run in BEGIN IMMEDIATE
// transactions (a deferred read-then-write transaction fails with "database
// is locked" under contention instead of waiting).
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure Open.
type Options struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// NoCreate makes Open fail with ErrNoDatabase instead of creating a
	// missing file: a `swarmd mail` process pointed at the wrong path should
	// say so rather than write mail nobody reads.
	NoCreate bool
}

// DB is an open swarm.db. It is safe for concurrent use.
type DB struct {
	path   string
	target string // what Open was given (a URL keeps its credentials here only)
	drv    driver
	// write has a single connection: in-process writers queue on the pool,
	// which is cheap, instead of in SQLite's busy handler, which sleeps in
	// millisecond steps. Other processes still meet us through busy_timeout.
	write *sql.DB
	read  *sql.DB
	// reads and writes run the statements of read and write (outside a
	// transaction) prepared once per query text.
	reads  *Pool
	writes *Pool
	now    func() time.Time

	// PRAGMA data_version is per connection, so DataVersion keeps one.
	dvMu   sync.Mutex
	dvConn *sql.Conn
	dvStmt *sql.Stmt

	// file: path is a file (SQLite) whose identity ident Check compares,
	// so that it can tell when the path no longer leads to it; gone latches
	// once it does not.
	file  bool
	ident os.FileInfo
	gone  atomic.Bool

	// listeners are the Changes goroutines and the driver's upkeep,
	// stopped by Close.
	listenMu  sync.Mutex
	listeners sync.WaitGroup
	stop      context.CancelFunc
	stopCtx   context.Context
	// endUpkeep stops the driver's upkeep alone (EndUpkeep).
	endUpkeep context.CancelFunc

	// locks are the Locks TryLock took and no one released yet: Close
	// releases them.
	lockMu sync.Mutex
	locks  map[*Lock]struct{}

	// gate orders this process's writers on the one write connection.
	gate writeGate

	// fence is the leases this daemon holds, checked by its writes for an
	// agent (fence.go).
	fence fences

	// wal watches the WAL for maintain (SQLite; nil without inotify).
	wal *FileWatch
	// checkpoints counts maintain's checkpoints (SQLite): tests check that
	// an idle store runs none.
	checkpoints atomic.Int64

	closeOnce sync.Once
	closeErr  error
}

// driver is what differs between database engines: how the pools are
// opened, the dialect's migrations, and how its errors are classified.
// SQLite is the one engine today; the rest of the package speaks through
// this seam so that another engine is a second implementation, not a fork.
type driver interface {
	name() string
	// open returns the write pool (one connection, one writer at a time)
	// and the read pool for target, and what Path reports.
	open(ctx context.Context, target string, opts Options) (write, read *sql.DB, path string, err error)
	// setup runs before the migrations.
	setup(ctx context.Context, db *DB) error
	// migrations holds the dialect's NNNN_name.sql files under "migrations".
	migrations() fs.FS
	// prepare runs after the migrations (SQLite: make sure WAL took).
	prepare(ctx context.Context, db *DB) error
	// busy reports a lock conflict worth retrying.
	busy(err error) bool
	// classify maps a storage failure to ErrDiskFull or ErrReadOnly, or nil.
	classify(err error) error
	// fault reports the engine failing rather than refusing what was
	// written (EngineFault).
	fault(err error) bool
	// userVersion and setUserVersion keep the schema version.
	userVersion(ctx context.Context, q queryRower) (int, error)
	setUserVersion(ctx context.Context, tx *sql.Tx, v int) error
	// dataVersion changes whenever anything commits.
	dataVersion(ctx context.Context, db *DB) (int64, error)
	// closeExtra releases what the driver keeps on db.
	closeExtra(db *DB)
	// mail is the pool new mail is sent on when the engine gives it one of
	// its own, nil for the write pool (see DB.MailSQL).
	mail() *sql.DB
	// appender is the pool the journal writes on when the engine gives it
	// one of its own, nil for the write pool (see DB.BeginAppend).
	appender() *sql.DB
	// lockMailTx makes tx, a write transaction, wait its turn among the
	// senders of new mail before it adds a message (see DB.LockMailTx).
	lockMailTx(ctx context.Context, tx *sql.Tx) error
	// changes signals out (never blocking) after commits by any client of
	// the database, until ctx ends.
	changes(ctx context.Context, db *DB, w *Watch)
	// maintain does the engine's upkeep in the background until ctx ends
	// (SQLite: checkpoints); it may return at once.
	maintain(ctx context.Context, db *DB)
}

// Open opens the database at target and brings its schema up to date:
// a postgres:// URL (see IsPostgres), else the path of a SQLite file, which
// is created unless opts.NoCreate. It refuses a database whose schema is
// newer than this code knows (ErrSchemaTooNew).
func Open(ctx context.Context, target string, opts Options) (*DB, error) {
	var drv driver = sqliteDriver{}
	if IsPostgres(target) {
		drv = &pgDriver{}
	}
	return open(ctx, target, opts, drv, nil)
}

// open is Open with the driver and, for tests, the migrations to apply
// (nil: the driver's).
func open(ctx context.Context, target string, opts Options, drv driver, migrations fs.FS) (_ *DB, err error) {
	db := &DB{drv: drv, now: opts.Now, target: target}
	db.stopCtx, db.stop = context.WithCancel(context.Background())
	if db.now == nil {
		db.now = time.Now
	}
	if db.write, db.read, db.path, err = drv.open(ctx, target, opts); err != nil {
		if errors.Is(err, ErrNoDatabase) {
			return nil, fmt.Errorf("store: open: %w", err)
		}
		return nil, fmt.Errorf("store: open %s: %w", Redact(target), err)
	}
	local := drv.name() == "sqlite"
	db.reads, db.writes = newPool(db.read, local), newPool(db.write, local)
	if migrations == nil {
		migrations = drv.migrations()
	}
	// The first statements are where a file that is no database, or a
	// directory, is found out: the error names the store.
	if err := drv.setup(ctx, db); err != nil {
		db.Close()
		return nil, &openError{target: Redact(target), err: err}
	}
	if err := db.prepareSchema(ctx, migrations); err != nil {
		db.Close()
		return nil, &openError{target: Redact(target), err: err}
	}
	if db.file {
		if db.ident, err = os.Stat(db.path); err != nil {
			db.Close()
			return nil, fmt.Errorf("store: open %s: %w", db.path, err)
		}
	}
	var upkeep context.Context
	upkeep, db.endUpkeep = context.WithCancel(db.stopCtx)
	db.listeners.Go(func() { drv.maintain(upkeep, db) })
	return db, nil
}

// openError is a failure of Open's first statements, naming the store
// ("store: open /x/swarm.db: migrate: file is not a database").
type openError struct {
	target string
	err    error
}

func (e *openError) Error() string {
	return "store: open " + e.target + ": " + strings.TrimPrefix(e.err.Error(), "store: ")
}

func (e *openError) Unwrap() error { return e.err }

// Redact is a store target fit for a message: a URL without its password,
// a file path as it is.
func Redact(target string) string {
	if !strings.Contains(target, "://") {
		// A key=value connection string (refused as a store) must not
		// be echoed with its password.
		if i := strings.Index(strings.ToLower(target), "password"); i >= 0 && strings.Contains(target[i:], "=") {
			return target[:i] + "password=xxxxx (the rest not shown)"
		}
		return target
	}
	u, err := url.Parse(target)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// private creates the database file owner-only (0600) if it does not exist,
// and takes group and other access away from an existing one and its WAL
// and shared-memory files: mail and the event log are the operator's alone.
// SQLite gives the -wal and -shm files it creates the main file's mode.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
			return err
		}
	}
	return nil
}

// Check reports ErrDatabaseGone when the database path no longer leads to
// the file this DB opened. Every write checks it first, and the daemon
// calls it on a timer, so that a deleted swarm.db is noticed and nothing
// is written into the unlinked file. Once gone, always gone.
func (db *DB) Check() error {
	if db.gone.Load() {
		return ErrDatabaseGone
	}
	if db.ident == nil {
		return nil // still opening
	}
	fi, err := os.Stat(db.path)
	if err == nil && os.SameFile(fi, db.ident) {
		return nil
	}
	db.gone.Store(true)
	return ErrDatabaseGone
}

// Begin starts a write transaction (IMMEDIATE: it holds the write lock from
// the start) on the file this DB opened; it refuses with ErrDatabaseGone once
// the file is gone.
func (db *DB) Begin(ctx context.Context) (*Tx, error) {
	if err := db.Check(); err != nil {
		return nil, err
	}
	if err := db.gate.acquire(ctx); err != nil {
		return nil, err
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		db.gate.release()
		return nil, err
	}
	return &Tx{Tx: tx, gate: &db.gate}, nil
}

// InTx runs f in a write transaction and commits it; any error is wrapped
// with op (see Wrap).
func (db *DB) InTx(ctx context.Context, op string, f func(*sql.Tx) error) error {
	return db.inTxFor(ctx, "store", op, f)
}

// inTxFor is InTx with errors that read "<pkg>: <op>: …".
func (db *DB) inTxFor(ctx context.Context, pkg, op string, f func(*sql.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return db.WrapFor(pkg, op, err)
	}
	defer tx.Rollback()
	if err := f(tx.Tx); err != nil {
		return db.WrapFor(pkg, op, err)
	}
	if err := tx.Commit(); err != nil {
		return db.WrapFor(pkg, op, err)
	}
	return nil
}

// BeginAppend starts a write transaction for the journal: records of this
// daemon's own (events, its agents' rows, tool calls) that no other write
// reads and then writes. On SQLite it is Begin. On PostgreSQL it runs on a
// connection of its own, whose transactions take the turn of the
// appenders of events, not the swarm's writers' lock: the journal, about a
// quarter of a busy swarm's write transactions, no longer holds that lock
// nor waits for it. What the appenders' turn keeps is the order of event
// ids: every transaction that adds an event takes it (a write transaction
// before its first event), so ids become visible in increasing order.
func (db *DB) BeginAppend(ctx context.Context) (*Tx, error) {
	a := db.drv.appender()
	if a == nil {
		return db.Begin(ctx)
	}
	if err := db.Check(); err != nil {
		return nil, err
	}
	tx, err := a.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &Tx{Tx: tx}, nil
}

// appendSQL is the pool the journal prepares its statements on.
func (db *DB) appendSQL() *sql.DB {
	if a := db.drv.appender(); a != nil {
		return a
	}
	return db.write
}

// ExecCount runs one write statement and returns the rows it changed.
func (db *DB) ExecCount(ctx context.Context, op, query string, args ...any) (int, error) {
	if err := db.Check(); err != nil {
		return 0, db.Wrap(op, err)
	}
	if err := db.gate.acquire(ctx); err != nil {
		return 0, db.Wrap(op, err)
	}
	res, err := db.writes.ExecContext(ctx, query, args...)
	db.gate.release()
	if err != nil {
		return 0, db.Wrap(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, db.Wrap(op, err)
	}
	return int(n), nil
}

// prepareSchema migrates and lets the driver check the result. Several
// processes opening a fresh file at once race to set it up, and SQLite
// answers the loser SQLITE_BUSY at once rather than through the busy
// handler; so a busy error here is retried, with backoff, for as long as
// busy_timeout would wait.
func (db *DB) prepareSchema(ctx context.Context, migrations fs.FS) error {
	delay := time.Millisecond
	deadline := time.Now().Add(busyTimeout)
	for {
		err := db.migrate(ctx, migrations)
		if err == nil {
			err = db.drv.prepare(ctx, db)
		}
		if err == nil || !db.drv.busy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// Path is the absolute path of the database file, or the URL of a
// PostgreSQL database without its password.
func (db *DB) Path() string { return db.path }

// IsFile reports whether the store is a SQLite file (false: a PostgreSQL
// server's database).
func (db *DB) IsFile() bool { return db.file }

// Now is the DB's clock.
func (db *DB) Now() time.Time { return db.now() }

// SQL is the write pool for the tables other packages keep here. It has one
// connection and begins every transaction IMMEDIATE (it takes the write lock
// at BEGIN): close rows before calling anything else on the DB, or the
// caller waits for its own connection. Writes go through Begin or Write,
// which take the writer's turn in order (gate.go); SQL itself is for
// preparing statements.
func (db *DB) SQL() *sql.DB { return db.write }

// MailSQL is the pool new mail is sent on: SQL on SQLite; on PostgreSQL
// a connection of its own, whose transactions take only the senders' turn
// (LockMailTx), not the swarm's writers' lock. A message is one INSERT
// that reads nothing but the messages' largest id, so it needs no turn
// among the swarm's other writes; waiting for one, urgent mail waited for
// every claim, session and event of every daemon ahead of it.
func (db *DB) MailSQL() *sql.DB {
	if m := db.drv.mail(); m != nil {
		return m
	}
	return db.write
}

// LockMailTx takes, in tx, the turn of the senders of new mail: every
// transaction that adds a message takes it first, so that message ids
// still become visible in increasing order (the router follows mail by
// id) when mail is sent outside the writers' lock. Nothing on SQLite,
// whose one writer excludes every other.
func (db *DB) LockMailTx(ctx context.Context, tx *sql.Tx) error { return db.drv.lockMailTx(ctx, tx) }

// ReadSQL is the read pool (query_only): reads never wait for writers.
// Its statements are prepared once per query text (see Pool).
func (db *DB) ReadSQL() *Pool { return db.reads }

// DataVersion returns PRAGMA data_version of one dedicated connection. It
// changes whenever another connection, in this process or another, commits,
// so the router can poll it cheaply (a few µs) and query only after a change.
func (db *DB) DataVersion(ctx context.Context) (int64, error) {
	v, err := db.drv.dataVersion(ctx, db)
	if err != nil {
		return 0, db.Wrap("data version", err)
	}
	return v, nil
}

// Changes returns a Watch whose channel receives (coalesced, never
// blocking the writer) after commits by any client of the database, this
// process's included, for as long as the DB is open, and which says what
// they touched: a PostgreSQL store's notifications. For SQLite nothing is
// sent (watch the WAL file: see package router).
func (db *DB) Changes() *Watch {
	w := newWatch()
	db.listenMu.Lock()
	defer db.listenMu.Unlock()
	if db.stopCtx.Err() != nil {
		return w
	}
	db.listeners.Go(func() { db.drv.changes(db.stopCtx, db, w) })
	return w
}

// EndUpkeep stops the store's background upkeep ahead of Close: SQLite's
// paced checkpoints, and the watch of the WAL that paces them. Reads and
// writes go on; Close checkpoints what was written since, as the last
// connection always does. A daemon that is stopping calls it first:
// closing an inotify watch waits for a grace period of the kernel's (up to
// 14 ms measured here), which then passes while the agents stop instead of
// after them, in Close. It returns without waiting and is idempotent.
func (db *DB) EndUpkeep() {
	if db.endUpkeep != nil {
		db.endUpkeep()
	}
}

// Close closes the database. It is idempotent.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		db.listenMu.Lock()
		db.stop()
		db.listenMu.Unlock()
		db.listeners.Wait()
		db.lockMu.Lock()
		held := make([]*Lock, 0, len(db.locks))
		for l := range db.locks {
			held = append(held, l)
		}
		db.lockMu.Unlock()
		for _, l := range held {
			_ = l.Release() // a lock whose connection is gone is released already
		}
		db.drv.closeExtra(db)
		var errs []error
		if db.reads != nil {
			errs = append(errs, db.reads.close(), db.writes.close())
		}
		if db.read != nil {
			errs = append(errs, db.read.Close())
		}
		if db.write != nil {
			errs = append(errs, db.write.Close())
		}
		if err := errors.Join(errs...); err != nil {
			db.closeErr = fmt.Errorf("store: close: %w", err)
		}
	})
	return db.closeErr
}
