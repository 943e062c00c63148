// Package mailbox is swarmd's SQLite database (<state_dir>/swarm.db): the
// messages agents and the operator send each other, the daemon's persistent
// state (agents, sessions and the event log, written by a Journal and read
// back for restart recovery), and the schema migrations.
//
// The file is shared by the daemon and by many short-lived `swarmd mail`
// processes, so every guarantee here holds across processes: writes run in
// BEGIN IMMEDIATE transactions (a deferred read-then-write transaction fails
// with "database is locked" under contention instead of waiting), and a
// message is marked delivered in the same transaction that reads it for a
// prompt, so it is delivered exactly once.
package mailbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/swarmd/swarmd/internal/agent"
)

// Operator is the sender name outside a backend session. It is always a
// valid recipient (agents reply to the operator) but never an agent, so a
// broadcast does not reach it.
const Operator = "operator"

// DefaultMaxBodyBytes is the body limit when Options.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 64 << 10

// maxSubjectBytes keeps a subject a line, not a second body that would slip
// past the body limit into prompts.
const maxSubjectBytes = 1024

// readConns bounds the read pool; reads in WAL mode never block each other.
const readConns = 4

// Options configure Open.
type Options struct {
	// MaxBodyBytes refuses larger bodies (config key mailbox.max_body).
	// Zero means the limit the daemon recorded in the database (see
	// RecordLimits), else DefaultMaxBodyBytes.
	MaxBodyBytes int
	// Agents are the known recipients. Nil disables the recipient check
	// (and makes Broadcast impossible). Operator is always known.
	Agents []string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// NoCreate makes Open fail with ErrNoDatabase instead of creating a
	// missing file: a `swarmd mail` process pointed at the wrong path should
	// say so rather than write mail nobody reads.
	NoCreate bool
}

// DB is an open swarm.db. It is safe for concurrent use.
type DB struct {
	path string
	// write has a single connection: in-process writers queue on the pool,
	// which is cheap, instead of in SQLite's busy handler, which sleeps in
	// millisecond steps. Other processes still meet us through busy_timeout.
	write *sql.DB
	read  *sql.DB
	// insertStmt is prepared once: parsing the INSERT costs about as much as
	// running it.
	insertStmt *sql.Stmt

	maxBody   int
	agents    map[string]bool // nil: any well-formed recipient
	agentList []string        // sorted, for error messages and Broadcast
	now       func() time.Time

	// PRAGMA data_version is per connection, so DataVersion keeps one.
	dvMu   sync.Mutex
	dvConn *sql.Conn
	dvStmt *sql.Stmt

	// ident is the file opened, so that Check can tell when the path no
	// longer leads to it; gone latches once it does not.
	ident os.FileInfo
	gone  atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating unless opts.NoCreate) the database at path and brings
// its schema up to date. It refuses a database whose schema is newer than
// this code knows (ErrSchemaTooNew).
func Open(ctx context.Context, path string, opts Options) (*DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("mailbox: open %s: %w", path, err)
	}
	db := &DB{path: abs, maxBody: opts.MaxBodyBytes, now: opts.Now}
	if db.now == nil {
		db.now = time.Now
	}
	if opts.Agents != nil {
		db.agents = make(map[string]bool, len(opts.Agents))
		for _, a := range opts.Agents {
			if !validName(a) {
				return nil, fmt.Errorf("mailbox: open: %w", invalid("agents", ErrInvalidName,
					"agent name %q is invalid (want %s)", a, agent.NamePattern))
			}
			if a != Operator && !db.agents[a] {
				db.agentList = append(db.agentList, a)
			}
			db.agents[a] = true
		}
		db.agents[Operator] = true
		slices.Sort(db.agentList)
	}
	if opts.NoCreate {
		if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("mailbox: open: %w: %s", ErrNoDatabase, abs)
		}
	}

	if !opts.NoCreate {
		if err := private(abs); err != nil {
			return nil, fmt.Errorf("mailbox: open %s: %w", abs, err)
		}
	}
	if db.write, err = sql.Open("sqlite", dsn(abs, true)); err != nil {
		return nil, fmt.Errorf("mailbox: open %s: %w", abs, err)
	}
	db.write.SetMaxOpenConns(1)
	db.write.SetMaxIdleConns(1)
	if db.read, err = sql.Open("sqlite", dsn(abs, false)); err != nil {
		db.write.Close()
		return nil, fmt.Errorf("mailbox: open %s: %w", abs, err)
	}
	db.read.SetMaxOpenConns(readConns + 1) // +1: DataVersion's dedicated connection
	db.read.SetMaxIdleConns(readConns + 1)

	if err := db.prepareSchema(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if db.maxBody <= 0 {
		if db.maxBody, err = db.recordedMaxBody(ctx); err != nil {
			db.Close()
			return nil, err
		}
	}
	if db.maxBody <= 0 {
		db.maxBody = DefaultMaxBodyBytes
	}
	if db.insertStmt, err = db.write.PrepareContext(ctx, insertSQL); err != nil {
		db.Close()
		return nil, db.wrap("open", err)
	}
	if db.ident, err = os.Stat(abs); err != nil {
		db.Close()
		return nil, fmt.Errorf("mailbox: open %s: %w", abs, err)
	}
	return db, nil
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

// begin starts a write transaction on the file this DB opened.
func (db *DB) begin(ctx context.Context) (*sql.Tx, error) {
	if err := db.Check(); err != nil {
		return nil, err
	}
	return db.write.BeginTx(ctx, nil)
}

// dsn puts the pragmas in the connection string so that every pooled
// connection gets them, including ones database/sql opens later.
// Connections never create the file (private did, unless NoCreate): a pooled
// connection opened after swarm.db was deleted must fail, not start an empty
// database at the path.
func dsn(path string, write bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)") // WAL + NORMAL: durable across crashes of the process, not of the OS
	q.Add("_pragma", "foreign_keys(ON)")
	if write {
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)") // a write on the read pool is a bug
	}
	q.Set("mode", "rw") // SQLite URI parameter: no create
	// A file: URI escapes '?' and '#' in the path, which a bare path would
	// split on.
	return (&url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}).String()
}

// ensureWAL checks that journal_mode=WAL took: the DSN pragma can lose the
// race for the lock when many processes create the file at once, and a
// filesystem without shared memory cannot do WAL at all.
// prepareSchema migrates and checks WAL mode. Several processes opening a
// fresh file at once race to switch it to WAL, and SQLite answers the loser
// SQLITE_BUSY at once rather than through the busy handler; so a busy error
// here is retried, with backoff, for as long as busy_timeout would wait.
func (db *DB) prepareSchema(ctx context.Context) error {
	delay := time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := db.migrate(ctx, migrationFS)
		if err == nil {
			err = db.ensureWAL(ctx)
		}
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
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

// isBusy reports SQLITE_BUSY or SQLITE_LOCKED.
func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
}

func (db *DB) ensureWAL(ctx context.Context) error {
	var mode string
	for range 2 {
		if err := db.write.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			return db.wrap("open", err)
		}
		if strings.EqualFold(mode, "wal") {
			return nil
		}
		if _, err := db.write.ExecContext(ctx, "PRAGMA journal_mode = WAL"); err != nil {
			return db.wrap("open", err)
		}
	}
	return fmt.Errorf("mailbox: open: %s: journal_mode is %q, not wal (is it on a network filesystem?)", db.path, mode)
}

// Path is the absolute path of the database file.
func (db *DB) Path() string { return db.path }

// SQL is the write pool for tables that later migrations add to this
// package. It has one connection and begins every transaction IMMEDIATE (it
// takes the write lock at BEGIN): close rows before calling anything else on
// the DB, or the caller waits for its own connection.
func (db *DB) SQL() *sql.DB { return db.write }

// ReadSQL is the read pool (query_only): reads never wait for writers.
func (db *DB) ReadSQL() *sql.DB { return db.read }

// DataVersion returns PRAGMA data_version of one dedicated connection. It
// changes whenever another connection, in this process or another, commits,
// so the router can poll it cheaply (a few µs) and query only after a change.
func (db *DB) DataVersion(ctx context.Context) (int64, error) {
	db.dvMu.Lock()
	defer db.dvMu.Unlock()
	if db.dvStmt == nil {
		conn, err := db.read.Conn(ctx)
		if err != nil {
			return 0, db.wrap("data version", err)
		}
		stmt, err := conn.PrepareContext(ctx, "PRAGMA data_version")
		if err != nil {
			conn.Close()
			return 0, db.wrap("data version", err)
		}
		db.dvConn, db.dvStmt = conn, stmt
	}
	var v int64
	if err := db.dvStmt.QueryRowContext(ctx).Scan(&v); err != nil {
		return 0, db.wrap("data version", err)
	}
	return v, nil
}

// Close closes the database. It is idempotent.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		db.dvMu.Lock()
		if db.dvStmt != nil {
			db.dvStmt.Close()
			db.dvConn.Close()
			db.dvStmt, db.dvConn = nil, nil
		}
		db.dvMu.Unlock()
		var errs []error
		if db.insertStmt != nil {
			errs = append(errs, db.insertStmt.Close())
		}
		if db.read != nil {
			errs = append(errs, db.read.Close())
		}
		if db.write != nil {
			errs = append(errs, db.write.Close())
		}
		if err := errors.Join(errs...); err != nil {
			db.closeErr = fmt.Errorf("mailbox: close: %w", err)
		}
	})
	return db.closeErr
}

// validName is the agent name rule (agent.NamePattern).
func validName(s string) bool { return agent.ValidName(s) }
