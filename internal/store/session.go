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

// BeginSession records that session s (SessionID, Agent, Seq, Started,
// HeadBefore, LogPath) is about to start, committed before it returns. A
// row for the same session id is left as it is; another session of the
// agent with the same seq is ErrSeqTaken.
func (db *DB) BeginSession(ctx context.Context, s SessionRecord) error {
	if s.SessionID == "" || s.Agent == "" || s.Seq == 0 {
		return fmt.Errorf("store: begin session: %w", Invalid("session", ErrInvalidName, "a session needs an id, an agent and a seq"))
	}
	return db.InTx(ctx, "begin session "+s.SessionID, func(tx *sql.Tx) error {
		var other string
		err := tx.QueryRowContext(ctx, `SELECT session_id FROM sessions WHERE agent = ? AND seq = ? LIMIT 1`,
			s.Agent, int64(s.Seq)).Scan(&other)
		switch {
		case err == nil && other != s.SessionID:
			return fmt.Errorf("%w: seq %d of %s is session %s", ErrSeqTaken, s.Seq, s.Agent, other)
		case err == nil:
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO sessions (session_id, agent, seq, started_at, head_before, log_path)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING`,
			s.SessionID, s.Agent, int64(s.Seq), FormatTime(s.Started), s.HeadBefore, s.LogPath)
		return err
	})
}

// SettleSessionTx records s's end in tx and marks the session settled at
// at. already reports that the session was settled before (by an earlier
// attempt whose commit the caller did not see, or by restart recovery):
// nothing is written then, and the caller must apply nothing else.
func (db *DB) SettleSessionTx(ctx context.Context, tx *sql.Tx, s SessionRecord, at time.Time) (already bool, err error) {
	var settled sql.NullString
	err = tx.QueryRowContext(ctx, `SELECT settled_at FROM sessions WHERE session_id = ?`, s.SessionID).Scan(&settled)
	switch {
	case err == nil && settled.Valid:
		return true, nil
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return false, db.Wrap("settle session "+s.SessionID, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO sessions (session_id, agent, seq, started_at, ended_at, outcome, exit_code, signal,
	abort_reason, reason, duration_ms, head_before, head_after, log_path, tokens_in, tokens_out, cost_usd, tool_calls,
	result_text, commits, settled_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (session_id) DO UPDATE SET ended_at = excluded.ended_at, outcome = excluded.outcome,
	exit_code = excluded.exit_code, signal = excluded.signal, abort_reason = excluded.abort_reason,
	reason = excluded.reason, duration_ms = excluded.duration_ms,
	head_before = CASE WHEN excluded.head_before = '' THEN sessions.head_before ELSE excluded.head_before END,
	head_after = excluded.head_after,
	log_path = CASE WHEN excluded.log_path = '' THEN sessions.log_path ELSE excluded.log_path END,
	tokens_in = excluded.tokens_in, tokens_out = excluded.tokens_out,
	cost_usd = excluded.cost_usd, tool_calls = excluded.tool_calls, result_text = excluded.result_text,
	commits = excluded.commits, settled_at = excluded.settled_at`,
		s.SessionID, s.Agent, int64(s.Seq), FormatTime(s.Started), endedAt(s),
		s.Outcome, s.ExitCode, s.Signal, s.AbortReason, s.Reason, s.Duration.Milliseconds(),
		s.HeadBefore, s.HeadAfter, s.LogPath,
		nullZero(s.TokensIn), nullZero(s.TokensOut), nullZero(s.CostUSD), nullZero(s.ToolCalls), s.ResultText, s.Commits,
		FormatTime(at))
	if err != nil {
		return false, db.Wrap("settle session "+s.SessionID, err)
	}
	return false, nil
}

// Session returns session id's row; ok is false when there is none.
func (db *DB) Session(ctx context.Context, id string) (s SessionRecord, settled, ok bool, err error) {
	ss, err := querySessions(ctx, db.reads, `SELECT `+sessionCols+` FROM sessions WHERE session_id = ?`, id)
	if err != nil || len(ss) == 0 {
		return SessionRecord{}, false, false, db.wrapNil("session "+id, err)
	}
	var at sql.NullString
	if err := db.reads.QueryRowContext(ctx, `SELECT settled_at FROM sessions WHERE session_id = ?`, id).Scan(&at); err != nil {
		return SessionRecord{}, false, false, db.Wrap("session "+id, err)
	}
	return ss[0], at.Valid, true, nil
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
// connection or a server restarting, a full disk. Retrying the same write
// later can succeed; a caller that must not drop it waits and retries.
func (db *DB) Transient(err error) bool {
	if err == nil || errors.Is(err, ErrDatabaseGone) || errors.Is(err, context.Canceled) {
		return false
	}
	if db.drv.busy(err) || errors.Is(err, ErrDiskFull) || db.drv.classify(err) == ErrDiskFull {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// connection_exception, admin/crash shutdown, cannot_connect_now,
		// too_many_connections, lock and query timeouts
		switch {
		case len(pe.Code) == 5 && pe.Code[:2] == "08",
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300",
			pe.Code == "55P03", pe.Code == "57014":
			return true
		}
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}
