// Package taskboard is the task board in swarm.db: tasks the swarm claims,
// reports on and finishes, moved only along seed 004's transition table
// (package task decides; this package stores). Every transition is written
// with its event (actor, reason, TransitionReason) in one transaction, and
// what follows from it happens in the same transaction: a dependency's
// CLOSED opens the tasks that waited for it, a subtask's DONE finishes its
// parent, a DONE task is CLOSED at once when nothing reviews or merges it.
//
// Every write is a BEGIN IMMEDIATE transaction on the database's one write
// connection, and across processes SQLite's write lock orders them, so a
// task is claimed once however many claimants race.
package taskboard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
)

// DB is the database the board lives in. *store.DB satisfies it.
type DB interface {
	Begin(ctx context.Context) (*store.Tx, error) // a write transaction, in the writer's turn
	ReadSQL() *store.Pool                         // the read pool, its statements prepared once
	// WrapFor names the operation and classifies a storage failure (the
	// file gone, the disk full).
	WrapFor(pkg, op string, err error) error
	// FenceTx refuses, in tx, a write for an agent whose lease this daemon
	// no longer holds (a shared store; a no-op otherwise).
	FenceTx(ctx context.Context, tx *sql.Tx, agent string) error
	// Grouped applies a write in the next transaction of g, with the
	// writes of this process that wait for the writer's turn with it.
	Grouped(ctx context.Context, g *store.Group, do func(context.Context, *sql.Tx) error) (int, error)
	// GroupedThen is Grouped for a write whose questions go to the store
	// with the rest of its batch's, and whose answers then reads.
	GroupedThen(ctx context.Context, g *store.Group, do func(context.Context, *sql.Tx) (func() error, error)) (int, error)
	// IsFile is false on PostgreSQL, whose identity a reserved id must
	// move past (Reserve).
	IsFile() bool
}

// Sentinels; errors wrap them with the task and what to do.
var (
	ErrNotFound = errors.New("no such task")
	ErrInvalid  = errors.New("invalid task request")
	// ErrState: the request is not allowed in the task's current state.
	ErrState = errors.New("not allowed in the task's state")
	// ErrNotHolder: the task is held by another agent or session (a stale
	// claimant is fenced out).
	ErrNotHolder = errors.New("task held by someone else")
)

// NotMergeable is why a merge entry is not to be merged now (Mergeable): its
// commit is not its task's frozen head, or the task is not ready to merge.
// It wraps ErrState; Why is the reason alone, as the merge queue shows it.
type NotMergeable struct{ Why string }

func (e *NotMergeable) Error() string { return e.Why + ": " + ErrState.Error() }
func (e *NotMergeable) Unwrap() error { return ErrState }

// Limits on what a task holds.
const (
	MaxTitleBytes = 512
	MaxBodyBytes  = 64 << 10
)

// Task is one row of the board.
type Task struct {
	ID            int64      `json:"id"`
	Title         string     `json:"title"`
	Body          string     `json:"body,omitempty"`
	Priority      int        `json:"priority"`
	State         task.State `json:"-"`
	StateName     string     `json:"state"`
	Assignee      string     `json:"assignee,omitempty"`
	Parent        int64      `json:"parent,omitempty"`
	Deps          []int64    `json:"after,omitempty"`
	Claimant      string     `json:"claimant,omitempty"`
	ClaimSession  string     `json:"claim_session,omitempty"`
	Retries       int        `json:"retries"`
	MaxRetries    int        `json:"max_retries"`
	BlockedReason string     `json:"blocked_reason,omitempty"`
	Result        string     `json:"result,omitempty"`
	// The review loop (seed 002); ReviewState "" when nobody reviews it.
	Reviewer      string `json:"reviewer,omitempty"`
	MaxIterations int    `json:"max_iterations,omitempty"`
	ReviewState   string `json:"review_state,omitempty"` // init, working, reviewing, complete, failed
	Iteration     int    `json:"iteration,omitempty"`
	Worker        string `json:"worker,omitempty"` // whose work is reviewed
	ReviewFailure string `json:"review_failure,omitempty"`
	// WorkHead is where the task's line of commits stood when the last
	// session that held it ended ("": none yet, or a new attempt); Head is
	// the commit frozen when it was reported DONE, what is reviewed and
	// merged.
	WorkHead string `json:"work_head,omitempty"`
	Head     string `json:"head,omitempty"`
	// HeldOver names the daemon whose orderly stop left the task with its
	// claimant (HoldOver), until its next start gives it back (Recover);
	// "" otherwise.
	HeldOver  string    `json:"held_over,omitempty"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`

	// undepended: the read of this row in a write transaction saw no task
	// depend on it, so its close has none to unblock, and asks no more
	// (false: not known, and a close looks).
	undepended bool
}

// Event is one transition of a task, as the event log holds it.
type Event struct {
	ID               int64     `json:"id"`
	At               time.Time `json:"at"`
	From             string    `json:"from"`
	To               string    `json:"to"`
	Actor            string    `json:"actor"`
	Reason           string    `json:"reason,omitempty"`
	TransitionReason string    `json:"transition_reason,omitempty"`
	// AbortReason is seed 004's classification of the abnormal agent end
	// that moved the task (task.AbortReason), "" for none.
	AbortReason string `json:"abort_reason,omitempty"`
	Session     string `json:"session,omitempty"`
}

// Options configure a Board.
type Options struct {
	// AutoClose closes a DONE task at once (DONE -> CLOSED, "completed")
	// when no reviewer has it: nothing merges it. Dependencies wait for
	// CLOSED.
	AutoClose bool
	// FrozenHead refuses an agent's DONE that freezes no commit (a merge
	// queue takes the task's frozen head; without one it would take
	// whatever the branch points at when the review passes, which the
	// agent's sandbox can move after the reviewer was shown it).
	FrozenHead bool
	// ReviewerOf is the reviewer and max_iterations an agent's config gives
	// the tasks it claims that name none; nil or "" for none.
	ReviewerOf func(agent string) (reviewer string, maxIterations int)
	// ReviewOnly, if set, names the agents that claim no unassigned task
	// (reviewers: config claims); a task assigned to one it still may.
	ReviewOnly func(agent string) bool
	Now        func() time.Time // nil: time.Now
}

// Board is the task board. Safe for concurrent use.
type Board struct {
	db   DB
	opts Options
	// claims commits the claims of this process's agents that wait for
	// the writer's turn together: a swarm's agents claim at once (a
	// daemon's start, a batch of tasks added), and a commit is most of a
	// claim's cost.
	claims store.Group
}

// New returns the board stored in db.
func New(db DB, opts Options) *Board {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Board{db: db, opts: opts, claims: store.Group{Pkg: "taskboard", Op: "claim"}}
}

func (b *Board) now() string { return store.FormatTime(b.opts.Now()) }

const taskCols = `id, title, body, priority, state, assignee, IFNULL(parent_id, 0), claimant, claim_session,
	retries, max_retries, blocked_reason, result, reviewer, max_iterations, review_state, iteration,
	worker, review_failure, work_head, head, held_over, created_by, created_at, updated_at`

type scanner interface{ Scan(...any) error }

func scanTask(s scanner) (Task, error) {
	var (
		t                Task
		state            string
		created, updated string
	)
	if err := s.Scan(&t.ID, &t.Title, &t.Body, &t.Priority, &state, &t.Assignee, &t.Parent, &t.Claimant,
		&t.ClaimSession, &t.Retries, &t.MaxRetries, &t.BlockedReason, &t.Result, &t.Reviewer,
		&t.MaxIterations, &t.ReviewState, &t.Iteration, &t.Worker, &t.ReviewFailure, &t.WorkHead, &t.Head, &t.HeldOver, &t.CreatedBy,
		&created, &updated); err != nil {
		return Task{}, err
	}
	var err error
	if t.State, err = task.ParseState(state); err != nil {
		return Task{}, fmt.Errorf("task %d: %w", t.ID, err)
	}
	t.StateName = t.State.String()
	t.CreatedAt, _ = store.ParseTime(created)
	t.UpdatedAt, _ = store.ParseTime(updated)
	return t, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func queryTasks(ctx context.Context, q querier, query string, args ...any) ([]Task, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return scanTasks(rows)
}

// scanTasks reads rows of taskCols to the end, and closes them.
func scanTasks(rows *sql.Rows) ([]Task, error) {
	defer rows.Close()
	var out []Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func getTask(ctx context.Context, q querier, id int64) (Task, error) {
	var depended bool
	ts, err := queryTasksDeps(ctx, q, `SELECT `+taskDepsCols+`, dependents > 0 FROM tasks WHERE id = ?`, []any{&depended}, id)
	if err != nil {
		return Task{}, err
	}
	if len(ts) == 0 {
		return Task{}, fmt.Errorf("task %d: %w", id, ErrNotFound)
	}
	// Whether anything depends on it, in the same row: a close asked in a
	// query of its own, a round trip in the writers' turn for every task.
	// The count is the row's own (kept by task_deps' triggers): an EXISTS
	// on task_deps read all of it under PostgreSQL's generic plan when a
	// backlog waits for one task.
	ts[0].undepended = !depended
	return ts[0], nil
}

// taskDepsCols is taskCols and the task's dependencies, in its own row: a
// query of their own was a round trip more, four times a task under the
// writers' turn, and one per task listed.
const taskDepsCols = taskCols + `,
	(SELECT group_concat(CAST(dep_id AS TEXT), ',') FROM task_deps WHERE task_id = tasks.id)`

// queryTasksDeps is queryTasks for a query of taskDepsCols, and of the
// columns more that extra scans (the last row's), if any.
func queryTasksDeps(ctx context.Context, q querier, query string, extra []any, args ...any) ([]Task, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Task
	for rows.Next() {
		var ds sql.NullString
		t, err := scanTask(withExtra{rows, append([]any{&ds}, extra...)})
		if err != nil {
			return nil, err
		}
		if t.Deps, err = parseDeps(ds.String); err != nil {
			return nil, fmt.Errorf("task %d: dependencies %q: %w", t.ID, ds.String, err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// withExtra scans a row of taskCols and the columns more, into extra.
type withExtra struct {
	s     scanner
	extra []any
}

func (w withExtra) Scan(dst ...any) error { return w.s.Scan(append(dst, w.extra...)...) }

// parseDeps reads group_concat's list of ids, in no set order, sorted.
func parseDeps(list string) ([]int64, error) {
	if list == "" {
		return nil, nil
	}
	var out []int64
	for f := range strings.SplitSeq(list, ",") {
		d, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return out, nil
}

// write runs f in one IMMEDIATE transaction on the file the board opened
// (Begin refuses once the path leads elsewhere).
func (b *Board) write(ctx context.Context, op string, f func(tx *sql.Tx) error) error {
	tx, err := b.db.Begin(ctx)
	if err != nil {
		return b.db.WrapFor("taskboard", op, err) // a full disk, a read-only file: named with its path
	}
	defer tx.Rollback()
	if err := f(tx.Tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return b.db.WrapFor("taskboard", op, err)
	}
	return nil
}

// move is one transition of t, checked by the seed machine, stored with its
// event, followed by what it sets off. set adds column assignments for the
// same UPDATE ("claimant = ?" and its values).
type move struct {
	to      task.State
	reason  task.TransitionReason
	abort   task.AbortReason // the abnormal agent end that caused it, "" none
	actor   string
	why     string
	session string
	set     []string
	args    []any
}

// released is a move's column assignments for a task that nobody holds any
// more: no claimant, no session, followed by the move's own assignments.
func released(more ...string) []string {
	return append([]string{"claimant = ''", "claim_session = ''"}, more...)
}

// newLine is released for a task whose next holder starts over (requeued,
// orphaned): its earlier attempt's commits are fenced off, never reviewed
// or merged.
func newLine(more ...string) []string {
	return released(append([]string{"work_head = ''", "head = ''"}, more...)...)
}

func (b *Board) apply(ctx context.Context, tx *sql.Tx, t *Task, m move) error {
	at := b.opts.Now()
	machine, ev, err := b.decide(t, m, at)
	if err != nil {
		return err
	}
	now := store.FormatTime(at)
	// Any move ends a hold over a stop (HoldOver): the task is no longer
	// as the stop left it.
	set := append([]string{"state = ?", "retries = ?", "updated_at = ?", "held_over = ''"}, m.set...)
	args := append([]any{m.to.String(), int64(machine.Retries()), now}, m.args...)
	// The row was read in tx and the move checked against it: the UPDATE
	// changes it, so nothing of its result is read, and on PostgreSQL it
	// goes with the transaction's next statement (store.Deferred).
	if _, err := tx.ExecContext(store.Deferred(ctx), `UPDATE tasks SET `+strings.Join(set, ", ")+` WHERE id = ?`,
		append(args, t.ID)...); err != nil {
		return fmt.Errorf("taskboard: task %d to %s: %w", t.ID, m.to, err)
	}
	return b.applied(ctx, tx, t, m, machine, ev, now)
}

// decide has the task machine check m from t's state: it returns the
// machine after the move and the event to record, or why the move is
// refused.
func (b *Board) decide(t *Task, m move, at time.Time) (task.Task, task.LifecycleEvent, error) {
	machine, err := task.Restore(strconv.FormatInt(t.ID, 10), t.State, uint32(t.Retries), uint32(t.MaxRetries))
	if err != nil {
		return task.Task{}, task.LifecycleEvent{}, fmt.Errorf("taskboard: task %d: %w", t.ID, err)
	}
	ev, err := machine.Transition(m.to, m.reason, m.actor, m.why, at)
	if err != nil {
		var ill *task.IllegalTransitionError
		if errors.As(err, &ill) {
			return task.Task{}, task.LifecycleEvent{}, fmt.Errorf("task %d is %s: it cannot go to %s: %w", t.ID, t.State, m.to, ErrState)
		}
		return task.Task{}, task.LifecycleEvent{}, fmt.Errorf("task %d: %w", t.ID, err)
	}
	if m.abort != "" && !m.abort.Valid() {
		return task.Task{}, task.LifecycleEvent{}, fmt.Errorf("task %d: abort reason %q: %w", t.ID, string(m.abort), task.ErrUnknownReason)
	}
	ev.AbortReason = m.abort
	return machine, ev, nil
}

// applied records the move the task's row has been written with: its
// event row, t brought up to date, and what the new state sets off.
func (b *Board) applied(ctx context.Context, tx *sql.Tx, t *Task, m move, machine task.Task, ev task.LifecycleEvent, now string) error {
	if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
		abort_reason, session_id, seq, task_id) VALUES (?, ?, ?, ?, ?, 'task', ?, ?, ?, ?, 0, ?)`,
		now, agentOf(m.actor), ev.From.String(), string(ev.TransitionReason), ev.To.String(), m.actor, m.why,
		string(ev.AbortReason), m.session, t.ID); err != nil {
		return fmt.Errorf("taskboard: task %d event: %w", t.ID, err)
	}
	t.State, t.Retries, t.StateName = m.to, int(machine.Retries()), m.to.String()
	return b.cascade(ctx, tx, t)
}

// agentOf is the agent an actor names ("agent:alice" or "alice"), "" for
// the operator and swarmd itself.
func agentOf(actor string) string {
	a := strings.TrimPrefix(actor, "agent:")
	switch a {
	case "operator", "swarmd", "runner", "daemon", "merge-queue":
		return ""
	}
	return a
}

// cascade carries out what t's new state sets off.
func (b *Board) cascade(ctx context.Context, tx *sql.Tx, t *Task) error {
	switch t.State {
	case task.Done:
		if err := b.parentCheck(ctx, tx, t.Parent); err != nil {
			return err
		}
		if b.opts.AutoClose && t.ReviewState != review.Reviewing.String() {
			return b.apply(ctx, tx, t, move{to: task.Closed, reason: task.ReasonCompleted, actor: "swarmd",
				why: "done, and nothing reviews or merges it"})
		}
	case task.Closed:
		if err := b.parentCheck(ctx, tx, t.Parent); err != nil {
			return err
		}
		if t.undepended {
			return nil
		}
		return b.unblockDependents(ctx, tx, t.ID)
	}
	return nil
}

// parentCheck finishes a parent waiting for its subtasks when every child is
// DONE or CLOSED.
func (b *Board) parentCheck(ctx context.Context, tx *sql.Tx, parent int64) error {
	if parent == 0 {
		return nil
	}
	p, err := getTask(ctx, tx, parent)
	if err != nil {
		return err
	}
	if p.State == task.Done {
		return b.closeParent(ctx, tx, &p)
	}
	if p.State != task.WaitingForSubtasks {
		return nil
	}
	// A subtask DONE but still under review is not done: its reviewer may
	// send it back.
	var open int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE parent_id = ?
		AND (state NOT IN ('DONE', 'CLOSED') OR state = 'DONE' AND review_state = 'reviewing')`,
		parent).Scan(&open); err != nil {
		return err
	}
	if open > 0 {
		return nil
	}
	// The parent's DONE goes to its reviewer like any (docs/task-lifecycle.md,
	// "a fast or indirect DONE"): closed unreviewed, it opened its
	// dependents on work no reviewer passed.
	m := move{to: task.Done, reason: task.ReasonCompleted, actor: "swarmd", why: "every subtask is done"}
	if err := b.reviewOnDone(&p, &m); err != nil {
		return err
	}
	if err := b.apply(ctx, tx, &p, m); err != nil {
		return err
	}
	return b.closeParent(ctx, tx, &p)
}

// closeParent closes p, a DONE task that was split into subtasks, once it
// waits for nothing more: its review passed (or it has none) and every
// subtask is CLOSED, that is merged. With a merge queue (no AutoClose)
// nothing else would close it: a split parent has no change of its own
// (its worker gave it up for its subtasks), so the queue never takes it
// (readyToMergeSQL), where it would have merged whatever its last
// worker's branch held by then, that worker's next task included.
// Without a merge queue cascade closes it at its DONE.
func (b *Board) closeParent(ctx context.Context, tx *sql.Tx, p *Task) error {
	if rs := p.ReviewState; b.opts.AutoClose || p.State != task.Done || rs != "" && rs != review.Complete.String() {
		return nil // a review still to pass, as readyToMergeSQL asks
	}
	if p.Head != "" {
		return nil // reported done at a head after the split: the queue merges it
	}
	var kids, open int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN state <> 'CLOSED' THEN 1 ELSE 0 END), 0)
		FROM tasks WHERE parent_id = ?`, p.ID).Scan(&kids, &open); err != nil {
		return fmt.Errorf("taskboard: task %d's subtasks: %w", p.ID, err)
	}
	if kids == 0 || open > 0 {
		return nil
	}
	return b.apply(ctx, tx, p, move{to: task.Closed, reason: task.ReasonCompleted, actor: "swarmd",
		why: "every subtask is merged; a split task has no change of its own"})
}

// unblockDependents opens the tasks that waited only for dependencies, once
// all of theirs are CLOSED.
func (b *Board) unblockDependents(ctx context.Context, tx *sql.Tx, dep int64) error {
	ts, err := queryTasks(ctx, tx, `SELECT `+taskCols+` FROM tasks WHERE state = 'BLOCKED' AND blocked_reason = ''
		AND id IN (SELECT task_id FROM task_deps WHERE dep_id = ?)
		AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks o ON o.id = d.dep_id
			WHERE d.task_id = tasks.id AND o.state <> 'CLOSED')`, dep)
	if err != nil {
		return err
	}
	for i := range ts {
		if err := b.apply(ctx, tx, &ts[i], move{to: task.Open, actor: "swarmd",
			why: "every dependency is closed", set: released()}); err != nil {
			return err
		}
	}
	return nil
}

func getTime(s string) (time.Time, error) { return store.ParseTime(s) }
