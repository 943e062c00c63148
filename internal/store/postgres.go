package store

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgMigrationFS holds the PostgreSQL twins of migrations/ (same numbers and
// names; TestPostgresSchemaMatches keeps the two schemas in step).
//
//go:embed migrations/postgres/*.sql
var pgMigrationFS embed.FS

// writerLock is the key of the transaction-level advisory lock every write
// transaction takes. The store's queries were written for SQLite, where one
// writer at a time holds the database (BEGIN IMMEDIATE): reads then writes
// in one transaction (a claim, an id from MAX(id)+1, a state move checked
// against the row) are atomic because nothing else writes meanwhile. Taking
// one lock per write transaction gives PostgreSQL the same semantics, for
// every daemon and command sharing the database, without rewriting each
// query as a serializable retry loop.
const writerLock = 0x5377_6172_6d64 // "Swarmd"

// mailLock is the key of the advisory lock of the senders of new mail
// (DB.MailSQL, DB.LockMailTx): the mail pool's transactions take it
// instead of writerLock; a write transaction that adds a message takes it
// too, after writerLock (never the other way round: no deadlock).
const mailLock = 0x4d61_696c // "Mail"

// appendLock is the key of the advisory lock of the appenders of events
// (DB.BeginAppend): the journal's transactions take it instead of
// writerLock; a write transaction takes it too, after writerLock, before
// its first event (pipeline.go), so that event ids become visible in
// increasing order, which the events' followers rely on.
const appendLock = 0x4576_6e74 // "Evnt"

// IsPostgres reports whether target names a PostgreSQL database (a
// postgres:// or postgresql:// URL) rather than a SQLite file.
func IsPostgres(target string) bool {
	return strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://")
}

// pgDriver is the PostgreSQL engine (pgx through database/sql), one per DB.
type pgDriver struct {
	cfg      *pgx.ConnConfig // as parsed at open, password included
	trips    atomic.Int64    // the write pools' round trips (pipeline.go), for tests
	mailPool *sql.DB         // new mail's own connection (DB.MailSQL)
	appends  *sql.DB         // the journal's own connection (DB.BeginAppend)
}

func (p *pgDriver) name() string { return "postgres" }

func (p *pgDriver) migrations() fs.FS {
	sub, err := fs.Sub(pgMigrationFS, "migrations/postgres")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return migrationsDir{sub}
}

// migrationsDir presents a flat directory of migrations as "migrations/",
// the layout loadMigrations reads.
type migrationsDir struct{ fs.FS }

func (m migrationsDir) Open(name string) (fs.File, error) {
	if name == "migrations" {
		return m.FS.Open(".")
	}
	if rest, ok := strings.CutPrefix(name, "migrations/"); ok {
		return m.FS.Open(rest)
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (m migrationsDir) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "migrations" {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	return fs.ReadDir(m.FS, ".")
}

// credentialPassfile is the passfile a systemd unit hands the daemon with
// LoadCredential=pgpass:PATH: readable by the service alone, and never in
// the process's environment (which /proc/PID/environ shows for good).
func credentialPassfile(getenv func(string) string) string {
	dir := getenv("CREDENTIALS_DIRECTORY")
	if dir == "" {
		return ""
	}
	p := filepath.Join(dir, "pgpass")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// withPassfile adds passfile to a postgres:// URL that names none.
func withPassfile(target, passfile string) string {
	u, err := url.Parse(target)
	if err != nil || passfile == "" || u.Query().Has("passfile") {
		return target
	}
	q := u.Query()
	q.Set("passfile", passfile)
	u.RawQuery = q.Encode()
	return u.String()
}

// idleTxTimeout: no transaction of swarmd waits on its client between
// statements for anything but a CPU, so one idle this long belongs to a
// daemon that is stopped or hung.
const idleTxTimeout = 5 * time.Second

func (p *pgDriver) open(ctx context.Context, target string, _ Options) (write, read *sql.DB, ident string, err error) {
	if os.Getenv("PGPASSFILE") == "" {
		target = withPassfile(target, credentialPassfile(os.Getenv))
	}
	cfg, err := pgx.ParseConfig(target) // reads PGPASSWORD and the passfile now, once
	if err != nil {
		return nil, nil, "", fmt.Errorf("store url: %w", err)
	}
	// A daemon stopped (SIGSTOP, a frozen VM) inside a transaction holds
	// its locks, the swarm's writer lock among them: the server ends such a
	// session after idleTxTimeout, so the others go on (the stopped
	// daemon's transaction fails when it continues, and is retried).
	if _, set := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.Itoa(int(idleTxTimeout.Milliseconds()))
	}
	// The server's JIT compiles a plan whose estimated cost passes
	// jit_above_cost, on every execution of a prepared statement that uses
	// it. With statistics that saw a backlog of 20,000 open tasks, the
	// claim's generic plan is estimated above it: forced to that plan, a
	// claim compiled for 28 ms to run for 0.06 ms. The server kept its
	// cheaper custom plans under bench/pgthroughput -analyze, but nothing
	// binds it to, and swarmd's statements are all short. A URL that sets
	// jit keeps it.
	if _, set := cfg.RuntimeParams["jit"]; !set {
		cfg.RuntimeParams["jit"] = "off"
	}
	p.cfg = cfg.Copy() // the listener connects with it, not by reading the environment again
	base, cache := stdlib.GetConnector(*cfg), &sync.Map{}
	kinds := &changeCache{}
	write = sql.OpenDB(&pgConnector{base: base, write: true, lock: heldLock, rebinds: cache, kinds: kinds, trips: &p.trips})
	write.SetMaxOpenConns(1) // as SQLite's: in-process writers queue on the pool
	write.SetMaxIdleConns(1)
	p.mailPool = sql.OpenDB(&pgConnector{base: base, write: true, lock: heldMailLock, rebinds: cache, kinds: kinds, trips: &p.trips})
	p.mailPool.SetMaxOpenConns(1) // senders take turns anyway (mailLock)
	p.mailPool.SetMaxIdleConns(1)
	p.appends = sql.OpenDB(&pgConnector{base: base, write: true, lock: heldAppendLock, rebinds: cache, kinds: kinds, trips: &p.trips})
	p.appends.SetMaxOpenConns(1) // one journal a daemon
	p.appends.SetMaxIdleConns(1)
	read = sql.OpenDB(&pgConnector{base: base, rebinds: cache, trips: &atomic.Int64{}})
	read.SetMaxOpenConns(readConns)
	read.SetMaxIdleConns(readConns)
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		read.Close()
		p.mailPool.Close()
		p.appends.Close()
		return nil, nil, "", err
	}
	return write, read, Redact(target), nil
}

// prepare: nothing to check after the migrations.
func (p *pgDriver) prepare(context.Context, *DB) error { return nil }

// setup creates what the migrations and the SQLite-shaped queries need:
// the schema version table and iif(), SQLite's inline conditional.
func (p *pgDriver) setup(ctx context.Context, db *DB) error {
	_, err := db.write.ExecContext(ctx, `
CREATE TABLE IF NOT EXISTS swarmd_schema (version INTEGER NOT NULL);
INSERT INTO swarmd_schema (version) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM swarmd_schema);
CREATE OR REPLACE FUNCTION iif(boolean, anycompatible, anycompatible) RETURNS anycompatible
	LANGUAGE sql IMMUTABLE AS 'SELECT CASE WHEN $1 THEN $2 ELSE $3 END';`)
	if err != nil {
		return db.Wrap("open", err)
	}
	return nil
}

func (p *pgDriver) busy(err error) bool {
	var pe *pgconn.PgError
	// serialization_failure, deadlock_detected, lock_not_available
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "55P03")
}

// fault: class 58 (system: I/O), XX (internal), and 40003, a statement
// whose completion is unknown.
func (p *pgDriver) fault(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "58") || strings.HasPrefix(pe.Code, "XX") || pe.Code == "40003")
}

func (p *pgDriver) classify(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "53100": // disk_full
			return ErrDiskFull
		case "25006", "42501": // read_only_sql_transaction, insufficient_privilege
			return ErrReadOnly
		}
	}
	return nil
}

func (p *pgDriver) userVersion(ctx context.Context, q queryRower) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, `SELECT version FROM swarmd_schema`).Scan(&v)
	return v, err
}

func (p *pgDriver) setUserVersion(ctx context.Context, tx *sql.Tx, v int) error {
	_, err := tx.ExecContext(ctx, `UPDATE swarmd_schema SET version = `+strconv.Itoa(v))
	return err
}

// dataVersion is the server's WAL insert position: it moves with every
// commit, anywhere in the cluster (a change elsewhere costs a reader one
// needless query, never a missed one).
func (p *pgDriver) dataVersion(ctx context.Context, db *DB) (int64, error) {
	var v int64
	err := db.reads.QueryRowContext(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&v)
	return v, err
}

func (p *pgDriver) closeExtra(*DB) {
	if p.mailPool != nil {
		p.mailPool.Close()
	}
	if p.appends != nil {
		p.appends.Close()
	}
}

func (p *pgDriver) mail() *sql.DB { return p.mailPool }

func (p *pgDriver) appender() *sql.DB { return p.appends }

// WriteRoundTrips is how many round trips to the server the write
// transactions of this handle have made (pipeline.go); 0 on SQLite, whose
// statements are function calls.
func (db *DB) WriteRoundTrips() int64 {
	if p, ok := db.drv.(*pgDriver); ok {
		return p.trips.Load()
	}
	return 0
}

func (p *pgDriver) lockMailTx(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(Deferred(ctx), `SELECT pg_advisory_xact_lock(?)`, int64(mailLock))
	return err
}

// changesChannel is the channel every write transaction notifies; the
// payload is the transaction's Change as a decimal digit.
const changesChannel = "swarmd_changes"

// maintain: PostgreSQL keeps itself (autovacuum, its own checkpoints).
func (*pgDriver) maintain(context.Context, *DB) {}

// changes listens on its own connection (LISTEN needs one that stays
// open) and notes each notification's Change on w; it reconnects, after a
// pause, when the connection fails. It notes everything once it listens,
// the first time too: a commit before then told no one this listener
// heard (one while it was down, or before its first LISTEN, which may
// follow the router's first look). It returns when ctx ends.
func (p *pgDriver) changes(ctx context.Context, db *DB, w *Watch) {
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, p.cfg.Copy())
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+changesChannel); err == nil {
				w.note(ChangedAll)
			}
		}
		for err == nil {
			var n *pgconn.Notification
			if n, err = conn.WaitForNotification(ctx); err == nil {
				w.notified(n.Payload)
			}
		}
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// payloadChange reads a notification's payload that is not an urgent
// message's (payloadUrgent): a number written by commitWrite or by the
// tasks' trigger (ChangedOpen); anything else (an older daemon's empty
// payload, a NOTIFY by hand) may have changed anything.
func payloadChange(s string) Change {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > int(ChangedAll) || strconv.Itoa(n) != s {
		return ChangedAll
	}
	return Change(n)
}

// payloadUrgent reads an urgent message's notification, 'u' ID ' '
// CREATED_AT ' ' RECIPIENT; ok is false for any other payload.
func payloadUrgent(s string) (u Urgent, ok bool) {
	rest, ok := strings.CutPrefix(s, "u")
	if !ok {
		return Urgent{}, false
	}
	id, rest, ok1 := strings.Cut(rest, " ")
	at, to, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || to == "" {
		return Urgent{}, false
	}
	var err error
	if u.ID, err = strconv.ParseInt(id, 10, 64); err != nil || u.ID < 1 {
		return Urgent{}, false
	}
	if u.CreatedAt, err = time.Parse(TimeLayout, at); err != nil {
		return Urgent{}, false
	}
	u.To = to
	return u, true
}

// pgConnector makes the connections of one pool. The write pool's take the
// writer lock in every transaction (see writerLock).
type pgConnector struct {
	base    sqldriver.Connector
	write   bool
	rebinds *sync.Map     // rebind's work, shared by the pools: the store runs a small fixed set of queries
	kinds   *changeCache  // what each query of a write transaction touches, for its notification
	trips   *atomic.Int64 // round trips of the write pools' transactions
	lock    heldBack      // a write pool's: the advisory lock its transactions take
}

func (c *pgConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &pgConn{Conn: conn.(*stdlib.Conn), write: c.write, lock: c.lock, rebinds: c.rebinds, kinds: c.kinds, trips: c.trips}, nil
}

func (c *pgConnector) Driver() sqldriver.Driver { return c.base.Driver() }

// pgConn runs the store's SQLite-shaped SQL on PostgreSQL: placeholders and
// the few functions that differ are rewritten (rebind), and on the write
// pool every statement runs inside a transaction holding the writer lock.
type pgConn struct {
	*stdlib.Conn
	write   bool
	inTx    bool
	rebinds *sync.Map
	kinds   *changeCache
	touched Change        // by the write transaction in progress: its notification's payload
	held    []heldBack    // statements of the write transaction not yet sent (pipeline.go)
	fenced  []FencedError // the leases the write transaction has checked: agent and epoch
	trips   *atomic.Int64
	lock    heldBack // the advisory lock the write transactions take
	// appending: the write transaction in progress holds, or has held
	// back, the appenders' turn (appendLock).
	appending bool
}

// CheckNamedValue makes a string PostgreSQL's text can hold: a NUL, which
// SQLite stores and PostgreSQL refuses (SQLSTATE 22021, a refusal no retry
// passes), becomes U+FFFD, as invalid UTF-8 does where text is read from
// a session's output. Such text is a session's own (its result, a tool
// call's input, a reason its backend gave), one JSON escape away; refused,
// it failed the session's settlement and the journal's batch for good.
// database/sql asks it of every argument, on every pool.
func (c *pgConn) CheckNamedValue(nv *sqldriver.NamedValue) error {
	if s, ok := nv.Value.(string); ok && strings.IndexByte(s, 0) >= 0 {
		nv.Value = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return c.Conn.CheckNamedValue(nv)
}

func (c *pgConn) Prepare(query string) (sqldriver.Stmt, error) {
	return &pgStmt{c: c, query: query}, nil
}

// PrepareContext prepares nothing on the server: pgx caches the statements
// it runs, and a statement executed through the conn gets the writer lock.
func (c *pgConn) PrepareContext(_ context.Context, query string) (sqldriver.Stmt, error) {
	return &pgStmt{c: c, query: query}, nil
}

func (c *pgConn) Begin() (sqldriver.Tx, error) {
	return c.BeginTx(context.Background(), sqldriver.TxOptions{})
}

// pgTx is a transaction of a pgConn: the read pool's is pgx's own (tx);
// the write pool's was begun by hand (tx nil).
type pgTx struct {
	tx sqldriver.Tx
	c  *pgConn
}

type pgStmt struct {
	c     *pgConn
	query string
}

func (s *pgStmt) Close() error  { return nil }
func (s *pgStmt) NumInput() int { return -1 }
func (s *pgStmt) Exec(args []sqldriver.Value) (sqldriver.Result, error) {
	return s.ExecContext(context.Background(), named(args))
}
func (s *pgStmt) Query(args []sqldriver.Value) (sqldriver.Rows, error) {
	return s.QueryContext(context.Background(), named(args))
}
func (s *pgStmt) ExecContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	return s.c.ExecContext(ctx, s.query, args)
}
func (s *pgStmt) QueryContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	return s.c.QueryContext(ctx, s.query, args)
}

func named(args []sqldriver.Value) []sqldriver.NamedValue {
	out := make([]sqldriver.NamedValue, len(args))
	for i, a := range args {
		out[i] = sqldriver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return out
}

// bufferedRows are rows read to the end, so that the transaction they
// came from can commit before the caller reads them.
type bufferedRows struct {
	cols []string
	rows [][]sqldriver.Value
}

func bufferRows(r sqldriver.Rows) (sqldriver.Rows, error) {
	defer r.Close()
	b := &bufferedRows{cols: r.Columns()}
	for {
		row := make([]sqldriver.Value, len(b.cols))
		if err := r.Next(row); err != nil {
			if errors.Is(err, io.EOF) {
				return b, nil
			}
			return nil, err
		}
		b.rows = append(b.rows, row)
	}
}

func (b *bufferedRows) Columns() []string { return b.cols }
func (b *bufferedRows) Close() error      { return nil }
func (b *bufferedRows) Next(dest []sqldriver.Value) error {
	if len(b.rows) == 0 {
		return io.EOF
	}
	copy(dest, b.rows[0])
	b.rows = b.rows[1:]
	return nil
}

// rebind (cached) turns the store's SQLite SQL into PostgreSQL's: ? placeholders
// become $1, $2, … (outside quotes), IFNULL is COALESCE, and INSERT OR
// IGNORE is INSERT … ON CONFLICT DO NOTHING. Statements without arguments
// (migrations, pragmas of the dialect) are left alone.
func (c *pgConn) rebind(query string, nargs int) string {
	if nargs == 0 && !strings.Contains(query, "IFNULL") && !strings.Contains(query, "INSERT OR IGNORE") && !strings.Contains(query, "group_concat(") {
		return query
	}
	if v, ok := c.rebinds.Load(query); ok {
		return v.(string)
	}
	out := rebind(query)
	c.rebinds.Store(query, out)
	return out
}

func rebind(query string) string {
	var b strings.Builder
	n, quote := 0, byte(0)
	for i := 0; i < len(query); i++ {
		ch := query[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(ch)
	}
	out := strings.ReplaceAll(b.String(), "IFNULL(", "COALESCE(")
	// group_concat(text, sep) is SQLite's string_agg.
	out = strings.ReplaceAll(out, "group_concat(", "string_agg(")
	if rest, ok := strings.CutPrefix(strings.TrimSpace(out), "INSERT OR IGNORE INTO"); ok {
		out = "INSERT INTO" + rest + " ON CONFLICT DO NOTHING"
	}
	return out
}
