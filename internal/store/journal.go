package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Journal defaults.
const (
	DefaultFlushInterval = 20 * time.Millisecond
	DefaultMaxBatch      = 1000
	// DefaultMaxQueued bounds the records waiting in memory while the
	// database refuses writes: about 30 MB of events at their usual size.
	DefaultMaxQueued = 100_000
)

// maxRetryBackoff caps the wait between attempts at a failing batch.
const maxRetryBackoff = time.Second

// JournalOptions configure NewJournal.
type JournalOptions struct {
	// FlushInterval is how long the writer gathers records after the first
	// one arrives before committing them. Zero means DefaultFlushInterval.
	FlushInterval time.Duration
	// MaxBatch bounds the records in one transaction, so that a burst does
	// not hold the write lock that ConsumeForPrompt and `swarmd mail` wait
	// on; a full batch is written at once. Zero means DefaultMaxBatch.
	MaxBatch int
	// OnError hears of every failed batch (the writer keeps the records and
	// retries) and every record dropped after Close. It runs on the writer
	// or an enqueuing goroutine, so it must be quick and must not call the
	// Journal. Nil ignores them; Flush and Close still return write errors.
	OnError func(error)
	// MaxQueued bounds the records waiting to be written. Past it, while the
	// database keeps refusing writes, events and tool calls are dropped,
	// reported to OnError as ErrJournalFull (the first and every 1000th) and
	// counted (Dropped); agent and
	// session rows, which restart recovery reads, are always kept (there are
	// a few per session, and sessions stop when the database refuses mail).
	// Zero means DefaultMaxQueued.
	MaxQueued int
	// OnCommit, if set, is called after every committed batch, on the
	// goroutine that wrote it: readers of the event log (the dashboards)
	// look for new rows when told, instead of on a timer. It must be quick
	// and must not call the Journal.
	OnCommit func()
}

// Journal writes events, agent rows and session rows to swarm.db off the
// caller's goroutine: enqueueing appends to memory under a mutex, and one
// writer goroutine commits what has gathered, one BEGIN IMMEDIATE
// transaction per batch. Nothing is lost on a clean shutdown: Close writes
// everything queued. A kill -9 loses at most the last FlushInterval.
//
// Events commit in the order they were enqueued, a session's start before
// its end, and an agent's latest row last.
type Journal struct {
	db       *DB
	interval time.Duration
	maxBatch int
	maxQueue int
	onError  func(error)
	onCommit func()

	mu       sync.Mutex
	events   []EventRecord
	agents   []AgentRecord
	sessions []sessionOp
	tools    []ToolCallRecord
	n        int // queued records of all kinds
	lost     uint64
	doubtful int // records of doubt
	started  bool
	closed   bool

	wake chan struct{} // the queue became non-empty
	full chan struct{} // the queue reached maxBatch
	stop chan struct{}
	done chan struct{}

	// sem is held while taking and writing the queue (by the writer
	// goroutine, Flush, ResetAgent and Close), so that batches commit in the
	// order they were taken.
	sem chan struct{}
	// Guarded by sem: emptied buffers kept for the next swap, so that
	// steady-state enqueueing does not allocate, and the statements.
	spareEvents   []EventRecord
	spareAgents   []AgentRecord
	spareSessions []sessionOp
	spareTools    []ToolCallRecord
	stmts         [numStmts]*sql.Stmt
	// Guarded by sem: the batch whose commit failed, kept as it was for
	// its next attempt, and the marks that tell whether it committed
	// (PostgreSQL: markKey's row in settings holds the token of this
	// journal's last committed batch, mark).
	doubt   *journalBatch
	markKey string
	mark    string
	batches int  // batches attempted: the next one's token
	failed  bool // a batch failed: an attempt the server still runs may need the mark

	closeOnce sync.Once
	closeErr  error
}

type sessionOp struct {
	rec   SessionRecord
	ended bool
}

// journalBatch is the records of one transaction of the journal, and the
// token its commit leaves in the journal's mark (PostgreSQL).
type journalBatch struct {
	sss   []sessionOp
	ags   []AgentRecord
	evs   []EventRecord
	tcs   []ToolCallRecord
	token string
}

// markSQL moves the journal's mark (a row of settings) from the token of
// the last batch it knows committed ($3) to this batch's ($2), failing
// (division_by_zero) when the mark is elsewhere: the batch, or an attempt
// at it whose answer was lost, committed already. On PostgreSQL a COMMIT
// whose connection dies before its answer may have taken: retried, the
// batch's events and tool calls would be in the log twice. With the mark
// a batch commits at most once, however many attempts: the first to
// commit moves the mark, every other fails (a lost attempt's transaction
// that the server still runs, say waiting for the appenders' turn,
// included), and the failure says the batch is in. It is a plain INSERT
// INTO settings so that its commit's notification says "other" (changeOf):
// a statement the classifier cannot read (a CTE) tells every daemon that
// everything changed, at every batch. The division reads the row, so the
// planner cannot fold it to an error of its own.
const markSQL = `INSERT INTO settings (key, value) VALUES (?, ?)
	ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE 1 / (settings.value = ?)::int = 1`

// markMoved is markSQL's failure: the mark is not where the batch expects.
const markMoved = "22012"

const (
	stmtSessionStart = iota
	stmtSessionEnd
	stmtToolCall
	// stmtEvents+k inserts 1<<k events in one statement, stmtAgents+k
	// upserts 1<<k agent rows (chunks).
	stmtEvents
	stmtAgents = stmtEvents + chunkSizes
	numStmts   = stmtAgents + chunkSizes
)

const insertEventSQL = `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason, session_id, seq)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

const upsertAgentSQL = `INSERT INTO agents (name, state, session_seq, consecutive_errors, total_errors, stop_kind, stop_reason, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

const upsertAgentConflict = `
ON CONFLICT (name) DO UPDATE SET state = excluded.state, session_seq = excluded.session_seq,
	consecutive_errors = excluded.consecutive_errors, total_errors = excluded.total_errors,
	stop_kind = excluded.stop_kind, stop_reason = excluded.stop_reason, updated_at = excluded.updated_at`

// A batch's events (and its agents' rows) go in multi-row statements of
// 1, 2, 4, … 32 rows, a batch of n in as many statements as n has bits set
// below 32, plus one per full 32: one statement step instead of one a row.
// On PostgreSQL each statement is also the server's fixed cost (bind,
// executor start, its protocol messages), paid under the swarm's writer
// lock: a task's four or so journal events cost four of them, one now.
// The rows of one statement take their ids in the order listed, so events
// still commit in the order they were enqueued.
const chunkSizes = 6 // 1 << (chunkSizes-1) = 32 rows at most

// chunks splits n rows into statement sizes, largest first: k for 1<<k rows.
func chunks(n int, yield func(k, rows int)) {
	for k := chunkSizes - 1; k >= 0; k-- {
		size := 1 << k
		for n >= size {
			yield(k, size)
			n -= size
			if k < chunkSizes-1 {
				break // a smaller size is taken at most once
			}
		}
	}
}

// rowsSQL is head, whose VALUES list has one row, with rows rows.
func rowsSQL(head string, rows int) string {
	row := head[strings.LastIndex(head, "("):]
	return head + strings.Repeat(", "+row, rows-1)
}

var stmtSQL = func() [numStmts]string {
	q := [numStmts]string{
		// A start never overwrites what an end already wrote.
		stmtSessionStart: `INSERT INTO sessions (session_id, agent, seq, started_at, head_before, log_path)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (session_id) DO UPDATE SET agent = excluded.agent, seq = excluded.seq,
	started_at = excluded.started_at, head_before = excluded.head_before, log_path = excluded.log_path`,
		// An end keeps the start's head_before and log_path when it has none.
		stmtSessionEnd: `INSERT INTO sessions (session_id, agent, seq, started_at, ended_at, outcome, exit_code, signal,
	abort_reason, reason, duration_ms, head_before, head_after, log_path, tokens_in, tokens_out, cost_usd, tool_calls,
	result_text, commits)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (session_id) DO UPDATE SET ended_at = excluded.ended_at, outcome = excluded.outcome,
	exit_code = excluded.exit_code, signal = excluded.signal, abort_reason = excluded.abort_reason,
	reason = excluded.reason, duration_ms = excluded.duration_ms,
	head_before = CASE WHEN excluded.head_before = '' THEN sessions.head_before ELSE excluded.head_before END,
	head_after = excluded.head_after,
	log_path = CASE WHEN excluded.log_path = '' THEN sessions.log_path ELSE excluded.log_path END,
	tokens_in = excluded.tokens_in, tokens_out = excluded.tokens_out,
	cost_usd = excluded.cost_usd, tool_calls = excluded.tool_calls, result_text = excluded.result_text,
	commits = excluded.commits`,
		stmtToolCall: `INSERT INTO tool_calls (session_id, agent, seq, call_id, tool, input, started_at, duration_ms, status)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	}
	for k := range chunkSizes {
		q[stmtEvents+k] = rowsSQL(insertEventSQL, 1<<k)
		// One statement upserts each agent once: latestAgents leaves one
		// row an agent, as PostgreSQL requires of ON CONFLICT DO UPDATE.
		q[stmtAgents+k] = rowsSQL(upsertAgentSQL, 1<<k) + upsertAgentConflict
	}
	return q
}()

// NewJournal returns a Journal writing to db. Records enqueued before Start
// wait for it (or for Flush or Close). Close the Journal before the DB.
func (db *DB) NewJournal(opts JournalOptions) *Journal {
	j := &Journal{
		db:       db,
		interval: opts.FlushInterval,
		maxBatch: opts.MaxBatch,
		maxQueue: opts.MaxQueued,
		onError:  opts.OnError,
		onCommit: opts.OnCommit,
		wake:     make(chan struct{}, 1),
		full:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		sem:      make(chan struct{}, 1),
	}
	if j.interval <= 0 {
		j.interval = DefaultFlushInterval
	}
	if j.maxBatch <= 0 {
		j.maxBatch = DefaultMaxBatch
	}
	if j.maxQueue <= 0 {
		j.maxQueue = DefaultMaxQueued
	}
	if db.drv.name() == "postgres" {
		// The journal's own row: only its batches move it.
		j.markKey = "journal." + rand.Text()
	}
	return j
}

// Start starts the writer goroutine. It is idempotent, and does nothing
// after Close.
func (j *Journal) Start() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.started || j.closed {
		return
	}
	j.started = true
	go j.run()
}

// Event enqueues one transition. It never waits for SQLite.
func (j *Journal) Event(e EventRecord) {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		j.dropped("event " + e.Event + " of " + e.Agent)
		return
	}
	if j.n >= j.maxQueue {
		j.lost++
		lost := j.lost
		j.mu.Unlock()
		j.overflow(lost, "event "+e.Event+" of "+e.Agent)
		return
	}
	j.events = append(j.events, e)
	j.n++
	n := j.n
	j.mu.Unlock()
	j.signal(n)
}

// Agent enqueues an upsert of the agent's row. Of several queued for one
// agent, only the latest is written, and only while this daemon holds the
// agent's lease (heldAgents); while its renewal is late, once it comes
// (lateAgents).
func (j *Journal) Agent(a AgentRecord) {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		j.dropped("agent row of " + a.Name)
		return
	}
	j.agents = append(j.agents, a)
	j.n++
	n := j.n
	j.mu.Unlock()
	j.signal(n)
}

// SessionStarted enqueues the insert of a session's row: its id, agent, seq,
// Started, HeadBefore and LogPath, written at once rather than after
// FlushInterval. The daemon's session rows are package settle's (begun before
// the process starts, settled with the outcome); the journal keeps these for
// the store's contract and its tests. A row settle writes must not be
// written here too: on PostgreSQL the journal writes beside the writers'
// lock (BeginAppend), and a writer that holds the row while it waits for
// the appenders' turn would wait for a journal waiting for the row.
func (j *Journal) SessionStarted(s SessionRecord) {
	j.session(s, false)
	select {
	case j.full <- struct{}{}:
	default:
	}
}

// SessionEnded enqueues the end of a session: it updates the row, or
// inserts the whole record if the start was never written.
func (j *Journal) SessionEnded(s SessionRecord) { j.session(s, true) }

// ToolCall enqueues one tool call of a session (swarmd audit). It never
// waits for SQLite: it is called from a session's output goroutine.
func (j *Journal) ToolCall(c ToolCallRecord) {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		j.dropped("tool call " + c.Tool + " of " + c.SessionID)
		return
	}
	if j.n >= j.maxQueue {
		j.lost++
		lost := j.lost
		j.mu.Unlock()
		j.overflow(lost, "tool call "+c.Tool+" of "+c.SessionID)
		return
	}
	j.tools = append(j.tools, c)
	j.n++
	n := j.n
	j.mu.Unlock()
	j.signal(n)
}

func (j *Journal) session(s SessionRecord, ended bool) {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		j.dropped("session " + s.SessionID)
		return
	}
	j.sessions = append(j.sessions, sessionOp{rec: s, ended: ended})
	j.n++
	n := j.n
	j.mu.Unlock()
	j.signal(n)
}

// signal wakes the writer when the queue becomes non-empty (it then waits
// FlushInterval for more) and again when it holds a full batch. Between the
// two, enqueueing touches no channel.
func (j *Journal) signal(n int) {
	if n == 1 {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
	if n == j.maxBatch {
		select {
		case j.full <- struct{}{}:
		default:
		}
	}
}

// overflow reports a record dropped because the queue is at MaxQueued: the
// first and every 1000th, so that a long outage is loud without filling the
// disk with the same line (Dropped has the count).
func (j *Journal) overflow(lost uint64, what string) {
	if j.onError != nil && (lost == 1 || lost%1000 == 0) {
		j.onError(fmt.Errorf("store: journal: %w (%d records waiting for the database): %s dropped, %d in all",
			ErrJournalFull, j.maxQueue, what, lost))
	}
}

// Backlog is the number of records waiting to be written. It stays near
// zero while the database takes writes; a backlog that grows means it does
// not, and the daemon reports it in its health.
func (j *Journal) Backlog() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.n + j.doubtful
}

// Dropped is how many records were dropped because the queue was full.
func (j *Journal) Dropped() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lost
}

func (j *Journal) dropped(what string) {
	if j.onError != nil {
		j.onError(fmt.Errorf("store: journal: %w: %s dropped", ErrJournalClosed, what))
	}
}

func (j *Journal) run() {
	defer close(j.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	t.Stop()
	var backoff time.Duration
	for {
		if backoff == 0 {
			select {
			case <-j.wake:
			case <-j.stop:
				return
			}
			t.Reset(j.interval)
			select {
			case <-t.C:
			case <-j.full:
				t.Stop()
			case <-j.stop:
				return // Close writes the rest
			}
		} else {
			t.Reset(backoff)
			select {
			case <-t.C:
			case <-j.stop:
				return
			}
		}
		// No deadline: SQLite's busy timeout bounds a wait for the lock,
		// and Close waits for this batch rather than abandon it.
		if err := j.write(context.Background()); err != nil {
			if j.onError != nil {
				j.onError(err)
			}
			backoff = min(max(2*backoff, j.interval), maxRetryBackoff)
		} else {
			backoff = 0
		}
	}
}

// Flush returns once everything enqueued before the call is committed, or
// with the error that kept it from being (the records stay queued, and the
// writer retries them); but for the agent rows that wait for a late
// renewal (lateAgents), which stay queued.
func (j *Journal) Flush(ctx context.Context) error { return j.write(ctx) }

// ResetAgent is DB.ResetAgent ordered after everything the journal holds:
// it commits the queue first, so that an agent row enqueued before the reset
// cannot overwrite it afterwards.
func (j *Journal) ResetAgent(ctx context.Context, name string, now time.Time, actor string) error {
	if err := j.acquire(ctx); err != nil {
		return fmt.Errorf("store: reset agent %s: %w", name, err)
	}
	defer j.release()
	if err := j.writeLocked(ctx); err != nil {
		return err
	}
	return j.db.ResetAgent(ctx, name, now, actor)
}

// Close writes everything queued and stops the writer. It is idempotent.
// Records enqueued after Close are dropped (and reported to OnError).
func (j *Journal) Close() error {
	j.closeOnce.Do(func() {
		j.mu.Lock()
		j.closed = true
		started := j.started
		j.mu.Unlock()
		if started {
			close(j.stop)
			<-j.done
		}
		// A Flush or ResetAgent may hold sem; the writer no longer does.
		_ = j.acquire(context.Background())
		defer j.release()
		err := j.writeLocked(context.Background())
		if err != nil {
			j.mu.Lock()
			n := j.n
			j.mu.Unlock()
			err = fmt.Errorf("%w (%d journal records not written)", err, n)
		}
		for i, st := range j.stmts {
			if st != nil {
				err = errors.Join(err, st.Close())
				j.stmts[i] = nil
			}
		}
		if err == nil && j.markKey != "" && j.mark != "" && !j.failed {
			// Every batch's answer came: no attempt of this journal is left
			// that its mark has to stop.
			_, err = j.db.ExecCount(context.Background(), "journal: drop its mark", `DELETE FROM settings WHERE key = ?`, j.markKey)
		}
		j.closeErr = err
	})
	return j.closeErr
}

func (j *Journal) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // select would pick at random between a free sem and a done ctx
	}
	select {
	case j.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (j *Journal) release() { <-j.sem }

func (j *Journal) write(ctx context.Context) error {
	if err := j.acquire(ctx); err != nil {
		return fmt.Errorf("store: journal: flush: %w", err)
	}
	defer j.release()
	return j.writeLocked(ctx)
}

// writeLocked commits everything queued, in batches of at most maxBatch. On
// failure the records not committed go back to the front of the queue.
//
// The writer's turn comes first, the records after: on SQLite, those that
// arrive while the journal waits behind this process's outcomes and claims
// go in this transaction, not in one more, so under load the batches grow
// with the wait instead of queueing behind each other; an idle writer
// costs nothing more. On PostgreSQL BeginAppend waits for nothing here (the
// journal has a connection of its own, and the appenders' turn is taken
// with the commit), so the batch is what the flush interval gathered.
func (j *Journal) writeLocked(ctx context.Context) error {
	if j.Backlog() == 0 {
		return nil // nothing to wait for the turn for
	}
	if err := j.prepare(ctx); err != nil {
		return err
	}
	tx, err := j.db.BeginAppend(ctx)
	if err != nil {
		return j.db.Wrap("journal: write", err)
	}
	if b := j.doubt; b != nil {
		// Ahead of what was enqueued since, as it was: its token stands
		// for exactly these records.
		err := j.commitBatch(ctx, tx, b)
		tx = nil // ended by commitBatch
		if err != nil {
			return err
		}
		j.setDoubt(nil)
		if j.onCommit != nil {
			j.onCommit()
		}
	}
	evs, ags, sss, tcs := j.take()
	latest, late := j.lateAgents(latestAgents(ags))
	err = j.commit(ctx, tx, evs, latest, sss, tcs)
	j.recycle(evs, ags, sss, tcs)
	if len(late) > 0 {
		j.requeue(nil, late, nil, nil)
	}
	return err
}

// lateAgents splits off, copied, the rows of ags whose agents' leases wait
// for a renewal (DB.lateFence): held, not renewed in time, not run out.
// They stay queued, ahead of any row enqueued since, for the next write:
// the renewal then vouches for the lease (the row is this daemon's) or
// drops it (heldAgents leaves the row out). Dropped at once, the last row
// of an agent whose renewal a slow store delayed (its session killed by
// the lease guard, its stop) would never be written.
func (j *Journal) lateAgents(ags []AgentRecord) (now, later []AgentRecord) {
	if !j.db.fenced() {
		return ags, nil
	}
	now = ags[:0] // in place: ags is the taken buffer, latestAgents' already
	for _, a := range ags {
		if j.db.lateFence(a.Name) {
			later = append(later, a)
		} else {
			now = append(now, a)
		}
	}
	return now, later
}

// setDoubt keeps b (nil: none) for its next attempt. The caller holds sem.
func (j *Journal) setDoubt(b *journalBatch) {
	j.doubt = b
	n := 0
	if b != nil {
		n = len(b.sss) + len(b.ags) + len(b.evs) + len(b.tcs)
	}
	j.mu.Lock()
	j.doubtful = n
	j.mu.Unlock()
}

// take swaps the queue for the spare buffers. The caller holds sem.
func (j *Journal) take() ([]EventRecord, []AgentRecord, []sessionOp, []ToolCallRecord) {
	j.mu.Lock()
	evs, ags, sss, tcs := j.events, j.agents, j.sessions, j.tools
	j.events, j.agents, j.sessions, j.tools = j.spareEvents, j.spareAgents, j.spareSessions, j.spareTools
	j.n = 0
	j.mu.Unlock()
	j.spareEvents, j.spareAgents, j.spareSessions, j.spareTools = nil, nil, nil, nil
	return evs, ags, sss, tcs
}

// recycle keeps taken buffers as the next spares. The caller holds sem.
func (j *Journal) recycle(evs []EventRecord, ags []AgentRecord, sss []sessionOp, tcs []ToolCallRecord) {
	j.spareEvents = reuse(evs, j.maxBatch)
	j.spareAgents = reuse(ags, j.maxBatch)
	j.spareSessions = reuse(sss, j.maxBatch)
	j.spareTools = reuse(tcs, j.maxBatch)
}

// commit writes the records, the first batch in tx (begun already, or nil;
// rolled back when there is nothing to write), the rest in transactions
// of their own. A batch that fails is kept for the next attempt (doubt),
// the records after it go back to the queue.
func (j *Journal) commit(ctx context.Context, tx *Tx, evs []EventRecord, ags []AgentRecord, sss []sessionOp, tcs []ToolCallRecord) error {
	defer func() {
		if tx != nil {
			_ = tx.Rollback()
		}
	}()
	for len(evs)+len(ags)+len(sss)+len(tcs) > 0 {
		room := j.maxBatch
		ns := min(len(sss), room)
		room -= ns
		na := min(len(ags), room)
		room -= na
		ne := min(len(evs), room)
		room -= ne
		nt := min(len(tcs), room)
		j.batches++
		b := &journalBatch{sss: sss[:ns], ags: ags[:na], evs: evs[:ne], tcs: tcs[:nt], token: strconv.Itoa(j.batches)}
		err := j.commitBatch(ctx, tx, b)
		tx = nil // ended by commitBatch
		if err != nil {
			j.failed = true
			// Copied: the taken buffers are the queue's next spares.
			j.setDoubt(&journalBatch{sss: slices.Clone(b.sss), ags: slices.Clone(b.ags), evs: slices.Clone(b.evs),
				tcs: slices.Clone(b.tcs), token: b.token})
			j.requeue(evs[ne:], ags[na:], sss[ns:], tcs[nt:])
			return err
		}
		sss, ags, evs, tcs = sss[ns:], ags[na:], evs[ne:], tcs[nt:]
		if j.onCommit != nil {
			j.onCommit()
		}
	}
	return nil
}

// commitBatch writes one batch in tx, or in a transaction of its own when
// tx is nil, and ends the transaction. A batch that an earlier attempt
// committed (its answer lost) is not written again: that is a success.
func (j *Journal) commitBatch(ctx context.Context, tx *Tx, b *journalBatch) error {
	sss, ags, evs, tcs := b.sss, b.ags, b.evs, b.tcs
	total := len(sss) + len(ags) + len(evs) + len(tcs)
	wrap := func(err error) error {
		return j.db.Wrap(fmt.Sprintf("journal: write %d records", total), err)
	}
	if tx == nil {
		var err error
		if tx, err = j.db.BeginAppend(ctx); err != nil {
			return wrap(err)
		}
	}
	defer tx.Rollback()
	var err error
	// No result of these writes is read: on PostgreSQL they go to the
	// server with the COMMIT, in one round trip (Deferred).
	later := Deferred(ctx)
	if len(sss) > 0 {
		start := tx.StmtContext(ctx, j.stmts[stmtSessionStart])
		end := tx.StmtContext(ctx, j.stmts[stmtSessionEnd])
		for _, op := range sss {
			s := op.rec
			if !op.ended {
				_, err = start.ExecContext(later, s.SessionID, s.Agent, int64(s.Seq), FormatTime(s.Started), s.HeadBefore, s.LogPath)
			} else {
				_, err = end.ExecContext(later, s.SessionID, s.Agent, int64(s.Seq), FormatTime(s.Started), endedAt(s),
					s.Outcome, s.ExitCode, s.Signal, s.AbortReason, s.Reason, s.Duration.Milliseconds(),
					s.HeadBefore, s.HeadAfter, s.LogPath,
					nullZero(s.TokensIn), nullZero(s.TokensOut), nullZero(s.CostUSD), nullZero(s.ToolCalls), s.ResultText, s.Commits)
			}
			if err != nil {
				return wrap(err)
			}
		}
	}
	args := make([]any, 0, 10<<(chunkSizes-1))
	if j.db.fenced() {
		err = j.upsertHeldAgents(later, tx.Tx, j.heldAgents(ags))
	} else {
		args, err = execChunks(ctx, later, tx.Tx, j.stmts[stmtAgents:stmtAgents+chunkSizes], ags, appendAgentArgs, args)
	}
	if err != nil {
		return wrap(err)
	}
	if _, err = execChunks(ctx, later, tx.Tx, j.stmts[stmtEvents:stmtEvents+chunkSizes], evs, appendEventArgs, args); err != nil {
		return wrap(err)
	}
	if err := j.insertToolCalls(later, tx.Tx, tcs); err != nil {
		return wrap(err)
	}
	if j.markKey != "" {
		if _, err := tx.ExecContext(later, markSQL, j.markKey, b.token, j.mark); err != nil {
			return wrap(err)
		}
	}
	err = tx.Commit()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == markMoved {
		err = j.committedBefore(ctx, b)
	}
	if err != nil {
		return wrap(err)
	}
	j.mark = b.token
	return nil
}

// committedBefore is the answer to a batch whose mark had moved: an
// earlier attempt committed it (the mark is its token: nil), or the mark
// was moved by someone else, which no attempt at the batch can pass (the
// mark is taken from there, and the batch fails this time).
func (j *Journal) committedBefore(ctx context.Context, b *journalBatch) error {
	at, ok, err := j.db.Setting(ctx, j.markKey)
	switch {
	case err != nil:
		return err
	case ok && at == b.token:
		return nil
	}
	err = fmt.Errorf("the journal's mark %s is at %q, not at %q or this batch's %q: moved by another writer", j.markKey, at, j.mark, b.token)
	j.mark = at
	return err
}

// fencedAgentSQL upserts n agents' rows (each with the epoch of its lease
// last, the daemon after them all), each only while the lease it names is
// held, at the epoch given, by the daemon given, checked in the write's
// own transaction: the check in memory (heldAgents) comes before the
// commit, and a daemon paused in between (a VM's pause) would otherwise
// commit the row over the one of the daemon that took the agent since.
// No row lock: the journal holds the appenders' turn, which a writer
// holding a lease's row (a reap, a takeover) may wait for; on PostgreSQL
// the check goes with the COMMIT (Deferred), on SQLite the one writer
// excludes every other. The casts type the numbers' parameters, which
// PostgreSQL would take as text in VALUES. VALUES' columns are column1,
// column2, … on both engines.
func fencedAgentSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO agents (name, state, session_seq, consecutive_errors, total_errors, stop_kind, stop_reason, updated_at)
SELECT v.column1, v.column2, v.column3, v.column4, v.column5, v.column6, v.column7, v.column8
FROM (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), ?, ?, ?, CAST(? AS BIGINT))")
	}
	b.WriteString(`) AS v
WHERE EXISTS (SELECT 1 FROM agent_leases l WHERE l.agent = v.column1 AND l.daemon = ? AND l.epoch = v.column9)`)
	b.WriteString(upsertAgentConflict)
	return b.String()
}

// fencedAgentSQLs are fencedAgentSQL of 1, 2, 4, … 32 rows, as the
// unfenced upserts go (execChunks): a batch's rows in a few statements.
var fencedAgentSQLs = func() (out [chunkSizes]string) {
	for k := range out {
		out[k] = fencedAgentSQL(1 << k)
	}
	return out
}()

// upsertHeldAgents writes ags, rows of agents whose leases this daemon's
// fence holds, each under the check of fencedAgentSQL, in statements of
// 32, 16, … 1 rows.
func (j *Journal) upsertHeldAgents(ctx context.Context, tx *sql.Tx, ags []AgentRecord) error {
	var args []any
	for len(ags) > 0 {
		k := min(bits.Len(uint(len(ags)))-1, chunkSizes-1)
		chunk := ags[:1<<k]
		args = args[:0]
		var daemon string
		for i := range chunk {
			var epoch int64
			daemon, epoch = j.db.fenceOf(chunk[i].Name)
			args = append(appendAgentArgs(args, &chunk[i]), epoch)
		}
		if _, err := tx.ExecContext(ctx, fencedAgentSQLs[k], append(args, daemon)...); err != nil {
			return err
		}
		ags = ags[1<<k:]
	}
	return nil
}

// heldAgents is ags without the rows of agents whose lease this daemon's
// fence does not hold now (DB.Fence: lost, or not renewed in time): such
// an agent is another daemon's, or may be, and its row is that daemon's
// to write. A runner that lost its lease still moves (to Stopped at the
// daemon's stop), and a row queued just before a pause is written after
// it: either overwrote the row of the daemon running the agent. Checked as
// the rows are written; a clean stop gives its leases up before its last
// rows are in, which its fence still holds (the leases were renewed).
func (j *Journal) heldAgents(ags []AgentRecord) []AgentRecord {
	var out []AgentRecord // nil while every row is kept
	for i, a := range ags {
		switch {
		case !j.db.holdsFence(a.Name):
			if out == nil {
				out = append(make([]AgentRecord, 0, len(ags)), ags[:i]...)
			}
		case out != nil:
			out = append(out, a)
		}
	}
	if out == nil {
		return ags
	}
	return out
}

// execChunks inserts rows in multi-row statements, stmts[k] taking 1<<k
// rows (chunks); args is a buffer for the arguments, returned for reuse.
func execChunks[T any](ctx, later context.Context, tx *sql.Tx, stmts []*sql.Stmt, rows []T, add func([]any, *T) []any, args []any) ([]any, error) {
	var err error
	chunks(len(rows), func(k, n int) {
		if err != nil {
			return
		}
		args = args[:0]
		for i := range rows[:n] {
			args = add(args, &rows[i])
		}
		rows = rows[n:]
		_, err = tx.StmtContext(ctx, stmts[k]).ExecContext(later, args...)
	})
	return args, err
}

func (j *Journal) insertToolCalls(ctx context.Context, tx *sql.Tx, tcs []ToolCallRecord) error {
	if len(tcs) == 0 {
		return nil
	}
	st := tx.StmtContext(ctx, j.stmts[stmtToolCall])
	for _, c := range tcs {
		var dur any // NULL: the call never ended
		if c.Ended {
			dur = c.Duration.Milliseconds()
		}
		if _, err := st.ExecContext(ctx, c.SessionID, c.Agent, int64(c.Seq), c.CallID, c.Tool, c.Input,
			FormatTime(c.Started), dur, c.Status); err != nil {
			return err
		}
	}
	return nil
}

// prepare prepares the statements once on the write connection. It must
// run outside a transaction: the pool's one connection would be taken.
func appendAgentArgs(args []any, a *AgentRecord) []any {
	return append(args, a.Name, a.State, int64(a.Seq), int64(a.ConsecutiveErrors),
		int64(a.TotalErrors), a.StopKind, a.StopReason, FormatTime(a.UpdatedAt))
}

func appendEventArgs(args []any, e *EventRecord) []any {
	return append(args, FormatTime(e.At), e.Agent, e.From, e.Event, e.To, e.Effect, e.Actor, e.Reason, e.SessionID, int64(e.Seq))
}

func (j *Journal) prepare(ctx context.Context) error {
	for i, q := range stmtSQL {
		if j.stmts[i] != nil {
			continue
		}
		st, err := j.db.appendSQL().PrepareContext(ctx, q)
		if err != nil {
			return j.db.Wrap("journal: prepare", err)
		}
		j.stmts[i] = st
	}
	return nil
}

// endedAt is the end time of an ended session; an end without a time is
// its start plus its duration.
func endedAt(s SessionRecord) string {
	if s.Ended != nil {
		return FormatTime(*s.Ended)
	}
	return FormatTime(s.Started.Add(s.Duration))
}

// requeue puts records that were not committed back in front of those
// enqueued since, and wakes the writer for them (a failed Flush leaves them
// to it).
func (j *Journal) requeue(evs []EventRecord, ags []AgentRecord, sss []sessionOp, tcs []ToolCallRecord) {
	j.mu.Lock()
	j.events = slices.Concat(evs, j.events)
	j.agents = slices.Concat(ags, j.agents)
	j.sessions = slices.Concat(sss, j.sessions)
	j.tools = slices.Concat(tcs, j.tools)
	j.n += len(evs) + len(ags) + len(sss) + len(tcs)
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// latestAgents keeps the last row of each agent, in place, in the order of
// those last rows.
func latestAgents(ags []AgentRecord) []AgentRecord {
	if len(ags) < 2 {
		return ags
	}
	last := make(map[string]int, len(ags))
	for i, a := range ags {
		last[a.Name] = i
	}
	if len(last) == len(ags) {
		return ags
	}
	out := ags[:0]
	for i, a := range ags {
		if last[a.Name] == i {
			out = append(out, a)
		}
	}
	return out
}

// reuse empties a written buffer for reuse, dropping its references so the
// strings can be collected, unless a burst made it large.
func reuse[T any](s []T, maxBatch int) []T {
	if cap(s) > 4*maxBatch {
		return nil
	}
	clear(s[:cap(s)])
	return s[:0]
}
