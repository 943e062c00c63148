package merge

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// This file is the queue's state in swarm.db (tables merge_queue and
// merge_control, migration 0010; budgets are 0011). Every change is one IMMEDIATE transaction
// together with its row in the event log, so `swarmd events --agent merge`
// and `swarmd merge status` always agree with what the queue did. Store
// holds no git and no process: the CLI uses it on the database directly,
// whether or not the daemon runs.

// DB is the database the queue lives in. *store.DB satisfies it.
type DB interface {
	Begin(ctx context.Context) (*store.Tx, error) // a write transaction, in the writer's turn
	ReadSQL() *store.Pool                         // the read pool, its statements prepared once
	Check() error                                 // the file is still the one opened
}

// State is a queue entry's state.
type State string

// Entry states. queued -> testing -> merged or rejected; testing goes back to
// queued when the target moved (rebuild), the daemon stopped or restarted.
const (
	Queued   State = "queued"
	Testing  State = "testing"
	Merged   State = "merged"
	Rejected State = "rejected"
)

// Results: the result of a finished entry and the result label of
// swarmd_merges_total. A rejection's result is its Kind.
const (
	ResultMerged = "merged"
)

// Kind is why a candidate was rejected.
type Kind string

// Rejection kinds.
const (
	KindConflict   Kind = "conflict"    // it does not merge cleanly into the target; Detail lists the paths
	KindGateFailed Kind = "gate_failed" // a gate command failed; Detail is the tail of the gate's output
	KindTimeout    Kind = "timeout"     // the gate ran past merge.timeout and was killed
	// KindCorrupt: objects of the change are not what their names say (an
	// object file replaced in the shared object store); Detail names them.
	KindCorrupt Kind = "corrupt"
	// KindCarried: the change carries merge commits of the queue's that
	// the target does not hold (another task's work, again); Detail names
	// them.
	KindCarried Kind = "carried"
	// KindHistory: merged as its history stands, the change would not be
	// the one its reviewer was shown (several merge bases with the target;
	// with the rebase strategy, merge commits whose own changes a replay
	// drops); Detail says which and what to do.
	KindHistory Kind = "history"
	// KindStale: the entry's commit is not its task's work to merge now
	// (Options.Stale: the task was reworked and reported done at another
	// commit since, sent back, cancelled); it was dropped before any gate,
	// and nothing is reported for it. Detail says why.
	KindStale Kind = "stale"
)

// Actor names the queue in the event log and on the task board.
const Actor = "merge-queue"

// LogName is the pseudo-agent the queue's gate logs and events are filed
// under: logs/merge/<gate_seq>.log (`swarmd logs merge`), events with agent
// "merge" (`swarmd events --agent merge`). The config reserves the name.
const LogName = "merge"

// Entry is one task in the queue, or one attempt of it once finished.
type Entry struct {
	ID         int64     `json:"id"`
	Task       int64     `json:"task"`
	Agent      string    `json:"agent"`
	Branch     string    `json:"branch"`
	Head       string    `json:"head"` // the commit merged: the branch's tip when queued
	State      State     `json:"state"`
	Result     string    `json:"result,omitempty"`    // merged or a Kind
	Detail     string    `json:"detail,omitempty"`    // rejected: the conflicting paths or the gate output's tail
	Target     string    `json:"target,omitempty"`    // the target commit the candidate was built on
	Candidate  string    `json:"candidate,omitempty"` // the candidate; once merged, the target's new commit
	GateSeq    uint32    `json:"gate_seq,omitempty"`  // its last gate run: `swarmd logs merge --session N`
	Attempts   int       `json:"attempts"`            // gate runs
	EnqueuedAt time.Time `json:"enqueued_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}

// Paths are the conflicting paths of a conflict rejection.
func (e Entry) Paths() []string {
	if e.Result != string(KindConflict) || e.Detail == "" {
		return nil
	}
	return strings.Split(e.Detail, "\n")
}

// Status is the queue at a glance.
type Status struct {
	Paused   bool    `json:"paused"`
	PausedBy string  `json:"paused_by,omitempty"`
	Waiting  string  `json:"waiting,omitempty"` // why the queue does not advance; "" when it can
	Current  *Entry  `json:"current,omitempty"` // the entry under test
	Queued   []Entry `json:"queued"`            // waiting their turn, in order
	Recent   []Entry `json:"recent"`            // the last results, newest first
	// Ahead is the gate run ahead of the batch under test (merge.parallel:
	// 2), nil when none runs; its tasks are among Queued.
	Ahead *AheadRun `json:"ahead,omitempty"`
}

// AheadRun is a gate run ahead of the batch under test: its tasks' line is
// built on that batch's last candidate.
type AheadRun struct {
	GateSeq uint32    `json:"gate_seq"`
	Tasks   []int64   `json:"tasks"` // in line order
	Since   time.Time `json:"since"`
}

// Depth is how many tasks are in the queue, the one under test included.
func (s Status) Depth() int {
	n := len(s.Queued)
	if s.Current != nil {
		n++
	}
	return n
}

// Store is the queue's state in the database. It is safe for concurrent
// use, also by several processes.
type Store struct {
	db  DB
	now func() time.Time
	// epoch is the leader epoch the queue's loop took (lead), 0 before: the
	// loop's writes (loopWrite) check it in their transaction.
	epoch atomic.Int64
	// clone and into name this repository's row of merge_target (known.go);
	// "" keeps none (a store opened by a tool).
	clone, into string
}

// NewStore returns the queue stored in db; now is the clock (nil: time.Now).
func NewStore(db DB, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now}
}

func (s *Store) stamp() string { return store.FormatTime(s.now()) }

func parseTime(v string) time.Time {
	t, _ := store.ParseTime(v)
	return t
}

const entryCols = `id, task_id, agent, branch, head, state, result, detail, target, candidate, gate_seq, attempts,
	enqueued_at, started_at, finished_at`

type scanner interface{ Scan(...any) error }

func scanEntry(sc scanner) (Entry, error) {
	var e Entry
	var state, enq, start, fin string
	var seq int64
	if err := sc.Scan(&e.ID, &e.Task, &e.Agent, &e.Branch, &e.Head, &state, &e.Result, &e.Detail, &e.Target,
		&e.Candidate, &seq, &e.Attempts, &enq, &start, &fin); err != nil {
		return Entry{}, err
	}
	e.State, e.GateSeq = State(state), uint32(seq)
	e.EnqueuedAt, e.StartedAt, e.FinishedAt = parseTime(enq), parseTime(start), parseTime(fin)
	return e, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func queryEntries(ctx context.Context, q querier, where string, args ...any) ([]Entry, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+entryCols+` FROM merge_queue `+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// write runs f in one IMMEDIATE transaction on the file the store opened.
func (s *Store) write(ctx context.Context, op string, f func(tx *sql.Tx) error) error {
	if err := s.db.Check(); err != nil {
		return fmt.Errorf("merge queue: %s: %w", op, err)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("merge queue: %s: %w", op, err)
	}
	defer tx.Rollback()
	if err := f(tx.Tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("merge queue: %s: %w", op, err)
	}
	return nil
}

// lead makes this store's writes the queue loop's, the one that runs the
// queue from now on: it raises the leader epoch, so that the writes of
// any loop that ran it before (another daemon's, which lost the merge lock
// without seeing it yet) are refused from this commit on.
func (s *Store) lead(ctx context.Context) error {
	var epoch int64
	err := s.write(ctx, "take the lead", func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `UPDATE merge_control SET leader_epoch = leader_epoch + 1 WHERE id = 1 RETURNING leader_epoch`).
			Scan(&epoch)
	})
	if err == nil {
		s.epoch.Store(epoch)
	}
	return err
}

// fence fails with ErrNotLeader when the leader epoch in the database is
// not the one this store's loop took (none taken: no fence).
func (s *Store) fence(ctx context.Context, q querier, op string) error {
	mine := s.epoch.Load()
	if mine == 0 {
		return nil
	}
	var cur int64
	if err := q.QueryRowContext(ctx, `SELECT leader_epoch FROM merge_control WHERE id = 1`).Scan(&cur); err != nil {
		return fmt.Errorf("merge queue: %s: read the leader epoch: %w", op, err)
	}
	if cur != mine {
		return fmt.Errorf("merge queue: %s: %w (leader epoch %d, this queue's %d)", op, ErrNotLeader, cur, mine)
	}
	return nil
}

// leading fails with ErrNotLeader when another loop took the lead since
// this store's did: a read, for what is not a write of the database (the
// target's move, the callbacks).
func (s *Store) leading(ctx context.Context) error {
	return s.fence(ctx, s.db.ReadSQL(), "check the lead")
}

// loopWrite is write for the queue's loop: fenced by the leader epoch it
// took, in the same transaction.
func (s *Store) loopWrite(ctx context.Context, op string, f func(tx *sql.Tx) error) error {
	return s.write(ctx, op, func(tx *sql.Tx) error {
		if err := s.fence(ctx, tx, op); err != nil {
			return err
		}
		return f(tx)
	})
}

// event is one row of the event log: agent "merge", the entry's state
// change (from and to: queue entry states, or the queue's own "running",
// "paused", "waiting"), effect "merge".
type event struct {
	task     int64
	from, to string
	name     string
	actor    string
	reason   string
	seq      uint32
}

func (s *Store) logEvent(ctx context.Context, tx *sql.Tx, ev event) error {
	var task any
	if ev.task != 0 {
		task = ev.task
	}
	session := ""
	if ev.seq != 0 {
		session = "merge-" + strconv.FormatUint(uint64(ev.seq), 10)
	}
	if ev.actor == "" {
		ev.actor = Actor
	}
	_, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
		session_id, seq, task_id) VALUES (?, ?, ?, ?, ?, 'merge', ?, ?, ?, ?, ?)`,
		s.stamp(), LogName, ev.from, ev.name, ev.to, ev.actor, oneLine(ev.reason), session, int64(ev.seq), task)
	if err != nil {
		return fmt.Errorf("merge queue: event %s: %w", ev.name, err)
	}
	return nil
}

// Enqueue puts the task's head at the end of the queue. Queueing a task
// that is queued already is idempotent for the same head, and so is
// queueing a head whose result is not reported yet; a new head replaces
// the old one in place while the entry still waits, and is refused
// (ErrState) while the old one is under test.
func (s *Store) Enqueue(ctx context.Context, task int64, agent, branch, head string) (Entry, error) {
	if task <= 0 || agent == "" || branch == "" || head == "" {
		return Entry{}, fmt.Errorf("merge queue: enqueue task %d: %w: task, agent, branch and head are required", task, ErrInvalid)
	}
	var e Entry
	err := s.write(ctx, "enqueue", func(tx *sql.Tx) error {
		cur, found, err := activeEntry(ctx, tx, task)
		switch {
		case err != nil:
			return err
		case found && cur.Head == head:
			e = cur
			return nil
		case found && cur.State == Testing:
			return fmt.Errorf("merge queue: task %d is under test at %s; queue %s after that result: %w", task, short(cur.Head), short(head), ErrState)
		case found:
			return s.replaceHead(ctx, tx, &cur, &e, agent, branch, head)
		}
		// The same head merged already (the task's close may not be
		// reported yet, or a reader saw the task ready just before it
		// closed), or rejected and not yet reported: queueing it again
		// would merge (or test) it twice. A reported rejection may be
		// queued again (swarmd merge retry).
		if done, found, err := finishedEntry(ctx, tx, task, head); err != nil || found {
			e = done
			return err
		}
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO merge_queue (task_id, agent, branch, head, state, enqueued_at)
			VALUES (?, ?, ?, ?, 'queued', ?) RETURNING id`, task, agent, branch, head, s.stamp()).Scan(&id); err != nil {
			return fmt.Errorf("merge queue: enqueue task %d: %w", task, err)
		}
		if e, err = getEntry(ctx, tx, id); err != nil {
			return err
		}
		return s.logEvent(ctx, tx, event{task: task, to: string(Queued), name: "enqueued",
			reason: fmt.Sprintf("%s at %s by %s", branch, short(head), agent)})
	})
	return e, err
}

func (s *Store) replaceHead(ctx context.Context, tx *sql.Tx, cur, e *Entry, agent, branch, head string) error {
	if _, err := tx.ExecContext(ctx, `UPDATE merge_queue SET agent = ?, branch = ?, head = ? WHERE id = ?`,
		agent, branch, head, cur.ID); err != nil {
		return fmt.Errorf("merge queue: enqueue task %d: %w", cur.Task, err)
	}
	cur.Agent, cur.Branch, cur.Head = agent, branch, head
	*e = *cur
	return s.logEvent(ctx, tx, event{task: cur.Task, from: string(Queued), to: string(Queued), name: "enqueued",
		reason: fmt.Sprintf("new head %s at %s", branch, short(head))})
}

func activeEntry(ctx context.Context, q querier, task int64) (Entry, bool, error) {
	es, err := queryEntries(ctx, q, `WHERE task_id = ? AND state IN ('queued', 'testing')`, task)
	if err != nil || len(es) == 0 {
		return Entry{}, false, err
	}
	return es[0], true, nil
}

// finishedEntry is task's entry at head that must not be queued again:
// merged, or rejected with its result not reported yet.
func finishedEntry(ctx context.Context, q querier, task int64, head string) (Entry, bool, error) {
	es, err := queryEntries(ctx, q, `WHERE task_id = ? AND head = ? AND (state = 'merged' OR (state = 'rejected' AND notified = 0))
		ORDER BY id DESC`, task, head)
	if err != nil || len(es) == 0 {
		return Entry{}, false, err
	}
	return es[0], true, nil
}

// unfrozen is the entry that stands for task when it is queued with no
// head of its own (the operator reported it done): its latest, if that is
// in the queue, merged, or rejected and not reported yet. Only a task sent
// back (its rejection reported) and done again is queued anew.
func (s *Store) unfrozen(ctx context.Context, task int64) (Entry, bool, error) {
	es, err := queryEntries(ctx, s.db.ReadSQL(), `WHERE id = (SELECT MAX(id) FROM merge_queue WHERE task_id = ?)
		AND (state <> 'rejected' OR notified = 0)`, task)
	if err != nil {
		return Entry{}, false, fmt.Errorf("merge queue: enqueue task %d: %w", task, err)
	}
	if len(es) == 0 {
		return Entry{}, false, nil
	}
	return es[0], true, nil
}

func getEntry(ctx context.Context, q querier, id int64) (Entry, error) {
	e, err := scanEntry(q.QueryRowContext(ctx, `SELECT `+entryCols+` FROM merge_queue WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Entry{}, fmt.Errorf("merge queue: entry %d: %w", id, ErrNotFound)
	}
	return e, err
}

// List returns the last limit entries (all when limit <= 0), oldest first.
func (s *Store) List(ctx context.Context, limit int) ([]Entry, error) {
	var es []Entry
	var err error
	if limit <= 0 {
		// No LIMIT at all: SQLite reads LIMIT -1 as none, PostgreSQL
		// refuses a negative one.
		es, err = queryEntries(ctx, s.db.ReadSQL(), `ORDER BY id`)
	} else {
		es, err = queryEntries(ctx, s.db.ReadSQL(), `WHERE id IN (SELECT id FROM merge_queue ORDER BY id DESC LIMIT ?) ORDER BY id`, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("merge queue: list: %w", err)
	}
	return es, nil
}

// Latest returns the task's latest entry.
func (s *Store) Latest(ctx context.Context, task int64) (Entry, error) {
	es, err := queryEntries(ctx, s.db.ReadSQL(), `WHERE task_id = ? ORDER BY id DESC LIMIT 1`, task)
	if err != nil {
		return Entry{}, fmt.Errorf("merge queue: task %d: %w", task, err)
	}
	if len(es) == 0 {
		return Entry{}, fmt.Errorf("merge queue: task %d: %w", task, ErrNotFound)
	}
	return es[0], nil
}

// Status returns the queue: its switches, the entry under test, the
// waiting entries, and the last recent results.
func (s *Store) Status(ctx context.Context, recent int) (Status, error) {
	var st Status
	var paused int
	err := s.db.ReadSQL().QueryRowContext(ctx, `SELECT paused, paused_by, waiting FROM merge_control WHERE id = 1`).
		Scan(&paused, &st.PausedBy, &st.Waiting)
	if err != nil {
		return Status{}, fmt.Errorf("merge queue: status: %w", err)
	}
	st.Paused = paused != 0
	if st.Ahead, err = s.ahead(ctx); err != nil {
		return Status{}, fmt.Errorf("merge queue: status: %w", err)
	}
	active, err := queryEntries(ctx, s.db.ReadSQL(), `WHERE state IN ('queued', 'testing') ORDER BY id`)
	if err != nil {
		return Status{}, fmt.Errorf("merge queue: status: %w", err)
	}
	st.Queued = []Entry{}
	for i := range active {
		if active[i].State == Testing && st.Current == nil {
			st.Current = &active[i]
			continue
		}
		st.Queued = append(st.Queued, active[i])
	}
	if st.Recent, err = queryEntries(ctx, s.db.ReadSQL(), `WHERE state IN ('merged', 'rejected')
		ORDER BY finished_at DESC, id DESC LIMIT ?`, max(recent, 0)); err != nil {
		return Status{}, fmt.Errorf("merge queue: status: %w", err)
	}
	if st.Recent == nil {
		st.Recent = []Entry{}
	}
	return st, nil
}

// Retry queues a rejected task's head again, at the end of the queue, as a
// new entry (the rejected one stays in the history). check, if set, is
// asked in the same transaction whether the rejected entry's head may be
// merged now (its task's frozen head, the task ready to merge): its error
// refuses the retry.
func (s *Store) Retry(ctx context.Context, task int64, actor string, check func(ctx context.Context, tx *sql.Tx, e Entry) error) (Entry, error) {
	var e Entry
	err := s.write(ctx, "retry", func(tx *sql.Tx) error {
		es, err := queryEntries(ctx, tx, `WHERE task_id = ? ORDER BY id DESC LIMIT 1`, task)
		if err != nil {
			return fmt.Errorf("merge queue: retry task %d: %w", task, err)
		}
		if len(es) == 0 {
			return fmt.Errorf("merge queue: retry task %d: %w", task, ErrNotFound)
		}
		last := es[0]
		if last.State != Rejected {
			return fmt.Errorf("merge queue: task %d is %s, not rejected: only a rejected task is retried: %w", task, last.State, ErrState)
		}
		if check != nil {
			if err := check(ctx, tx, last); err != nil {
				return fmt.Errorf("merge queue: retry task %d at %s: %w", task, short(last.Head), err)
			}
		}
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO merge_queue (task_id, agent, branch, head, state, enqueued_at)
			VALUES (?, ?, ?, ?, 'queued', ?) RETURNING id`, task, last.Agent, last.Branch, last.Head, s.stamp()).Scan(&id); err != nil {
			return fmt.Errorf("merge queue: retry task %d: %w", task, err)
		}
		if e, err = getEntry(ctx, tx, id); err != nil {
			return err
		}
		return s.logEvent(ctx, tx, event{task: task, from: string(Rejected), to: string(Queued), name: "retried",
			actor: actor, reason: fmt.Sprintf("%s at %s, after %s", last.Branch, short(last.Head), last.Result)})
	})
	return e, err
}

// Pause stops the queue before its next candidate (the one under test, if
// any, finishes). It is stored: a restarted daemon stays paused.
func (s *Store) Pause(ctx context.Context, actor string) error { return s.setPaused(ctx, true, actor) }

// Made reports whether commit is one a merge queue put on the target (any
// daemon's, on a shared store): the new target commit of a merged entry.
func (s *Store) Made(ctx context.Context, commit string) (bool, error) {
	var n int
	err := s.db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM merge_queue WHERE state = 'merged' AND candidate = ?`, commit).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("merge queue: made %s: %w", short(commit), err)
	}
	return n > 0, nil
}

// LastMade is the new target commit of the entry merged last (any
// daemon's, on a shared store), "" when none was merged yet. The entries of
// one batch finish together; any of them will do for a caller that asks
// whether a target holds the last merge, since a target moves to a batch's
// tip at once.
func (s *Store) LastMade(ctx context.Context) (string, error) {
	var c string
	err := s.db.ReadSQL().QueryRowContext(ctx, `SELECT candidate FROM merge_queue WHERE state = 'merged' AND candidate <> ''
		ORDER BY finished_at DESC, id DESC LIMIT 1`).Scan(&c)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("merge queue: last merge: %w", err)
	}
	return c, nil
}

// Resume undoes Pause.
func (s *Store) Resume(ctx context.Context, actor string) error {
	return s.setPaused(ctx, false, actor)
}

func (s *Store) setPaused(ctx context.Context, paused bool, actor string) error {
	op, to, from := "resume", "running", "paused"
	if paused {
		op, to, from = "pause", "paused", "running"
	}
	return s.write(ctx, op, func(tx *sql.Tx) error {
		var cur int
		if err := tx.QueryRowContext(ctx, `SELECT paused FROM merge_control WHERE id = 1`).Scan(&cur); err != nil {
			return fmt.Errorf("merge queue: %s: %w", op, err)
		}
		if (cur != 0) == paused {
			return nil // already so: no event
		}
		by := ""
		if paused {
			by = actor
		}
		// An INTEGER column: PostgreSQL's driver encodes no bool into it.
		flag := 0
		if paused {
			flag = 1
		}
		if _, err := tx.ExecContext(ctx, `UPDATE merge_control SET paused = ?, paused_by = ?, updated_at = ? WHERE id = 1`,
			flag, by, s.stamp()); err != nil {
			return fmt.Errorf("merge queue: %s: %w", op, err)
		}
		return s.logEvent(ctx, tx, event{from: from, to: to, name: op + "d", actor: actor})
	})
}

// control is the queue's switches as the loop reads them.
func (s *Store) control(ctx context.Context) (paused bool, waiting string, err error) {
	var p int
	err = s.db.ReadSQL().QueryRowContext(ctx, `SELECT paused, waiting FROM merge_control WHERE id = 1`).Scan(&p, &waiting)
	if err != nil {
		return false, "", fmt.Errorf("merge queue: read control: %w", err)
	}
	return p != 0, waiting, nil
}

// setWaiting records why the queue does not advance ("" when it can again),
// with an event when the reason changes.
func (s *Store) setWaiting(ctx context.Context, why string, task int64) error {
	return s.loopWrite(ctx, "wait", func(tx *sql.Tx) error {
		var cur string
		if err := tx.QueryRowContext(ctx, `SELECT waiting FROM merge_control WHERE id = 1`).Scan(&cur); err != nil {
			return fmt.Errorf("merge queue: wait: %w", err)
		}
		if cur == why {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE merge_control SET waiting = ?, updated_at = ? WHERE id = 1`, why, s.stamp()); err != nil {
			return fmt.Errorf("merge queue: wait: %w", err)
		}
		ev := event{task: task, from: "running", to: "waiting", name: "waiting", reason: why}
		if why == "" {
			ev = event{task: task, from: "waiting", to: "running", name: "unblocked", reason: "was: " + cur}
		}
		return s.logEvent(ctx, tx, ev)
	})
}

// setAhead records the gate run ahead, seq on tasks (seq 0: none).
func (s *Store) setAhead(ctx context.Context, seq uint32, tasks []int64) error {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = strconv.FormatInt(t, 10)
	}
	since := ""
	if seq != 0 {
		since = s.stamp()
	}
	return s.loopWrite(ctx, "record the run ahead", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE merge_control SET ahead_seq = ?, ahead_tasks = ?, ahead_since = ? WHERE id = 1`,
			int64(seq), strings.Join(ids, " "), since)
		return err
	})
}

// ahead is the gate run ahead as recorded, nil when none.
func (s *Store) ahead(ctx context.Context) (*AheadRun, error) {
	var seq int64
	var tasks, since string
	err := s.db.ReadSQL().QueryRowContext(ctx, `SELECT ahead_seq, ahead_tasks, ahead_since FROM merge_control WHERE id = 1`).
		Scan(&seq, &tasks, &since)
	if err != nil || seq == 0 {
		return nil, err
	}
	a := &AheadRun{GateSeq: uint32(seq), Tasks: []int64{}, Since: parseTime(since)}
	for _, f := range strings.Fields(tasks) {
		if id, err := strconv.ParseInt(f, 10, 64); err == nil {
			a.Tasks = append(a.Tasks, id)
		}
	}
	return a, nil
}

// front is the first n entries of the queue, oldest first: those under
// test (a batch the loop was stopped or restarted during), then the queued.
func (s *Store) front(ctx context.Context, n int) ([]Entry, error) {
	es, err := queryEntries(ctx, s.db.ReadSQL(), `WHERE state IN ('queued', 'testing') ORDER BY id LIMIT ?`, max(n, 1))
	if err != nil {
		return nil, fmt.Errorf("merge queue: next: %w", err)
	}
	return es, nil
}

// depth counts the entries in the queue.
func (s *Store) depth(ctx context.Context) (int, error) {
	var n int
	err := s.db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM merge_queue WHERE state IN ('queued', 'testing')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("merge queue: depth: %w", err)
	}
	return n, nil
}

// nextGateSeq numbers a gate run; numbers are never reused, so a log file
// is never appended to by two runs.
func (s *Store) nextGateSeq(ctx context.Context) (uint32, error) {
	var seq int64
	err := s.loopWrite(ctx, "number gate run", func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `UPDATE merge_control SET gate_seq = gate_seq + 1 WHERE id = 1 RETURNING gate_seq`).Scan(&seq)
	})
	return uint32(seq), err
}

// begin marks e under test on candidate, built on target; seq is its gate
// run (0: no gate).
func (s *Store) begin(ctx context.Context, e *Entry, target, candidate string, seq uint32) error {
	return s.beginBatch(ctx, []*Entry{e}, []string{candidate}, target, seq)
}

// beginBatch marks the entries of one batch under test in one transaction:
// es[i] on candidates[i], all built on target in one line, under gate run
// seq (0: no gate). A batch is under test as a whole or not at all, so a
// daemon that dies during its gate leaves every entry of it to resume.
func (s *Store) beginBatch(ctx context.Context, es []*Entry, candidates []string, target string, seq uint32) error {
	return s.loopWrite(ctx, "begin", func(tx *sql.Tx) error {
		// The move the batch would make, known before the target can move.
		if err := s.writePending(ctx, tx, target, candidates[len(candidates)-1]); err != nil {
			return err
		}
		now := s.stamp()
		for i, e := range es {
			attempts := e.Attempts
			eseq := seq
			if eseq == 0 {
				eseq = e.GateSeq // no new gate run: the one that passed already, if any
			}
			if eseq != 0 && eseq != e.GateSeq {
				attempts++ // a new gate run, not the one that passed already
			}
			candidate := candidates[i]
			if _, err := tx.ExecContext(ctx, `UPDATE merge_queue SET state = 'testing', target = ?, candidate = ?, gate_seq = ?,
			attempts = ?, started_at = ? WHERE id = ?`, target, candidate, int64(eseq), attempts, now, e.ID); err != nil {
				return fmt.Errorf("merge queue: begin task %d: %w", e.Task, err)
			}
			reason := fmt.Sprintf("candidate %s on %s", short(candidate), short(target))
			if seq != 0 {
				reason += fmt.Sprintf(", gate run %d", seq)
			}
			if len(es) > 1 {
				reason += fmt.Sprintf(", batch of %d (%s)", len(es), taskList(es))
			}
			from := e.State
			e.State, e.Target, e.Candidate, e.GateSeq, e.Attempts, e.StartedAt = Testing, target, candidate, eseq, attempts, parseTime(now)
			if err := s.logEvent(ctx, tx, event{task: e.Task, from: string(from), to: string(Testing), name: "testing", reason: reason, seq: seq}); err != nil {
				return err
			}
		}
		return nil
	})
}

// taskList names the tasks of es: "tasks 3, 4 and 7".
func taskList(es []*Entry) string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = strconv.FormatInt(e.Task, 10)
	}
	if len(ids) == 1 {
		return "task " + ids[0]
	}
	return "tasks " + strings.Join(ids[:len(ids)-1], ", ") + " and " + ids[len(ids)-1]
}

// finish records e's result: merged at commit, or rejected with detail.
func (s *Store) finish(ctx context.Context, e *Entry, res, commit, detail string) error {
	return s.finishBatch(ctx, []result{{e: e, result: res, commit: commit, detail: detail}}, nil)
}

// result is one entry's result, for finishBatch.
type result struct {
	e              *Entry
	result         string // ResultMerged or a Kind
	commit, detail string
}

// finishBatch records the results of several entries in one transaction:
// the entries of a batch whose target moved are merged together, with the
// target's new tip (tip, nil when it did not move).
//
// A batch that ends without moving the target drops its move begun
// (dropPending); one with an entry merged and no tip (landed: the target
// holds its candidate already, its move's record was cut off) keeps it, as
// what tells the next start that the target's tip is the queue's.
func (s *Store) finishBatch(ctx context.Context, rs []result, tip *tipWrite) error {
	return s.loopWrite(ctx, "finish", func(tx *sql.Tx) error {
		if tip == nil && len(rs) > 0 && !slices.ContainsFunc(rs, func(r result) bool { return r.result == ResultMerged }) {
			if err := s.dropPending(ctx, tx, rs[len(rs)-1].e.Candidate); err != nil {
				return err
			}
		}
		if err := s.writeTip(ctx, tx, tip); err != nil {
			return err
		}
		now := s.stamp()
		for _, r := range rs {
			e := r.e
			to := Merged
			if r.result != ResultMerged {
				to = Rejected
			}
			candidate := e.Candidate
			if to == Merged {
				candidate = r.commit
			}
			if _, err := tx.ExecContext(ctx, `UPDATE merge_queue SET state = ?, result = ?, detail = ?, candidate = ?,
			finished_at = ? WHERE id = ?`, string(to), r.result, r.detail, candidate, now, e.ID); err != nil {
				return fmt.Errorf("merge queue: finish task %d: %w", e.Task, err)
			}
			from := e.State
			e.State, e.Result, e.Detail, e.Candidate, e.FinishedAt = to, r.result, r.detail, candidate, parseTime(now)
			reason, name := r.result, string(to)
			if to == Merged {
				reason = fmt.Sprintf("%s at %s", r.result, short(r.commit))
			} else if r.detail != "" {
				reason += ": " + firstLines(r.detail, 3)
			}
			if r.result == string(KindStale) {
				name = "dropped" // not a rejection of the task's work
			}
			if err := s.logEvent(ctx, tx, event{task: e.Task, from: string(from), to: string(to), name: name, reason: reason, seq: e.GateSeq}); err != nil {
				return err
			}
		}
		return nil
	})
}

// requeue puts an entry under test back to queued, first in line still
// (its id does not change): the target moved, or the daemon stopped.
func (s *Store) requeue(ctx context.Context, e *Entry, why string) error {
	return s.requeueBatch(ctx, []*Entry{e}, why)
}

// requeueBatch puts the entries of a batch back to queued together; the
// target did not move to the batch's candidate (dropPending).
func (s *Store) requeueBatch(ctx context.Context, es []*Entry, why string) error {
	return s.requeueEntries(ctx, es, why, true)
}

// requeueInDoubt is requeueBatch for a batch whose move of the target
// failed in a way that does not say whether the ref moved: the move stays
// recorded as begun, so that a start finding the target there takes it for
// the queue's.
func (s *Store) requeueInDoubt(ctx context.Context, es []*Entry, why string) error {
	return s.requeueEntries(ctx, es, why, false)
}

func (s *Store) requeueEntries(ctx context.Context, es []*Entry, why string, drop bool) error {
	return s.loopWrite(ctx, "requeue", func(tx *sql.Tx) error {
		if drop && len(es) > 0 {
			if err := s.dropPending(ctx, tx, es[len(es)-1].Candidate); err != nil {
				return err
			}
		}
		for _, e := range es {
			res, err := tx.ExecContext(ctx, `UPDATE merge_queue SET state = 'queued' WHERE id = ? AND state = 'testing'`, e.ID)
			if err != nil {
				return fmt.Errorf("merge queue: requeue task %d: %w", e.Task, err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				continue
			}
			e.State = Queued
			if err := s.logEvent(ctx, tx, event{task: e.Task, from: string(Testing), to: string(Queued), name: "requeued", reason: why, seq: e.GateSeq}); err != nil {
				return err
			}
		}
		return nil
	})
}

// mergeAgain puts a merged entry whose result was not reported back to
// queued, first in line (its id): its merge commit is on no target the
// queue reports (mergeAgain's caller, report).
func (s *Store) mergeAgain(ctx context.Context, e Entry, why string) error {
	return s.loopWrite(ctx, "merge again", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE merge_queue SET state = 'queued', result = '', detail = '', candidate = '',
			finished_at = '' WHERE id = ? AND state = 'merged' AND notified = 0`, e.ID)
		if err != nil {
			return fmt.Errorf("merge queue: merge task %d again: %w", e.Task, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		return s.logEvent(ctx, tx, event{task: e.Task, from: string(Merged), to: string(Queued), name: "requeued", reason: why, seq: e.GateSeq})
	})
}

// unnotified lists finished entries whose result the caller has not taken.
func (s *Store) unnotified(ctx context.Context) ([]Entry, error) {
	es, err := queryEntries(ctx, s.db.ReadSQL(), `WHERE notified = 0 AND state IN ('merged', 'rejected') ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("merge queue: results to report: %w", err)
	}
	return es, nil
}

func (s *Store) markNotified(ctx context.Context, id int64) error {
	return s.loopWrite(ctx, "mark reported", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE merge_queue SET notified = 1 WHERE id = ?`, id)
		return err
	})
}

// oneLine folds text into one line for the event log.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// firstLines is the first n lines of s, joined with "; ".
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("(%d more)", len(lines)-n))
	}
	return strings.Join(lines, "; ")
}

// FloorGateSeq makes the next gate run's number at least seq+1: a store
// restored from a backup counts the runs only up to the backup, and the
// logs of the runs since are in logs/merge/ still (a number used again
// would add a run's output to another's log).
func (s *Store) FloorGateSeq(ctx context.Context, seq uint32) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("merge queue: floor the gate runs' numbers: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE merge_control SET gate_seq = ? WHERE id = 1 AND gate_seq < ?`, int64(seq), int64(seq)); err != nil {
		return fmt.Errorf("merge queue: floor the gate runs' numbers: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("merge queue: floor the gate runs' numbers: %w", err)
	}
	return nil
}

// GateSeq is the number of the last gate run (0: none yet).
func (s *Store) GateSeq(ctx context.Context) (uint32, error) {
	var seq int64
	if err := s.db.ReadSQL().QueryRowContext(ctx, `SELECT gate_seq FROM merge_control WHERE id = 1`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("merge queue: read the gate runs' number: %w", err)
	}
	return uint32(seq), nil
}
