package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
)

// Event names of pauses in the event log. A pause is held beside the
// state machine, so these are not transitions: from and to are the state
// the agent was in.
const (
	EventPaused  = "Paused"
	EventResumed = "Resumed"
)

// PauseRecord is an agent's pause (swarmd pause).
type PauseRecord struct {
	Agent  string
	Actor  string // operator, agent:NAME, daemon
	Reason string
	Freeze bool // --now: the running session was frozen
	Since  time.Time
}

// SetPause stores p, replacing the agent's pause, and records e in the
// event log, in one transaction: once it returns, the pause survives a
// crash. While a Journal runs, use Journal.SetPause.
func (db *DB) SetPause(ctx context.Context, p PauseRecord, e EventRecord) error {
	if !agent.ValidName(p.Agent) {
		return fmt.Errorf("store: pause: %w", Invalid("agent", ErrInvalidName, "%q is not a valid agent name", p.Agent))
	}
	return db.InTx(ctx, "pause "+p.Agent, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO pauses (agent, actor, reason, "freeze", since) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (agent) DO UPDATE SET actor = excluded.actor, reason = excluded.reason,
			"freeze" = CASE WHEN excluded."freeze" > pauses."freeze" THEN excluded."freeze" ELSE pauses."freeze" END`,
			p.Agent, p.Actor, p.Reason, boolInt(p.Freeze), FormatTime(p.Since)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, insertEventSQL, appendEventArgs(nil, &e)...)
		return err
	})
}

// ClearPause deletes the agent's pause and, if it had one, records e in the
// event log, in one transaction. It returns the pause it deleted. While a
// Journal runs, use Journal.ClearPause.
func (db *DB) ClearPause(ctx context.Context, agent string, e EventRecord) (PauseRecord, bool, error) {
	var p PauseRecord
	found := false
	err := db.InTx(ctx, "resume "+agent, func(tx *sql.Tx) error {
		var err error
		p, err = scanPause(tx.QueryRowContext(ctx, `DELETE FROM pauses WHERE agent = ? RETURNING `+pauseCols, agent))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		_, err = tx.ExecContext(ctx, insertEventSQL, appendEventArgs(nil, &e)...)
		return err
	})
	return p, found, err
}

// Pauses returns every paused agent's pause, by name.
func (db *DB) Pauses(ctx context.Context) (map[string]PauseRecord, error) {
	ps, err := QueryAll(ctx, db.reads, scanPause, `SELECT `+pauseCols+` FROM pauses`)
	if err != nil {
		return nil, db.Wrap("pauses", err)
	}
	out := make(map[string]PauseRecord, len(ps))
	for _, p := range ps {
		out[p.Agent] = p
	}
	return out, nil
}

// SetPause is DB.SetPause ordered after everything the journal holds, so
// that the pause's event follows the transitions before it.
func (j *Journal) SetPause(ctx context.Context, p PauseRecord, e EventRecord) error {
	if err := j.acquire(ctx); err != nil {
		return fmt.Errorf("store: pause %s: %w", p.Agent, err)
	}
	defer j.release()
	if err := j.writeLocked(ctx); err != nil {
		return err
	}
	return j.db.SetPause(ctx, p, e)
}

// ClearPause is DB.ClearPause ordered after everything the journal holds.
func (j *Journal) ClearPause(ctx context.Context, agent string, e EventRecord) (PauseRecord, bool, error) {
	if err := j.acquire(ctx); err != nil {
		return PauseRecord{}, false, fmt.Errorf("store: resume %s: %w", agent, err)
	}
	defer j.release()
	if err := j.writeLocked(ctx); err != nil {
		return PauseRecord{}, false, err
	}
	return j.db.ClearPause(ctx, agent, e)
}

const pauseCols = `agent, actor, reason, "freeze", since` // freeze is reserved in PostgreSQL

func scanPause(s Scanner) (PauseRecord, error) {
	var (
		p      PauseRecord
		freeze int64
		since  string
	)
	if err := s.Scan(&p.Agent, &p.Actor, &p.Reason, &freeze, &since); err != nil {
		return PauseRecord{}, err
	}
	p.Freeze = freeze != 0
	var err error
	if p.Since, err = time.Parse(TimeLayout, since); err != nil {
		return PauseRecord{}, fmt.Errorf("pause of %s: since: %w", p.Agent, err)
	}
	return p, nil
}

// Statuses of ToolCallRecord.
const (
	ToolOK         = "ok"
	ToolError      = "error"      // the tool reported an error (a shell command's non-zero exit)
	ToolUnfinished = "unfinished" // the session ended during the call
)

// ToolCallRecord is one tool call of one session (swarmd audit).
type ToolCallRecord struct {
	ID        int64 // assigned when written; ignored by Journal.ToolCall
	SessionID string
	Agent     string
	Seq       uint32
	CallID    string // the backend's id of the call
	Tool      string
	Input     string // a bounded summary: the command, the file
	Started   time.Time
	Ended     bool          // false for an unfinished call
	Duration  time.Duration // stored in milliseconds; valid when Ended
	Status    string        // one of the Tool* statuses
}

// ToolCallQuery selects tool calls, in id order (the order they ended).
type ToolCallQuery struct {
	Agent     string // "" for every agent
	SessionID string // "" for every session
	Tool      string // "" for every tool
	AfterID   int64  // only calls with a larger id: a follower's watermark
	Last      int    // only the newest Last of those (0: all)
}

// ToolCalls returns the tool calls q selects, in id order.
func (db *DB) ToolCalls(ctx context.Context, q ToolCallQuery) ([]ToolCallRecord, error) {
	var (
		where strings.Builder
		args  []any
	)
	where.WriteString(`id > ?`)
	args = append(args, q.AfterID)
	for _, f := range []struct{ col, val string }{{"agent", q.Agent}, {"session_id", q.SessionID}, {"tool", q.Tool}} {
		if f.val != "" {
			where.WriteString(` AND ` + f.col + ` = ?`)
			args = append(args, f.val)
		}
	}
	limit := noLimit
	if q.Last > 0 {
		limit = q.Last
	}
	args = append(args, limit)
	out, err := QueryAll(ctx, db.reads, scanToolCall, `SELECT id, session_id, agent, seq, call_id, tool, input,
		started_at, duration_ms, status FROM tool_calls WHERE `+where.String()+` ORDER BY id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, db.Wrap("tool calls", err)
	}
	slices.Reverse(out)
	return out, nil
}

func scanToolCall(s Scanner) (ToolCallRecord, error) {
	var (
		c       ToolCallRecord
		seq     int64
		started string
		dur     sql.NullInt64
	)
	if err := s.Scan(&c.ID, &c.SessionID, &c.Agent, &seq, &c.CallID, &c.Tool, &c.Input, &started, &dur, &c.Status); err != nil {
		return ToolCallRecord{}, err
	}
	c.Seq, c.Ended, c.Duration = uint32(seq), dur.Valid, time.Duration(dur.Int64)*time.Millisecond
	var err error
	if c.Started, err = time.Parse(TimeLayout, started); err != nil {
		return ToolCallRecord{}, fmt.Errorf("tool call %d: started_at: %w", c.ID, err)
	}
	return c, nil
}

// inTx runs f in a write transaction, wrapping its error with op.

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
