package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
)

// migrationFS holds the SQLite schema. To change it, add the next numbered
// file to migrations/ and its twin to migrations/postgres/ (the schema test
// keeps them in step); never edit one that has shipped.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// readConns bounds the read pool; reads in WAL mode never block each other.
const readConns = 4

// busyTimeout is how long a writer waits for another process's lock.
const busyTimeout = 10 * time.Second

// sqliteDriver is the SQLite engine (modernc.org/sqlite, no cgo).
type sqliteDriver struct{}

func (sqliteDriver) name() string { return "sqlite" }

func (sqliteDriver) migrations() fs.FS { return migrationFS }

func (sqliteDriver) open(_ context.Context, target string, opts Options) (write, read *sql.DB, path string, err error) {
	if path, err = filepath.Abs(target); err != nil {
		return nil, nil, "", err
	}
	if opts.NoCreate {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil, "", fmt.Errorf("%w: %s", ErrNoDatabase, path)
		}
	} else if err := private(path); err != nil {
		return nil, nil, "", err
	}
	wc, err := newCachingConnector(dsn(path, true)) // the write connection keeps its statements (stmtcache.go)
	if err != nil {
		return nil, nil, "", err
	}
	write = sql.OpenDB(wc)
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	if read, err = sql.Open("sqlite", dsn(path, false)); err != nil {
		write.Close()
		return nil, nil, "", err
	}
	read.SetMaxOpenConns(readConns + 1) // +1: DataVersion's dedicated connection
	read.SetMaxIdleConns(readConns + 1)
	return write, read, path, nil
}

// setup marks the DB file-backed: Check guards the file.
func (sqliteDriver) setup(_ context.Context, db *DB) error {
	db.file = true
	return nil
}

// dataVersion is PRAGMA data_version of one dedicated connection (it is
// per connection): it changes whenever another connection, in this process
// or another, commits, so the router can poll it cheaply (a few µs).
func (sqliteDriver) dataVersion(ctx context.Context, db *DB) (int64, error) {
	db.dvMu.Lock()
	defer db.dvMu.Unlock()
	if db.dvStmt == nil {
		conn, err := db.read.Conn(ctx)
		if err != nil {
			return 0, err
		}
		stmt, err := conn.PrepareContext(ctx, "PRAGMA data_version")
		if err != nil {
			conn.Close()
			return 0, err
		}
		db.dvConn, db.dvStmt = conn, stmt
	}
	var v int64
	err := db.dvStmt.QueryRowContext(ctx).Scan(&v)
	return v, err
}

// changes: SQLite has no notifications (the router watches the WAL file
// instead); nothing is ever signalled.
func (sqliteDriver) changes(ctx context.Context, _ *DB, _ *Watch) { <-ctx.Done() }

// checkpointEvery paces maintain's checkpoints: the commits of the
// checkpointEvery after a write are checkpointed together, and while writes
// go on, those of up to checkpointAtMost. Each checkpoint that catches up
// makes the next commit start the WAL over, and that commit fsyncs the
// WAL's new header with the writer's turn held (SQLite's WAL does, whatever
// the synchronous setting): at four a second under load that fsync was in
// the p99 of the outcomes' commits.
const (
	checkpointEvery  = 250 * time.Millisecond
	checkpointAtMost = 2 * time.Second
	// walSizeLimit is what the WAL is truncated to once a backlog (a long
	// read held checkpoints back) is checkpointed: twice what SQLite's own
	// automatic checkpoint lets it reach, so a steady swarm never pays for
	// growing it again.
	walSizeLimit = 8 << 20
)

// gather waits for writes to pause for checkpointEvery, or for
// checkpointAtMost after the first; false when ctx ended.
func gather(ctx context.Context, pace *time.Timer, written <-chan struct{}) bool {
	first := time.Now()
	for {
		pace.Reset(checkpointEvery)
		select {
		case <-ctx.Done():
			return false
		case <-pace.C:
		}
		// The checkpoint covers what was written meanwhile; while writes go
		// on, it waits a while longer.
		select {
		case <-written:
			if time.Since(first) < checkpointAtMost {
				continue
			}
		default:
		}
		return true
	}
}

// maintain checkpoints the WAL into the database file. SQLite's own
// automatic checkpoint runs inside the commit that takes the WAL past
// 1,000 pages, and that commit (an agent's outcome as likely as any, with
// every other writer of the process queued behind it) then waits for the
// copy and its fsyncs: tens of milliseconds on a busy disk. The write
// connection does none (wal_autocheckpoint 0); this goroutine runs a
// PASSIVE checkpoint, which never blocks a writer or a reader, on a read
// connection checkpointEvery after the WAL is written. It learns of writes
// from inotify (a FileWatch on the WAL), so an idle daemon's store wakes no one; without
// inotify it looks at the WAL every checkpointEvery. A process that is not
// the daemon (a CLI command) checkpoints when it closes the database, as
// SQLite's last connection always does.
func (sqliteDriver) maintain(ctx context.Context, db *DB) {
	wal := db.path + "-wal"
	var written <-chan struct{}
	if db.wal != nil {
		defer db.wal.Close()
		written = db.wal.C
	}
	var poll <-chan time.Time
	pollEvery := func() {
		t := time.NewTicker(checkpointEvery)
		context.AfterFunc(ctx, t.Stop)
		poll = t.C
	}
	if written == nil {
		pollEvery()
	}
	pace := time.NewTimer(checkpointEvery)
	pace.Stop()
	defer pace.Stop()
	var last time.Time // the WAL's mtime at the last checkpoint, for polling
	for {
		var fi os.FileInfo
		select {
		case <-ctx.Done():
			return
		case _, ok := <-written:
			if !ok { // the watch failed
				written = nil
				pollEvery()
				continue
			}
			if !gather(ctx, pace, written) {
				return
			}
		case <-poll:
			var err error
			// A write within the file system's timestamp granularity of the
			// last checkpoint is missed here until the next write; the
			// watch has no such gap.
			if fi, err = os.Stat(wal); err != nil || fi.ModTime().Equal(last) {
				continue
			}
		}
		db.checkpoints.Add(1)
		var busy, frames, done int
		if err := db.read.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done); err != nil {
			continue // the database is closing: nothing to do
		}
		if fi != nil {
			last = fi.ModTime()
		}
	}
}

func (sqliteDriver) mail() *sql.DB { return nil }

func (sqliteDriver) appender() *sql.DB { return nil }

func (sqliteDriver) lockMailTx(context.Context, *sql.Tx) error { return nil }

func (sqliteDriver) closeExtra(db *DB) {
	if db.wal != nil {
		db.wal.Close()
	}
	db.dvMu.Lock()
	defer db.dvMu.Unlock()
	if db.dvStmt != nil {
		db.dvStmt.Close()
		db.dvConn.Close()
		db.dvStmt, db.dvConn = nil, nil
	}
}

// dsn puts the pragmas in the connection string so that every pooled
// connection gets them, including ones database/sql opens later.
// Connections never create the file (private did, unless NoCreate): a pooled
// connection opened after swarm.db was deleted must fail, not start an empty
// database at the path.
func dsn(path string, write bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)") // WAL + NORMAL: durable across crashes of the process, not of the OS
	q.Add("_pragma", "foreign_keys(ON)")
	if write {
		q.Set("_txlock", "immediate")
		q.Add("_pragma", "wal_autocheckpoint(0)") // maintain checkpoints instead
		// The writer that restarts the WAL after a whole checkpoint
		// truncates it to this: else a backlog's high water stays on disk.
		q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	} else {
		q.Add("_pragma", "query_only(1)") // a write on the read pool is a bug
	}
	q.Set("mode", "rw") // SQLite URI parameter: no create
	// A file: URI escapes '?' and '#' in the path, which a bare path would
	// split on.
	return (&url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}).String()
}

// prepare checks that journal_mode=WAL took: the DSN pragma can lose the
// race for the lock when many processes create the file at once, and a
// filesystem without shared memory cannot do WAL at all.
func (sqliteDriver) prepare(ctx context.Context, db *DB) error {
	var mode string
	for range 2 {
		if err := db.write.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			return db.Wrap("open", err)
		}
		if strings.EqualFold(mode, "wal") {
			// Watched from here, before Open returns, so that no write
			// of the caller's goes unseen (the migrations' are signalled
			// already).
			// The WAL alone: a checkpoint's own write of the database
			// file is no reason for another.
			dir, base := filepath.Split(db.path)
			if w, err := WatchFiles(dir, base+"-wal"); err == nil {
				db.wal = w
			}
			return nil
		}
		if _, err := db.write.ExecContext(ctx, "PRAGMA journal_mode = WAL"); err != nil {
			return db.Wrap("open", err)
		}
	}
	return fmt.Errorf("store: open: %s: journal_mode is %q, not wal (is it on a network filesystem?)", db.path, mode)
}

// busy reports SQLITE_BUSY or SQLITE_LOCKED.
func (sqliteDriver) busy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
}

func (sqliteDriver) fault(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_CORRUPT,
		sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_INTERNAL:
		return true
	}
	return false
}

func (sqliteDriver) classify(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // primary code; extended codes carry detail in the high bits
		case sqlite3.SQLITE_FULL:
			return ErrDiskFull
		case sqlite3.SQLITE_READONLY:
			return ErrReadOnly
		}
	}
	return nil
}

func (sqliteDriver) userVersion(ctx context.Context, q queryRower) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

func (sqliteDriver) setUserVersion(ctx context.Context, tx *sql.Tx, v int) error {
	// PRAGMA takes no bound parameters; the version is our own integer.
	_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v))
	return err
}
