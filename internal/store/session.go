package store

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A session's row has two writes that must not wait for the journal's
// batch: its start, durable before the session's process starts (so that
// its seq is never handed out again and every started session has a row),
// and its settlement, the session's end recorded in one transaction with
// everything its outcome changes (package settle).

// ErrSeqTaken: BeginSession found another session of the agent with that
// seq (a second daemon ran the agent): the caller takes a seq after MaxSeq.
var ErrSeqTaken = errors.New("session seq already used")

// beginSQL inserts a session's row unless another session of the agent has
// its seq: one statement, prepared once.
const beginSQL = `INSERT INTO sessions (session_id, agent, seq, started_at, head_before, log_path)
SELECT ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE agent = ? AND seq = ?)
ON CONFLICT (session_id) DO NOTHING`

// BeginSession records that session s (SessionID, Agent, Seq, Started,
// HeadBefore, LogPath) is about to start, committed before it returns. A
// row for the same session id is left as it is; another session of the
// agent with the same seq is ErrSeqTaken. The daemon's runners begin
// theirs in package settle's batches (BeginSessionTx).
func (db *DB) BeginSession(ctx context.Context, s SessionRecord) error {
	if err := validBegin(s); err != nil {
		return err
	}
	var inserted func() (bool, error)
	err := db.InTx(ctx, "begin session "+s.SessionID, func(tx *sql.Tx) error {
		var err error
		inserted, err = db.BeginSessionTx(ctx, tx, s)
		return err
	})
	if err != nil {
		return err
	}
	if ok, err := inserted(); err != nil || ok {
		return err
	}
	return db.SessionBegun(ctx, s)
}

// BeginSessionTx is BeginSession's write in tx, with the writes of other
// sessions (package settle commits the starts that wait for the store at
// once together). The insert is held back (Deferred): on PostgreSQL it
// travels with the transaction's next statement or its commit, so that a
// batch of starts is one round trip under the swarm's lock, not one each.
// inserted, called once tx has committed (before, it fails), reports at
// no cost whether the row was inserted, without waiting for the write
// connection (HeldCount); when it was not, SessionBegun says whether the
// row is s's or its seq another session's.
func (db *DB) BeginSessionTx(ctx context.Context, tx *sql.Tx, s SessionRecord) (inserted func() (bool, error), err error) {
	if err := validBegin(s); err != nil {
		return nil, err
	}
	// A session starts only while this daemon holds its agent's lease.
	if err := db.FenceTx(ctx, tx, s.Agent); err != nil {
		return nil, err
	}
	var (
		res  sql.Result
		held HeldCount
	)
	if st := db.writes.cachedStmt(beginSQL); st != nil {
		res, err = tx.StmtContext(ctx, st).ExecContext(held.Defer(ctx), beginArgs(s)...)
	} else {
		res, err = tx.ExecContext(held.Defer(ctx), beginSQL, beginArgs(s)...)
	}
	if err != nil {
		return nil, fmt.Errorf("begin session %s: %w", s.SessionID, err)
	}
	held.Ran(res)
	return func() (bool, error) {
		n, err := held.RowsAffected()
		if err != nil {
			return false, fmt.Errorf("begin session %s: %w", s.SessionID, err)
		}
		return n == 1, nil
	}, nil
}

func validBegin(s SessionRecord) error {
	if s.SessionID == "" || s.Agent == "" || s.Seq == 0 {
		return fmt.Errorf("store: begin session: %w", Invalid("session", ErrInvalidName, "a session needs an id, an agent and a seq"))
	}
	return nil
}

func beginArgs(s SessionRecord) []any {
	return []any{s.SessionID, s.Agent, int64(s.Seq), FormatTime(s.Started), s.HeadBefore, s.LogPath, s.Agent, int64(s.Seq)}
}

// SessionBegun tells, after a begin that inserted nothing, a row that is
// s's (an earlier attempt committed it: nil) from a seq that is another
// session's (ErrSeqTaken).
func (db *DB) SessionBegun(ctx context.Context, s SessionRecord) error {
	op := "begin session " + s.SessionID
	var other string
	if err := db.reads.QueryRowContext(ctx, `SELECT session_id FROM sessions WHERE agent = ? AND seq = ? LIMIT 1`,
		s.Agent, int64(s.Seq)).Scan(&other); err != nil {
		return db.Wrap(op, err)
	}
	if other != s.SessionID {
		return fmt.Errorf("%w: seq %d of %s is session %s", ErrSeqTaken, s.Seq, s.Agent, other)
	}
	return nil
}

// settleSQL records an ended session's end on its row, begun before it
// started, unless it was settled already: the one statement of a session's
// settlement in the usual case, prepared once (PrepareSettle).
const settleSQL = `UPDATE sessions SET ended_at = ?, outcome = ?, exit_code = ?, signal = ?, abort_reason = ?, reason = ?,
	duration_ms = ?, head_before = CASE WHEN ? = '' THEN head_before ELSE ? END, head_after = ?,
	log_path = CASE WHEN ? = '' THEN log_path ELSE ? END, tokens_in = ?, tokens_out = ?, cost_usd = ?, tool_calls = ?,
	result_text = ?, commits = ?, cpu_ms = ?, task_id = ?, settled_at = ?
WHERE session_id = ? AND settled_at IS NULL`

// settleArgs are settleSQL's arguments: s's end, settled at at.
func settleArgs(s SessionRecord, at time.Time) []any {
	return []any{endedAt(s), s.Outcome, s.ExitCode, s.Signal, s.AbortReason, s.Reason, s.Duration.Milliseconds(),
		s.HeadBefore, s.HeadBefore, s.HeadAfter, s.LogPath, s.LogPath,
		nullZero(s.TokensIn), nullZero(s.TokensOut), nullZero(s.CostUSD), nullZero(s.ToolCalls), s.ResultText, s.Commits,
		nullZero(s.CPU.Milliseconds()), nullZero(s.Task), FormatTime(at), s.SessionID}
}

// PrepareSettle prepares the statements of SettleSessionTx and
// BeginSessionTx; call it outside a transaction (the write pool's one
// connection is the transaction's).
func (db *DB) PrepareSettle(ctx context.Context) {
	db.writes.stmt(ctx, settleSQL)
	db.writes.stmt(ctx, beginSQL)
}

// SettleSessionTx records s's end in tx and marks the session settled at
// at. already reports that the session was settled before (by an earlier
// attempt whose commit the caller did not see, or by restart recovery):
// nothing is written then, and the caller must apply nothing else.
func (db *DB) SettleSessionTx(ctx context.Context, tx *sql.Tx, s SessionRecord, at time.Time) (already bool, err error) {
	settled, err := db.SettleSessionHeld(ctx, tx, s, at)
	if err != nil {
		return false, err
	}
	return settled()
}

// SettleSessionHeld is SettleSessionTx with its write held back: on
// PostgreSQL it goes to the server with tx's next statement, so that a read
// the caller makes next (the session's task) shares its round trip, under
// the swarm's lock. already, called before anything else is written in tx,
// answers as SettleSessionTx does; with nothing sent since, it sends the
// write itself.
func (db *DB) SettleSessionHeld(ctx context.Context, tx *sql.Tx, s SessionRecord, at time.Time) (already func() (bool, error), err error) {
	op := "settle session " + s.SessionID
	if err := db.FenceTx(ctx, tx, s.Agent); err != nil {
		return nil, db.Wrap(op, err)
	}
	args := settleArgs(s, at)
	var res sql.Result
	if st := db.writes.cachedStmt(settleSQL); st != nil {
		res, err = tx.StmtContext(ctx, st).ExecContext(Deferred(ctx), args...)
	} else {
		res, err = tx.ExecContext(Deferred(ctx), settleSQL, args...)
	}
	if err != nil {
		return nil, db.Wrap(op, err)
	}
	return func() (bool, error) {
		// Still in tx, whose connection this is: the Result's count costs
		// nothing once the write went, and sends it if it has not.
		n, err := res.RowsAffected()
		if err != nil || n == 1 {
			return false, db.wrapNil(op, err)
		}
		return db.settledBefore(ctx, tx, s, at)
	}, nil
}

// SettleUnstartedTx records in tx the end of s, a session whose process
// never started, on its row if a begin made it and nothing settled it
// since: at most once, however often it is applied. Unlike SettleSessionTx
// it makes no row: a begin given up after an attempt whose commit's answer
// was lost may have made one or not, and a row made now would hold a seq
// that no session used. It is not fenced, as the return of the session's
// claims it goes with is not (package settle): it ends only this session's
// own row while it is open, and a daemon that takes the agent's lease
// closes it as orphaned if it still is.
func (db *DB) SettleUnstartedTx(ctx context.Context, tx *sql.Tx, s SessionRecord, at time.Time) error {
	if _, err := tx.ExecContext(ctx, settleSQL, settleArgs(s, at)...); err != nil {
		return db.Wrap("settle session "+s.SessionID, err)
	}
	return nil
}

// settledBefore is SettleSessionTx's answer when its UPDATE found no
// unsettled row: settled already, or never begun (a row the start could
// not write, inserted now).
func (db *DB) settledBefore(ctx context.Context, tx *sql.Tx, s SessionRecord, at time.Time) (bool, error) {
	op := "settle session " + s.SessionID
	var settled sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT settled_at FROM sessions WHERE session_id = ?`, s.SessionID).Scan(&settled)
	switch {
	case err == nil:
		return settled.Valid, nil
	case !errors.Is(err, sql.ErrNoRows):
		return false, db.Wrap(op, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO sessions (session_id, agent, seq, started_at, ended_at, outcome, exit_code, signal,
	abort_reason, reason, duration_ms, head_before, head_after, log_path, tokens_in, tokens_out, cost_usd, tool_calls,
	result_text, commits, cpu_ms, task_id, settled_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.SessionID, s.Agent, int64(s.Seq), FormatTime(s.Started), endedAt(s),
		s.Outcome, s.ExitCode, s.Signal, s.AbortReason, s.Reason, s.Duration.Milliseconds(),
		s.HeadBefore, s.HeadAfter, s.LogPath,
		nullZero(s.TokensIn), nullZero(s.TokensOut), nullZero(s.CostUSD), nullZero(s.ToolCalls), s.ResultText, s.Commits,
		nullZero(s.CPU.Milliseconds()), nullZero(s.Task), FormatTime(at))
	if err != nil {
		return false, db.Wrap(op, err)
	}
	return false, nil
}

// EventSettledInPart is the event of a session settled without the rest
// of its outcome (its task report, its review verdict), which the store
// refused for good; its reason says why (package settle).
const EventSettledInPart = "SettledInPart"

// EventTx records e in the event log in tx, held back (Deferred): on
// PostgreSQL it goes to the server with tx's next statement or its commit.
func (db *DB) EventTx(ctx context.Context, tx *sql.Tx, e EventRecord) error {
	if _, err := tx.ExecContext(Deferred(ctx), insertEventSQL, appendEventArgs(nil, &e)...); err != nil {
		return db.Wrap("record event "+e.Event, err)
	}
	return nil
}

func (db *DB) wrapNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return db.Wrap(op, err)
}

// UnsettledSessions are the sessions of agents (every agent's when nil)
// that started and were never settled: at daemon start, before any agent
// runs, those a killed daemon left. By agent and seq.
func (db *DB) UnsettledSessions(ctx context.Context, agents []string) ([]SessionRecord, error) {
	scope, args := AndIn("agent", agents)
	ss, err := querySessions(ctx, db.reads, `SELECT `+sessionCols+` FROM sessions WHERE settled_at IS NULL`+scope, args...)
	if err != nil {
		return nil, db.Wrap("unsettled sessions", err)
	}
	sortSessions(ss)
	return ss, nil
}

// Transient reports whether err is the store being slow or away rather
// than refusing the request: a lock held by another client (SQLite's
// busy or locked, PostgreSQL's lock and serialization conflicts), a lost
// connection or a server restarting, a full disk, a lease this daemon lost
// (ErrFenced). Retrying the same write
// later can succeed; a caller that must not drop it waits and retries.
// It needs no open store (each engine's errors are types of its own), so
// it also judges Open's errors: a server down or starting up, a file
// another process holds locked while it migrates.
func Transient(err error) bool {
	if err == nil || errors.Is(err, ErrDatabaseGone) || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, ErrDiskFull) {
		return true
	}
	for _, drv := range engines {
		if drv.busy(err) || drv.classify(err) == ErrDiskFull {
			return true
		}
	}
	// A write fenced by a lease this daemon lost: it waits (shown) until
	// the lease is free and taken back, never counted as the agent's error.
	if errors.Is(err, ErrFenced) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	return Unreachable(err)
}

// EngineFault reports whether err is the database engine failing rather
// than refusing what was written: an I/O error, memory exhausted, a file
// it cannot open, a corrupt page (SQLite); an I/O or internal error, a
// statement whose completion is unknown (PostgreSQL). Not Transient (a
// retry need not cure it), and not a refusal of the data either: a write
// that failed so may pass once the engine is whole, so a caller that
// would give up part of what it writes for a refusal for good must not
// for one of these.
func EngineFault(err error) bool {
	for _, drv := range engines {
		if drv.fault(err) {
			return true
		}
	}
	return false
}

// engines are the drivers, each of which knows its own engine's errors.
var engines = []driver{sqliteDriver{}, &pgDriver{}}

// Transient is the package's Transient, for the callers that ask it of
// the store they write to (settle's and the runner's interfaces).
func (db *DB) Transient(err error) bool { return Transient(err) }

// InDoubt reports whether err, from a write, leaves unknown whether the
// write committed: its connection to the server was lost once the write
// may have been sent (a COMMIT the server completed, whose answer never
// came). A lock the store was busy with, or a connection refused before
// anything was sent, leaves no doubt: nothing was written.
func InDoubt(err error) bool {
	if err == nil || pgconn.SafeToRetry(err) {
		return false
	}
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, sqldriver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.As(err, &ne)
}

// Unreachable reports whether err says the store's server could not be
// reached or is not taking work now (refused or cut connections, a
// restart, too many clients, out of memory, timeouts): another try later
// can succeed.
// It is Transient's part about the server (Transient adds locks held, a
// full disk, a connection lost mid-answer and ErrFenced); a wrong
// address's name, password or schema are in neither.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// connection_exception, admin/crash shutdown, cannot_connect_now,
		// too_many_connections, insufficient_resources and out_of_memory
		// (also "out of shared memory": the lock table full while other
		// transactions hold many locks), lock and query timeouts, and the
		// server's idle timeouts (a client paused inside a transaction, or
		// between them): the server rolled the transaction back, so it can
		// run again
		switch {
		case len(pe.Code) == 5 && pe.Code[:2] == "08",
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300", pe.Code == "53000", pe.Code == "53200",
			pe.Code == "55P03", pe.Code == "57014", pe.Code == "25P03", pe.Code == "57P05":
			return true
		}
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}
