package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
)

// Stop kinds of AgentRecord.StopKind. An operator stop (including the
// OperatorStop every agent gets when the daemon shuts down) does not survive
// a restart; a fatal one does, until `swarmd start AGENT`.
const (
	StopOperator = "operator"
	StopFatal    = "fatal" // error thresholds or FatalError
)

// Session outcomes of SessionRecord.Outcome.
const (
	OutcomeSuccess     = "success"
	OutcomeError       = "error"
	OutcomeTimeout     = "timeout"
	OutcomeInterrupted = "interrupted" // urgent mail interrupted it; not an error
	OutcomeOrphaned    = "orphaned"    // the daemon died while the session ran
)

// EventOperatorStart is the event ResetAgent records.
const EventOperatorStart = "OperatorStart"

// EventRecord is one transition of one agent. Times are stored UTC with
// microsecond precision.
type EventRecord struct {
	ID        int64 // assigned when written; ignored by Journal.Event
	At        time.Time
	Agent     string
	From      string
	Event     string
	To        string
	Effect    string
	Actor     string // runner, router, operator, daemon, hook
	Reason    string
	SessionID string
	Seq       uint32
	TaskID    int64 // a task's transition (From and To are task states); 0 for an agent's
	// AbortReason is, on a task's transition, seed 004's classification of
	// the abnormal agent end that caused it ("" none); read, never written
	// by Journal.Event (the board writes a task's events).
	AbortReason string
}

// AgentRecord is the latest known state of one agent.
type AgentRecord struct {
	Name              string
	State             string
	Seq               uint32 // session sequence counter
	ConsecutiveErrors uint32
	TotalErrors       uint32
	StopKind          string // "", StopOperator or StopFatal
	StopReason        string
	UpdatedAt         time.Time
}

// Resumable says whether restart recovery runs the agent again: everything
// but a fatal stop, which waits for `swarmd start AGENT` (ResetAgent).
func (a AgentRecord) Resumable() bool { return a.StopKind != StopFatal }

// SessionRecord is one backend session. Zero token, cost and tool-call
// figures are stored as NULL: most backends that report nothing report zero.
type SessionRecord struct {
	SessionID   string
	Agent       string
	Seq         uint32
	Started     time.Time
	Ended       *time.Time // nil: running, or left open by a killed daemon
	Outcome     string     // "" or one of the Outcome constants
	ExitCode    int
	Signal      string
	AbortReason string
	Reason      string
	Duration    time.Duration // stored in milliseconds
	HeadBefore  string
	HeadAfter   string
	LogPath     string
	TokensIn    int64
	TokensOut   int64
	CostUSD     float64
	ToolCalls   int
	ResultText  string // the backend's final result, an excerpt
	Commits     int    // commits the session made on its branch
	// CPU is the whole process tree's CPU time, from its cgroup (0: it had
	// none); stored in milliseconds.
	CPU time.Duration
	// Task is the task the session worked on or reviewed (0: none).
	Task int64
}

// EventQuery selects events, in id order.
type EventQuery struct {
	Agent   string // "" for every agent
	TaskID  int64  // only this task's transitions; 0 for all events
	AfterID int64  // only events with a larger id: a reader's watermark
	Limit   int    // 0 for all
}

const (
	eventCols   = `id, at, agent, from_state, event, to_state, effect, actor, reason, session_id, seq, IFNULL(task_id, 0), abort_reason`
	agentCols   = `name, state, session_seq, consecutive_errors, total_errors, stop_kind, stop_reason, updated_at`
	sessionCols = `session_id, agent, seq, started_at, ended_at, outcome, exit_code, signal, abort_reason, reason,
		duration_ms, head_before, head_after, log_path, tokens_in, tokens_out, cost_usd, tool_calls, result_text, commits, cpu_ms`
)

// Agents returns every agent's latest recorded state, by name.
func (db *DB) Agents(ctx context.Context) (map[string]AgentRecord, error) {
	as, err := QueryAll(ctx, db.reads, scanAgent, `SELECT `+agentCols+` FROM agents`)
	if err != nil {
		return nil, db.Wrap("agents", err)
	}
	out := make(map[string]AgentRecord, len(as))
	for _, a := range as {
		out[a.Name] = a
	}
	return out, nil
}

// Events returns the events q selects, in id order, which is the order the
// daemon applied them.
func (db *DB) Events(ctx context.Context, q EventQuery) ([]EventRecord, error) {
	var (
		where strings.Builder
		args  []any
	)
	where.WriteString(`id > ?`)
	args = append(args, q.AfterID)
	if q.Agent != "" {
		where.WriteString(` AND agent = ?`)
		args = append(args, q.Agent)
	}
	if q.TaskID != 0 {
		where.WriteString(` AND task_id = ?`)
		args = append(args, q.TaskID)
	}
	limit := noLimit
	if q.Limit > 0 {
		limit = q.Limit
	}
	// The limit is written into the text, not bound: SQLite plans by a
	// bound LIMIT's value, so binding it expires the prepared statement and
	// every run (the dashboards' hub reads events after each commit) would
	// parse it again. Callers use a few fixed limits.
	out, err := QueryAll(ctx, db.reads, scanEvent,
		`SELECT `+eventCols+` FROM events WHERE `+where.String()+` ORDER BY id LIMIT `+strconv.Itoa(limit), args...)
	if err != nil {
		return nil, db.Wrap("events", err)
	}
	return out, nil
}

// sessionsNewestSQL is every agent's last sessions, read backwards along
// sessions_started to the limit, not every session ever sorted.
const sessionsNewestSQL = `SELECT ` + sessionCols + ` FROM sessions ORDER BY started_at DESC, seq DESC LIMIT ?`

// Sessions returns agent's sessions newest first (every agent's, by start
// time, if agent is ""), at most limit of them (0: all).
func (db *DB) Sessions(ctx context.Context, agent string, limit int) ([]SessionRecord, error) {
	if limit <= 0 {
		limit = noLimit
	}
	q := `SELECT ` + sessionCols + ` FROM sessions WHERE agent = ? ORDER BY seq DESC LIMIT ?`
	args := []any{agent, limit}
	if agent == "" {
		q = sessionsNewestSQL
		args = args[1:]
	}
	ss, err := querySessions(ctx, db.reads, q, args...)
	if err != nil {
		return nil, db.Wrap("sessions", err)
	}
	return ss, nil
}

// Spend is what one agent's recorded sessions used, summed over the
// sessions table (every session since the database was created).
type Spend struct {
	Agent     string
	Sessions  int
	TokensIn  int64
	TokensOut int64
	CostUSD   float64
	Commits   int
}

// Spend returns every agent's spend, by name; an agent without sessions has
// none. It reads each agent's settled prefix as saved last and the
// sessions after it (SpendTally), not every session ever recorded.
func (db *DB) Spend(ctx context.Context) (map[string]Spend, error) {
	return new(SpendTally).Spend(ctx, db)
}

// spendSum is Spend summed over every session: what the tally must give.
func (db *DB) spendSum(ctx context.Context) (map[string]Spend, error) {
	sp, err := QueryAll(ctx, db.reads, func(s Scanner) (Spend, error) {
		var v Spend
		err := s.Scan(&v.Agent, &v.Sessions, &v.TokensIn, &v.TokensOut, &v.CostUSD, &v.Commits)
		return v, err
	}, `SELECT agent, COUNT(*), IFNULL(SUM(tokens_in), 0), IFNULL(SUM(tokens_out), 0),
		IFNULL(SUM(cost_usd), 0.0), IFNULL(SUM(commits), 0) FROM sessions GROUP BY agent`)
	if err != nil {
		return nil, db.Wrap("spend", err)
	}
	out := make(map[string]Spend, len(sp))
	for _, v := range sp {
		out[v.Agent] = v
	}
	return out, nil
}

// MaxSeq is the highest sequence number of a session recorded for agent,
// or 0, or the agent's seq floor when higher (a restored store's:
// SetSeqFloor). A restarted runner continues after it. The agent row's
// session_seq is not consulted: it is the runner's counter, which may name
// a session that never started (the next one, after a success), and
// counting it would skip a seq at every restart.
func (db *DB) MaxSeq(ctx context.Context, agent string) (uint32, error) {
	var seq int64
	err := db.reads.QueryRowContext(ctx, maxSeqSQL, agent, seqFloorKey(agent)).Scan(&seq)
	if err != nil {
		return 0, db.Wrap("max seq", err)
	}
	return uint32(seq), nil
}

// maxSeqSQL is MaxSeq's read: the sessions' highest seq (the primary key's
// last entry for the agent) and the floor's setting, if any.
const maxSeqSQL = `SELECT MAX(s) FROM (
	SELECT IFNULL(MAX(seq), 0) AS s FROM sessions WHERE agent = ?
	UNION ALL SELECT CAST(value AS INTEGER) FROM settings WHERE key = ?) AS seqs`

// CloseOrphanSessions ends every session of agents (every agent's when
// nil: a store no other daemon shares) that has no end, as OutcomeOrphaned
// at now, and returns them by agent and seq. Only a daemon
// killed while sessions ran leaves such rows, so call it at daemon start,
// before any agent runs; the caller logs them and records events. The mail
// their prompts carried stays pending, noted as cut off by the crash.
func (db *DB) CloseOrphanSessions(ctx context.Context, now time.Time, agents []string) ([]SessionRecord, error) {
	var ss []SessionRecord
	err := db.InTx(ctx, "close orphan sessions", func(tx *sql.Tx) error {
		var err error
		ss, err = CloseOrphanSessionsTx(ctx, tx, now, agents)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ss, nil
}

// CloseOrphanSessionsTx is CloseOrphanSessions in tx.
func CloseOrphanSessionsTx(ctx context.Context, tx *sql.Tx, now time.Time, agents []string) ([]SessionRecord, error) {
	scope, args := AndIn("agent", agents)
	ss, err := querySessions(ctx, tx, `UPDATE sessions SET ended_at = ?, outcome = ?, reason = ?, settled_at = ?
		WHERE ended_at IS NULL`+scope+` RETURNING `+sessionCols,
		append([]any{FormatTime(now), OutcomeOrphaned, "swarmd exited while the session ran", FormatTime(now)}, args...)...)
	if err != nil {
		return nil, err
	}
	for _, s := range ss {
		if _, err := tx.ExecContext(ctx, `UPDATE messages SET shown_note = ?
			WHERE claimed_session = ? AND delivered_at IS NULL`, NoteCrash, s.SessionID); err != nil {
			return nil, err
		}
	}
	sortSessions(ss)
	return ss, nil
}

// NoteCrash is the ShownNote of mail whose session a daemon crash cut off.
const NoteCrash = "the session was cut off when swarmd stopped unexpectedly"

// ResetAgent is `swarmd start AGENT`: it zeroes the agent's error counters
// and clears its stop, so restart recovery runs it again, and records an
// EventOperatorStart event by actor (StopOperator if empty) with what it
// cleared, in the same transaction. An agent with no row gets only the
// event. While a Journal is running, use Journal.ResetAgent, which orders
// the reset after the agent rows the journal holds.
func (db *DB) ResetAgent(ctx context.Context, name string, now time.Time, actor string) error {
	if !agent.ValidName(name) {
		return fmt.Errorf("store: reset agent: %w", Invalid("agent", ErrInvalidName, "%q is not a valid agent name", name))
	}
	if actor == "" {
		actor = StopOperator
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return db.Wrap("reset agent "+name, err)
	}
	defer tx.Rollback()
	cur, err := scanAgent(tx.QueryRowContext(ctx, `SELECT `+agentCols+` FROM agents WHERE name = ?`, name))
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return db.Wrap("reset agent "+name, err)
	}
	reason := "no recorded state"
	if found {
		reason = fmt.Sprintf("reset error counters (consecutive %d, total %d)", cur.ConsecutiveErrors, cur.TotalErrors)
		if cur.StopKind != "" {
			reason += fmt.Sprintf("; cleared %s stop: %s", cur.StopKind, cur.StopReason)
		}
	}
	// The event first: on PostgreSQL it takes the appenders' turn, which a
	// journal holding it may keep while it writes this agent's row. Taken
	// before the row's lock, the turn is waited for holding nothing the
	// journal waits for.
	if _, err := tx.ExecContext(ctx, insertEventSQL, FormatTime(now), name, cur.State, EventOperatorStart,
		cur.State, "", actor, reason, "", int64(cur.Seq)); err != nil {
		return db.Wrap("reset agent "+name, err)
	}
	if found {
		if _, err := tx.ExecContext(ctx, `UPDATE agents SET consecutive_errors = 0, total_errors = 0,
			stop_kind = '', stop_reason = '', updated_at = ? WHERE name = ?`, FormatTime(now), name); err != nil {
			return db.Wrap("reset agent "+name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return db.Wrap("reset agent "+name, err)
	}
	return nil
}

func scanEvent(s Scanner) (EventRecord, error) {
	var (
		e   EventRecord
		at  string
		seq int64
	)
	if err := s.Scan(&e.ID, &at, &e.Agent, &e.From, &e.Event, &e.To, &e.Effect, &e.Actor,
		&e.Reason, &e.SessionID, &seq, &e.TaskID, &e.AbortReason); err != nil {
		return EventRecord{}, err
	}
	e.Seq = uint32(seq)
	var err error
	if e.At, err = time.Parse(TimeLayout, at); err != nil {
		return EventRecord{}, fmt.Errorf("event %d: at: %w", e.ID, err)
	}
	return e, nil
}

func scanAgent(s Scanner) (AgentRecord, error) {
	var (
		a                AgentRecord
		seq, cons, total int64
		updated          string
	)
	if err := s.Scan(&a.Name, &a.State, &seq, &cons, &total, &a.StopKind, &a.StopReason, &updated); err != nil {
		return AgentRecord{}, err
	}
	a.Seq, a.ConsecutiveErrors, a.TotalErrors = uint32(seq), uint32(cons), uint32(total)
	var err error
	if a.UpdatedAt, err = time.Parse(TimeLayout, updated); err != nil {
		return AgentRecord{}, fmt.Errorf("agent %s: updated_at: %w", a.Name, err)
	}
	return a, nil
}

func scanSession(s Scanner) (SessionRecord, error) {
	var (
		r                              SessionRecord
		seq, durMS                     int64
		started                        string
		ended                          sql.NullString
		tokensIn, tokensOut, toolCalls sql.NullInt64
		cost                           sql.NullFloat64
		cpuMS                          sql.NullInt64
	)
	if err := s.Scan(&r.SessionID, &r.Agent, &seq, &started, &ended, &r.Outcome, &r.ExitCode, &r.Signal,
		&r.AbortReason, &r.Reason, &durMS, &r.HeadBefore, &r.HeadAfter, &r.LogPath,
		&tokensIn, &tokensOut, &cost, &toolCalls, &r.ResultText, &r.Commits, &cpuMS); err != nil {
		return SessionRecord{}, err
	}
	r.CPU = time.Duration(cpuMS.Int64) * time.Millisecond
	r.Seq, r.Duration = uint32(seq), time.Duration(durMS)*time.Millisecond
	r.TokensIn, r.TokensOut, r.CostUSD, r.ToolCalls = tokensIn.Int64, tokensOut.Int64, cost.Float64, int(toolCalls.Int64)
	var err error
	if r.Started, err = time.Parse(TimeLayout, started); err != nil {
		return SessionRecord{}, fmt.Errorf("session %s: started_at: %w", r.SessionID, err)
	}
	if r.Ended, err = ParseNullTime(ended); err != nil {
		return SessionRecord{}, fmt.Errorf("session %s: ended_at: %w", r.SessionID, err)
	}
	return r, nil
}

func querySessions(ctx context.Context, q Querier, query string, args ...any) ([]SessionRecord, error) {
	return QueryAll(ctx, q, scanSession, query, args...)
}

// nullZero stores a figure the backend did not report (zero) as NULL.
func nullZero[T int | int64 | float64](v T) any {
	if v == 0 {
		return nil
	}
	return v
}

func sortSessions(ss []SessionRecord) {
	slices.SortFunc(ss, func(a, b SessionRecord) int {
		return cmp.Or(cmp.Compare(a.Agent, b.Agent), cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.SessionID, b.SessionID))
	})
}
