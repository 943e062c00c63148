package taskboard

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

	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
)

// NewTask is a task to add.
type NewTask struct {
	Title      string
	Body       string
	Priority   int
	Assignee   string  // "" : any agent
	Parent     int64   // 0 : none
	After      []int64 // dependencies: the task waits in BLOCKED until each is CLOSED
	Plan       bool    // created PLANNED, waiting for Approve
	MaxRetries int     // 0 : task.DefaultMaxRetries
	// Reviewer reviews the work before the task closes (the review loop);
	// "" : the claimant's config decides. MaxIterations 0: the default, 3.
	Reviewer      string
	MaxIterations int
	CreatedBy     string
}

// reviewAgentsTask gives a task an agent adds the adder's reviewer where
// the work would otherwise be reviewed by no one: a reviewed agent's
// request must not become unreviewed work by naming an agent nobody
// reviews (its own reviewer, say, which does what a task asks), nor by
// being left for one to claim. A task for the adder's own reviewer is
// refused: nobody would review it, and that reviewer cannot review work
// of its own.
func (b *Board) reviewAgentsTask(n *NewTask) error {
	by, ok := strings.CutPrefix(n.CreatedBy, "agent:")
	if !ok || n.Reviewer != "" || b.opts.ReviewerOf == nil {
		return nil
	}
	reviewer, max := b.opts.ReviewerOf(by)
	if reviewer == "" || reviewer == by {
		return nil // the adder's own work is not reviewed either
	}
	if n.Assignee != "" {
		if r, _ := b.opts.ReviewerOf(n.Assignee); r != "" && r != n.Assignee {
			return nil // its assignee's reviewer reviews it
		}
		if n.Assignee == reviewer {
			return invalidf("%s reviews your work, and nobody reviews its own: a task you add for it would reach the target unreviewed "+
				"(leave it for anyone, or ask the operator to add it)", reviewer)
		}
	}
	n.Reviewer = reviewer
	if n.MaxIterations == 0 {
		n.MaxIterations = max
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Add stores a new task: PLANNED with Plan, BLOCKED while a dependency is not
// CLOSED, OPEN otherwise. (Creation is not a transition of the seed's table:
// a task starts in the state that describes it.)
func (b *Board) Add(ctx context.Context, n NewTask) (Task, error) {
	n.Title = strings.TrimSpace(n.Title)
	switch {
	case n.Title == "":
		return Task{}, invalidf("a task needs a title")
	case len(n.Title) > MaxTitleBytes:
		return Task{}, invalidf("title is %d bytes, over the %d-byte limit", len(n.Title), MaxTitleBytes)
	case strings.ContainsAny(n.Title, "\r\n"):
		return Task{}, invalidf("title must be one line (put the details in the body)")
	case len(n.Body) > MaxBodyBytes:
		return Task{}, invalidf("body is %d bytes, over the %d-byte limit", len(n.Body), MaxBodyBytes)
	case n.MaxRetries < 0:
		return Task{}, invalidf("max retries %d is negative", n.MaxRetries)
	case n.CreatedBy == "":
		n.CreatedBy = "operator"
	}
	if n.MaxRetries == 0 {
		n.MaxRetries = int(task.DefaultMaxRetries)
	}
	if n.MaxIterations < 0 {
		return Task{}, invalidf("max iterations %d is negative", n.MaxIterations)
	}
	if err := b.reviewAgentsTask(&n); err != nil {
		return Task{}, err
	}
	reviewState, maxIterations := reviewOf(n.Reviewer, n.MaxIterations)
	n.MaxIterations = maxIterations
	var out Task
	err := b.write(ctx, "add", func(tx *sql.Tx) error {
		state := task.Open
		if n.Plan {
			state = task.Planned
		}
		if n.Parent != 0 {
			if _, err := getTask(ctx, tx, n.Parent); err != nil {
				return fmt.Errorf("parent: %w", err)
			}
		}
		for _, d := range n.After {
			dt, err := getTask(ctx, tx, d)
			if err != nil {
				return fmt.Errorf("dependency: %w", err)
			}
			if dt.State != task.Closed && !n.Plan {
				state = task.Blocked
			}
		}
		now := b.now()
		var parent any
		if n.Parent != 0 {
			parent = n.Parent
		}
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO tasks (title, body, priority, state, assignee, parent_id, max_retries,
			reviewer, max_iterations, review_state, created_by, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			n.Title, n.Body, n.Priority, state.String(), n.Assignee, parent, n.MaxRetries,
			n.Reviewer, n.MaxIterations, reviewState, n.CreatedBy, now, now).Scan(&id); err != nil {
			return fmt.Errorf("taskboard: add: %w", err)
		}
		for _, d := range n.After {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO task_deps (task_id, dep_id) VALUES (?, ?)`, id, d); err != nil {
				return fmt.Errorf("taskboard: add: %w", err)
			}
		}
		if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
			session_id, seq, task_id) VALUES (?, ?, '', '', ?, 'task', ?, ?, '', 0, ?)`,
			now, agentOf(n.CreatedBy), state.String(), n.CreatedBy, "added: "+n.Title, id); err != nil {
			return fmt.Errorf("taskboard: add: %w", err)
		}
		var err error
		out, err = getTask(ctx, tx, id)
		return err
	})
	return out, err
}

// Get returns one task with its dependencies.
func (b *Board) Get(ctx context.Context, id int64) (Task, error) {
	return getTask(ctx, b.db.ReadSQL(), id)
}

// Titles returns the titles of the tasks ids name, by id, in one read;
// an id no task has is absent.
func (b *Board) Titles(ctx context.Context, ids []int64) (map[int64]string, error) {
	out := make(map[int64]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := b.db.ReadSQL().QueryContext(ctx, `SELECT id, title FROM tasks WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("taskboard: titles: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var title string
		if err := rows.Scan(&id, &title); err != nil {
			return nil, fmt.Errorf("taskboard: titles: %w", err)
		}
		out[id] = title
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("taskboard: titles: %w", err)
	}
	return out, nil
}

// Filter selects tasks for List.
type Filter struct {
	State    *task.State
	Agent    string // assigned to or held by
	Assigned bool   // only tasks assigned to an agent
}

// Subtasks returns the tasks id was split into, by id.
func (b *Board) Subtasks(ctx context.Context, id int64) ([]Task, error) {
	ts, err := queryTasks(ctx, b.db.ReadSQL(), `SELECT `+taskCols+` FROM tasks WHERE parent_id = ? ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("taskboard: subtasks of %d: %w", id, err)
	}
	return ts, nil
}

// List returns the tasks that match f, by id.
func (b *Board) List(ctx context.Context, f Filter) ([]Task, error) {
	q, args := listSQL(f)
	ts, err := queryTasksDeps(ctx, b.db.ReadSQL(), q, nil, args...)
	if err != nil {
		return nil, fmt.Errorf("taskboard: list: %w", err)
	}
	return ts, nil
}

// listSQL is List's query of f, and its arguments.
func listSQL(f Filter) (string, []any) {
	var where []string
	var args []any
	if f.State != nil {
		where = append(where, "state = ?")
		args = append(args, f.State.String())
		// A bound state matches no partial index's term (SQLite plans the
		// statement before it sees the value), so every state read the
		// whole table (the inbox asks at each change of the board): the
		// term of tasks_over or tasks_not_over, as written, says which
		// index holds it. Not over, that is the live board, not its
		// history.
		switch *f.State {
		case task.Closed, task.Cancelled:
			where = append(where, over)
		default:
			where = append(where, notOver)
		}
	}
	if f.Agent != "" {
		where = append(where, "(assignee = ? OR claimant = ?)")
		args = append(args, f.Agent, f.Agent)
	}
	if f.Assigned {
		where = append(where, "assignee <> ''") // OPEN: the index tasks_open_assigned
	}
	q := `SELECT ` + taskDepsCols + ` FROM tasks`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	return q + ` ORDER BY id`, args
}

// notOver and over are the terms of the indexes tasks_not_over and
// tasks_over, written as their migration writes them: a partial index
// serves a query whose WHERE has its term as written.
const (
	notOver = `state NOT IN ('CLOSED', 'CANCELLED')`
	over    = `state IN ('CLOSED', 'CANCELLED')`
)

// Board is the board as the dashboards show it: every task that is not
// over (CLOSED or CANCELLED), by id, the recent most recently updated of
// those that are, newest first, and every state's count. Its reads grow
// with the tasks not over, not with the history of those over (the
// indexes tasks_not_over and tasks_over, and their counts kept by
// triggers in tasks_over_count).
func (b *Board) Board(ctx context.Context, recent int) (open, done []Task, counts map[task.State]int, err error) {
	q, recent := b.db.ReadSQL(), max(recent, 0)
	if open, err = queryTasks(ctx, q, `SELECT `+taskCols+` FROM tasks WHERE `+notOver+` ORDER BY id`); err != nil {
		return nil, nil, nil, fmt.Errorf("taskboard: board: %w", err)
	}
	counts = make(map[task.State]int, task.NumStates)
	for _, t := range open {
		counts[t.State]++
	}
	for _, st := range []task.State{task.Closed, task.Cancelled} {
		var n int
		if err := q.QueryRowContext(ctx, `SELECT n FROM tasks_over_count WHERE state = ?`, st.String()).Scan(&n); err != nil {
			return nil, nil, nil, fmt.Errorf("taskboard: board: %w", err)
		}
		counts[st] = n
		if n == 0 || recent <= 0 {
			continue
		}
		ts, err := queryTasks(ctx, q, `SELECT `+taskCols+` FROM tasks WHERE `+over+` AND state = ?
			ORDER BY updated_at DESC, id DESC LIMIT ?`, st.String(), recent)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("taskboard: board: %w", err)
		}
		done = append(done, ts...)
	}
	slices.SortStableFunc(done, func(a, b Task) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	return open, done[:min(len(done), recent)], counts, nil
}

// Closed returns which of ids are CLOSED tasks (merged, or closed
// without a merge queue): a task's own row each, by its key, however long
// the board's history.
func (b *Board) Closed(ctx context.Context, ids []int64) (map[int64]bool, error) {
	out := make(map[int64]bool)
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, task.Closed.String())
		for _, id := range chunk {
			args = append(args, id)
		}
		closed, err := store.QueryAll(ctx, b.db.ReadSQL(), func(s store.Scanner) (int64, error) {
			var id int64
			return id, s.Scan(&id)
		}, `SELECT id FROM tasks WHERE state = ? AND id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("taskboard: closed: %w", err)
		}
		for _, id := range closed {
			out[id] = true
		}
	}
	return out, nil
}

// History is the task's event log, oldest first.
func (b *Board) History(ctx context.Context, id int64) ([]Event, error) {
	rows, err := b.db.ReadSQL().QueryContext(ctx, `SELECT id, at, from_state, to_state, actor, reason, event, abort_reason,
		session_id FROM events WHERE task_id = ? ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("taskboard: history: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var at string
		if err := rows.Scan(&e.ID, &at, &e.From, &e.To, &e.Actor, &e.Reason, &e.TransitionReason, &e.AbortReason, &e.Session); err != nil {
			return nil, fmt.Errorf("taskboard: history: %w", err)
		}
		e.At, _ = getTime(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// Reported reports whether session h moved task id to state to at since or
// later: a report whose COMMIT's answer was lost (on PostgreSQL a
// connection can die between the server's commit and its answer) is
// stored, and its caller, which retries it and finds the task moved on,
// must not be told that it failed. Ask it after the retry was refused: the
// refusal was decided under the writers' lock, which that commit released,
// so it is visible. since is a time of this process's clock (Options.Now)
// before the first attempt. (A start's event names the agent, not the
// session: the runner's start of the session's task and the session's own
// are one.)
func (b *Board) Reported(ctx context.Context, id int64, h Holder, to task.State, since time.Time) (bool, error) {
	var ok bool
	err := b.db.ReadSQL().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM events
		WHERE task_id = ? AND (session_id = ? OR (session_id = '' AND agent = ?)) AND to_state = ? AND at >= ?)`,
		id, h.Session, h.Agent, to.String(), store.FormatTime(since)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("taskboard: reported: %w", err)
	}
	return ok, nil
}

// Held is the task agent holds (CLAIMED or IN_PROGRESS), if any.
func (b *Board) Held(ctx context.Context, agent string) (Task, bool, error) {
	ts, err := queryTasks(ctx, b.db.ReadSQL(), `SELECT `+taskCols+` FROM tasks
		WHERE `+holding+` ORDER BY id LIMIT 1`, agent)
	if err != nil || len(ts) == 0 {
		return Task{}, false, err
	}
	return ts[0], true, nil
}

// HasClaimable reports whether agent could claim a task now. It only reads:
// an idle agent asks it on every wake-up.
func (b *Board) HasClaimable(ctx context.Context, agent string) (bool, error) {
	var ok bool
	err := b.db.ReadSQL().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE `+claimable+`)`, b.claimArgs(agent)...).Scan(&ok)
	return ok, err
}

// claimArgs are claimable's parameters for agent.
func (b *Board) claimArgs(agent string) []any {
	anyTask := 1
	if b.reviewOnly(agent) {
		anyTask = 0
	}
	return []any{agent, anyTask, agent}
}

func (b *Board) reviewOnly(agent string) bool {
	return b.opts.ReviewOnly != nil && b.opts.ReviewOnly(agent)
}

// Work is what the board has for an agent's next prompt, as one read saw
// it: a review waiting for its verdict (ReviewFor), a task it holds (Held),
// one it could claim (HasClaimable).
type Work struct{ Review, Held, Claimable bool }

// Any reports whether there is anything.
func (w Work) Any() bool { return w.Review || w.Held || w.Claimable }

// Work reads, once, what the board has for agent's next prompt: a prompt
// asks it before ReviewFor, Held and a claim, which the board usually
// answers with nothing, and then makes only the reads it says have
// something.
func (b *Board) Work(ctx context.Context, agent string) (Work, error) {
	var w Work
	err := b.db.ReadSQL().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE `+reviewing+`),
		EXISTS (SELECT 1 FROM tasks WHERE `+holding+`),
		EXISTS (SELECT 1 FROM tasks WHERE `+claimable+`)`, append([]any{agent, agent}, b.claimArgs(agent)...)...).Scan(&w.Review, &w.Held, &w.Claimable)
	if err != nil {
		return Work{}, b.db.WrapFor("taskboard", "work", err)
	}
	return w, nil
}

// holding is a task the agent (the one parameter) holds, found through
// the index of held tasks (tasks_held), whose condition this repeats, so
// that both engines' plans use it, PostgreSQL's generic plan of a prepared
// statement included: it reads the few tasks held, not the agent's history.
const holding = `claimant = ? AND ` + holdingState

// holdingState is tasks_held's term, as its migration writes it.
const holdingState = `state IN ('CLAIMED', 'IN_PROGRESS')`

// claimable is an OPEN task the agent may claim (claimArgs: the agent;
// 1 when it claims unassigned tasks, 0 when it only reviews; the agent)
// whose dependencies are all CLOSED (an approved PLANNED task can be OPEN
// before they are: the seed has no OPEN -> BLOCKED row). Never a task the
// agent is to review: nobody reviews their own work.
const claimable = `state = 'OPEN' AND (assignee = ? OR (assignee = '' AND ? = 1)) AND reviewer <> ? AND ` + depsClosed

// depsClosed: the task has no dependency that is not CLOSED. It is a
// scalar subquery, not NOT EXISTS, on purpose: PostgreSQL turns NOT EXISTS
// into an anti join that reads every dependency of the board on each call
// (10 ms a claim with 1,500 open tasks, under the writers' lock), where a
// scalar is probed per candidate through task_deps' key, in the open
// tasks' index order, and the first claimable one ends the search. Each
// dependency's state is a scalar of its own, looked up by id: joined,
// PostgreSQL merged task_deps with the tasks' key order and read the
// board's CLOSED tasks from the first (1 ms per probe with 1,500 of them).
// SQLite probes per row either way.
const depsClosed = `(SELECT COUNT(*) FROM task_deps d WHERE d.task_id = tasks.id
	AND (SELECT o.state FROM tasks o WHERE o.id = d.dep_id) <> 'CLOSED') = 0`

// claimNextSQL moves agent's best claimable task (highest priority, then
// oldest) to CLAIMED for a claimant and session at a time, and returns
// its row: one statement picks and writes it, where a SELECT and then an
// UPDATE by id would search the table twice while every other writer
// waits for the lock. Its parameters: the claimant, the session, the time,
// then claimArgs. The move is still the task machine's to decide
// (ClaimNext): the WHERE fixes the state it is made from, OPEN.
const claimNextSQL = `UPDATE tasks SET state = 'CLAIMED', claimant = ?, claim_session = ?, updated_at = ?
	WHERE id = (SELECT id FROM tasks WHERE ` + claimable + ` ORDER BY priority DESC, id LIMIT 1) RETURNING ` + taskCols

// ClaimNext claims agent's best OPEN task for session, if there is one. ok
// is false when there is none. HasClaimable answers that first, on a read
// connection: an agent with nothing to claim (woken for its mail, say)
// then never takes the writer's turn, which on a shared store is the
// swarm's; a claim pays for it with about a quarter of its CPU.
func (b *Board) ClaimNext(ctx context.Context, agent, session string) (t Task, ok bool, err error) {
	if has, err := b.HasClaimable(ctx, agent); err != nil || !has {
		return Task{}, false, err
	}
	return b.ClaimSeen(ctx, agent, session)
}

// ClaimSeen is ClaimNext for a caller that has just seen a task agent may
// claim (Work): it takes the writer's turn without reading first. With
// nothing left to claim by then it claims nothing, without error.
func (b *Board) ClaimSeen(ctx context.Context, agent, session string) (t Task, ok bool, err error) {
	// With the claims of other agents waiting at the same time, in one
	// transaction: each sees the ones before it, so no task is claimed
	// twice, and one refused (its lease lost, the machine) is left out
	// alone.
	//
	// The claim's UPDATE is asked first (held back on PostgreSQL) and its
	// row read after: the batch's claims go to the server together, each
	// seeing the ones before it, one round trip under the swarm's lock
	// for all of them (store.GroupedThen).
	_, err = b.db.GroupedThen(ctx, &b.claims, func(ctx context.Context, tx *sql.Tx) (func() error, error) {
		t, ok = Task{}, false // a batch may be applied again without another's write
		at := b.opts.Now()
		now := store.FormatTime(at)
		args := append([]any{agent, session, now}, b.claimArgs(agent)...)
		rows, err := tx.QueryContext(store.Deferred(ctx), claimNextSQL, args...)
		if err != nil {
			return nil, err
		}
		return func() (err error) {
			t, ok, err = b.claimed(ctx, tx, rows, agent, session, at, now)
			return err
		}, nil
	})
	if err != nil {
		return Task{}, false, err
	}
	return t, ok, nil
}

// claimed is the rest of ClaimSeen's claim once its UPDATE's rows come:
// the row claimed, if any, checked and moved by the machine, and recorded.
func (b *Board) claimed(ctx context.Context, tx *sql.Tx, rows *sql.Rows, agent, session string, at time.Time, now string) (Task, bool, error) {
	ts, err := scanTasks(rows)
	if err != nil || len(ts) == 0 {
		return Task{}, false, err
	}
	// Checked in the same transaction (writers take turns on either
	// engine), so a fenced claim is rolled back; after the UPDATE, so
	// that nothing to claim is still no error.
	if err := b.db.FenceTx(ctx, tx, agent); err != nil {
		return Task{}, false, err
	}
	t := ts[0]
	// The row as it was: the machine decides the move from it, and
	// anything it or the review loop refuses rolls the UPDATE back.
	t.State, t.StateName = task.Open, task.Open.String()
	m := claimMove(agent, session) // claimant and session are written already
	if err := b.reviewOnClaim(ctx, tx, &t, agent, &m); err != nil {
		return Task{}, false, err
	}
	machine, ev, err := b.decide(&t, m, at)
	if err != nil {
		return Task{}, false, err
	}
	if r := int(machine.Retries()); r != t.Retries {
		m.set, m.args = append(m.set, "retries = ?"), append(m.args, r)
	}
	if len(m.set) > 0 {
		// The review loop's start (or a new worker), in the same transaction.
		if _, err := tx.ExecContext(ctx, `UPDATE tasks SET `+strings.Join(m.set, ", ")+` WHERE id = ?`,
			append(m.args, t.ID)...); err != nil {
			return Task{}, false, fmt.Errorf("taskboard: task %d to %s: %w", t.ID, m.to, err)
		}
	}
	if err := b.applied(ctx, tx, &t, m, machine, ev, now); err != nil {
		return Task{}, false, err
	}
	return t, true, nil
}

// Claim claims task id for agent and session.
func (b *Board) Claim(ctx context.Context, id int64, agent, session string) (Task, error) {
	var t Task
	err := b.write(ctx, "claim", func(tx *sql.Tx) error {
		var err error
		if t, err = getTask(ctx, tx, id); err != nil {
			return err
		}
		switch {
		case t.Assignee != "" && t.Assignee != agent:
			return fmt.Errorf("task %d is assigned to %s, not %s: %w", id, t.Assignee, agent, ErrNotHolder)
		case t.Reviewer == agent:
			return fmt.Errorf("task %d is to be reviewed by %s: nobody reviews their own work: %w", id, agent, ErrNotHolder)
		case t.Assignee == "" && b.reviewOnly(agent):
			return fmt.Errorf("task %d is unassigned and %s only reviews (claims: false, or it reviews other agents' tasks): assign it with --to: %w",
				id, agent, ErrNotHolder)
		}
		if h, held, err := heldTx(ctx, tx, agent); err != nil {
			return err
		} else if held {
			return fmt.Errorf("%s already holds task %d (%s): finish, fail or block it first: %w", agent, h.ID, h.StateName, ErrState)
		}
		// As a claim of the best task (claimable): an approved PLANNED
		// task is OPEN before its dependencies are CLOSED, and its work
		// would start on a base without theirs.
		if dep, state, waits, err := openDep(ctx, tx, id); err != nil {
			return err
		} else if waits {
			return fmt.Errorf("task %d waits for task %d (%s): it can be claimed once every task it depends on is CLOSED: %w", id, dep, state, ErrState)
		}
		return b.claim(ctx, tx, &t, agent, session)
	})
	return t, err
}

// openDep is a dependency of task id that is not CLOSED, and its state.
func openDep(ctx context.Context, q querier, id int64) (dep int64, state string, ok bool, err error) {
	err = q.QueryRowContext(ctx, `SELECT d.dep_id, o.state FROM task_deps d JOIN tasks o ON o.id = d.dep_id
		WHERE d.task_id = ? AND o.state <> 'CLOSED' ORDER BY d.dep_id LIMIT 1`, id).Scan(&dep, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("taskboard: dependencies of task %d: %w", id, err)
	}
	return dep, state, true, nil
}

func heldTx(ctx context.Context, q querier, agent string) (Task, bool, error) {
	ts, err := queryTasks(ctx, q, `SELECT `+taskCols+` FROM tasks WHERE `+holding+` LIMIT 1`, agent)
	if err != nil || len(ts) == 0 {
		return Task{}, false, err
	}
	return ts[0], true, nil
}

func (b *Board) claim(ctx context.Context, tx *sql.Tx, t *Task, agent, session string) error {
	if err := b.db.FenceTx(ctx, tx, agent); err != nil {
		return err
	}
	t.Claimant, t.ClaimSession = agent, session
	m := claimMove(agent, session)
	m.set, m.args = []string{"claimant = ?", "claim_session = ?"}, []any{agent, session}
	if err := b.reviewOnClaim(ctx, tx, t, agent, &m); err != nil {
		return err
	}
	return b.apply(ctx, tx, t, m)
}

// claimMove is agent's claim of a task for session (Claim, ClaimNext).
func claimMove(agent, session string) move {
	return move{to: task.Claimed, actor: "agent:" + agent, why: "claimed", session: session}
}

// Holder names who asks to act on a held task: the agent and its session.
// An empty Agent is the operator, who may act on any task.
type Holder struct{ Agent, Session string }

func (h Holder) actor() string {
	if h.Agent == "" {
		return "operator"
	}
	return "agent:" + h.Agent
}

// check fences out whoever does not hold t: another agent, or a session of
// the same agent that is no longer the one working on it.
func (h Holder) check(t Task) error {
	if h.Agent == "" {
		return nil
	}
	if t.Claimant != h.Agent {
		who := "nobody"
		if t.Claimant != "" {
			who = t.Claimant
		}
		return fmt.Errorf("task %d is held by %s, not %s: %w", t.ID, who, h.Agent, ErrNotHolder)
	}
	if h.Session != "" && t.ClaimSession != h.Session {
		return fmt.Errorf("task %d belongs to session %s of %s, not %s: %w", t.ID, t.ClaimSession, h.Agent, h.Session, ErrNotHolder)
	}
	// Held is CLAIMED or IN_PROGRESS (holding). A task its agent reported
	// done keeps its claimant and session, but it is its reviewer's and
	// the merge queue's now: the session's final FAIL took it out of its
	// review (DONE -> FAILED, its loop left reviewing), and a review
	// session still running on the frozen head passed the head reported
	// at the task's next attempt, which it was never shown.
	if t.State != task.Claimed && t.State != task.InProgress {
		return fmt.Errorf("task %d is %s: %s holds it no more: %w", t.ID, t.State, h.Agent, ErrState)
	}
	return nil
}

// update loads task id, checks the holder and applies f's move in one
// transaction, and returns the row as stored, with what the move set.
func (b *Board) update(ctx context.Context, op string, id int64, h Holder, f func(t *Task) (move, error)) (Task, error) {
	var t Task
	err := b.write(ctx, op, func(tx *sql.Tx) error {
		var err error
		if t, err = b.updateTx(ctx, tx, id, h, f); err != nil {
			return err
		}
		t, err = getTask(ctx, tx, id)
		return err
	})
	return t, err
}

// updateTx is update in the caller's transaction. It returns the row as it
// read it, with the move's state: not read back, since the batches that
// call it need nothing more, and on PostgreSQL a read back is a round trip
// in the writers' turn.
func (b *Board) updateTx(ctx context.Context, tx *sql.Tx, id int64, h Holder, f func(t *Task) (move, error)) (Task, error) {
	t, err := getTask(ctx, tx, id)
	if err != nil {
		return t, err
	}
	return b.updateReadTx(ctx, tx, t, h, f)
}

// updateReadTx is updateTx on t, the task's row as read in tx.
func (b *Board) updateReadTx(ctx context.Context, tx *sql.Tx, t Task, h Holder, f func(t *Task) (move, error)) (Task, error) {
	if err := h.check(t); err != nil {
		return t, err
	}
	if h.Agent != "" {
		if err := b.db.FenceTx(ctx, tx, h.Agent); err != nil {
			return t, err
		}
	}
	m, err := f(&t)
	if err != nil {
		return t, err
	}
	if m.actor == "" {
		m.actor = h.actor()
	}
	if m.session == "" {
		m.session = h.Session
	}
	err = b.apply(ctx, tx, &t, m)
	return t, err
}

// Start is CLAIMED -> IN_PROGRESS: the holder's session works on it. It also
// moves the claim to that session.
func (b *Board) Start(ctx context.Context, id int64, h Holder) (Task, error) {
	return b.update(ctx, "start", id, Holder{Agent: h.Agent}, start(h.Session))
}

// StartTx is Start in the caller's transaction (a session's start, in
// package settle's batches).
func (b *Board) StartTx(ctx context.Context, tx *sql.Tx, id int64, h Holder) error {
	_, err := b.updateTx(ctx, tx, id, Holder{Agent: h.Agent}, start(h.Session))
	return err
}

// StartHeldTx is StartTx for a caller that commits tx before it needs to
// know whether the task moved (package settle's batches): the move is
// written for the row as it must be (CLAIMED, held by h's agent, with h's
// session's row recorded: the session begins in tx, or began) without
// reading it first, its event inserted under the same condition ahead of
// it, so both or neither apply, and on PostgreSQL both travel with tx's
// next statement or its commit instead of waiting for an answer under the
// swarm's lock. The task machine decides the move from CLAIMED, the state
// the condition fixes. started, called once tx has committed, says
// whether it moved; if it did not, it reads the task and says why as
// StartTx would have (ErrState, ErrNotHolder, ErrNotFound).
func (b *Board) StartHeldTx(ctx context.Context, tx *sql.Tx, id int64, h Holder) (started func(context.Context) error, err error) {
	if h.Agent == "" {
		return nil, invalidf("a task's start needs its agent")
	}
	holder := Holder{Agent: h.Agent}
	if err := b.db.FenceTx(ctx, tx, h.Agent); err != nil {
		return nil, err
	}
	at := b.opts.Now()
	claimed := &Task{ID: id, State: task.Claimed}
	m, err := start(h.Session)(claimed)
	if err != nil {
		return nil, err
	}
	m.actor = holder.actor()
	_, ev, err := b.decide(claimed, m, at)
	if err != nil {
		return nil, err
	}
	now := store.FormatTime(at)
	if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
		abort_reason, session_id, seq, task_id) SELECT ?, ?, ?, ?, ?, 'task', ?, ?, '', '', 0, id FROM tasks
		WHERE id = ? AND claimant = ? AND state = 'CLAIMED' AND `+sessionBegun,
		now, agentOf(m.actor), ev.From.String(), string(ev.TransitionReason), ev.To.String(), m.actor, m.why,
		id, h.Agent, h.Session); err != nil {
		return nil, fmt.Errorf("taskboard: task %d event: %w", id, err)
	}
	var held store.HeldCount
	res, err := tx.ExecContext(held.Defer(ctx), `UPDATE tasks SET state = 'IN_PROGRESS', updated_at = ?, claim_session = ?, held_over = ''
		WHERE id = ? AND claimant = ? AND state = 'CLAIMED' AND `+sessionBegun, now, h.Session, id, h.Agent, h.Session)
	if err != nil {
		return nil, fmt.Errorf("taskboard: task %d to %s: %w", id, task.InProgress, err)
	}
	held.Ran(res)
	return func(ctx context.Context) error {
		n, err := held.RowsAffected()
		if err != nil {
			return fmt.Errorf("taskboard: start task %d: %w", id, err)
		}
		if n == 1 {
			return nil
		}
		t, err := b.Get(ctx, id)
		if err != nil {
			return err
		}
		if err := holder.check(t); err != nil {
			return err
		}
		return fmt.Errorf("task %d is %s: it cannot go to %s: %w", id, t.StateName, task.InProgress, ErrState)
	}, nil
}

// sessionBegun is StartHeldTx's condition that the session's row is
// recorded: a begin that found its seq taken inserted none, and must not
// start the task.
const sessionBegun = `EXISTS (SELECT 1 FROM sessions WHERE session_id = ?)`

// start moves a task to IN_PROGRESS, held by session.
func start(session string) func(t *Task) (move, error) {
	return func(t *Task) (move, error) {
		return move{to: task.InProgress, why: "started", set: []string{"claim_session = ?"}, args: []any{session}}, nil
	}
}

// Continue moves a held IN_PROGRESS task's claim to the agent's new session:
// the previous one ended without reporting.
func (b *Board) Continue(ctx context.Context, id int64, agent, session string) error {
	return b.write(ctx, "continue", func(tx *sql.Tx) error {
		// Only while this daemon holds the agent's lease: a daemon that
		// lost it would move the claim away from the session of the
		// agent's new daemon, whose report would then be refused.
		if err := b.db.FenceTx(ctx, tx, agent); err != nil {
			return err
		}
		// The session takes the task back: a hold over a stop ends.
		_, err := tx.ExecContext(ctx, `UPDATE tasks SET claim_session = ?, held_over = '' WHERE id = ? AND claimant = ?`, session, id, agent)
		return err
	})
}

// Done reports the task finished with summary, its head unknown (the
// operator's report: the worker's line as it stands is the work).
func (b *Board) Done(ctx context.Context, id int64, h Holder, summary string) (Task, error) {
	return b.DoneAt(ctx, id, h, summary, "")
}

// DoneAt reports the task finished with summary, its work frozen at commit
// head: what its review shows and the merge queue merges.
func (b *Board) DoneAt(ctx context.Context, id int64, h Holder, summary, head string) (Task, error) {
	return b.update(ctx, "done", id, h, b.done(summary, head))
}

// DoneTx is DoneAt in the caller's transaction (a session's settlement).
func (b *Board) DoneTx(ctx context.Context, tx *sql.Tx, id int64, h Holder, summary, head string) error {
	_, err := b.updateTx(ctx, tx, id, h, b.done(summary, head))
	return err
}

// ReadTx reads task id in the caller's transaction, for DoneReadTx: a
// settlement's write held back (store.Deferred) goes to the server with
// this read, in one round trip.
func (b *Board) ReadTx(ctx context.Context, tx *sql.Tx, id int64) (Task, error) {
	return getTask(ctx, tx, id)
}

// DoneReadTx is DoneTx on t, the task as ReadTx read it in tx, with nothing
// written to it in tx since.
func (b *Board) DoneReadTx(ctx context.Context, tx *sql.Tx, t Task, h Holder, summary, head string) error {
	_, err := b.updateReadTx(ctx, tx, t, h, b.done(summary, head))
	return err
}

func (b *Board) done(summary, head string) func(t *Task) (move, error) {
	return func(t *Task) (move, error) {
		if head == "" && b.opts.FrozenHead && t.Claimant != "" {
			return move{}, fmt.Errorf("%w: task %d: done: no commit to freeze (the worktree's HEAD could not be read): commit the work on your branch, then report it done", ErrInvalid, t.ID)
		}
		m := move{to: task.Done, reason: task.ReasonCompleted, why: oneLine("done", summary),
			set: []string{"result = ?", "head = ?"}, args: []any{summary, head}}
		if head != "" {
			m.set, m.args = append(m.set, "work_head = ?"), append(m.args, head)
		}
		return m, b.reviewOnDone(t, &m)
	}
}

// KeepWorkTx records where task id's line stood when the holder's session
// ended (head), in the caller's transaction (the session's settlement):
// the next session on it starts there. Only the holder's session may, and
// only while the task is being worked on.
func (b *Board) KeepWorkTx(ctx context.Context, tx *sql.Tx, id int64, h Holder, head string) error {
	if head == "" {
		return nil
	}
	n, err := tx.ExecContext(ctx, `UPDATE tasks SET work_head = ? WHERE id = ? AND claim_session = ? AND state IN ('CLAIMED', 'IN_PROGRESS')`,
		head, id, h.Session)
	if err != nil {
		return fmt.Errorf("taskboard: keep the work of task %d: %w", id, err)
	}
	if k, _ := n.RowsAffected(); k == 0 {
		return fmt.Errorf("task %d: session %s: %w", id, h.Session, ErrNotHolder)
	}
	return nil
}

// Fail reports the task failed for reason.
func (b *Board) Fail(ctx context.Context, id int64, h Holder, reason string) (Task, error) {
	if strings.TrimSpace(reason) == "" {
		return Task{}, invalidf("a failure needs a reason")
	}
	return b.update(ctx, "fail", id, h, failMove(reason))
}

// FailTx is Fail in the caller's transaction (a session's settlement).
func (b *Board) FailTx(ctx context.Context, tx *sql.Tx, id int64, h Holder, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return invalidf("a failure needs a reason")
	}
	_, err := b.updateTx(ctx, tx, id, h, failMove(reason))
	return err
}

func failMove(reason string) func(t *Task) (move, error) {
	return func(t *Task) (move, error) {
		m := move{to: task.Failed, reason: task.ReasonAborted, why: oneLine("failed", reason),
			set: []string{"result = ?"}, args: []any{reason}}
		failLoop(t, review.ReasonFailSignal, &m)
		return m, nil
	}
}

// Block parks the task: on another task (a dependency; it opens again when
// that one is CLOSED) or for a reason (it opens again on Requeue).
func (b *Board) Block(ctx context.Context, id int64, h Holder, on int64, reason string) (Task, error) {
	if (on == 0) == (strings.TrimSpace(reason) == "") {
		return Task{}, invalidf("block needs exactly one of a task to wait for or a reason")
	}
	var t Task
	err := b.write(ctx, "block", func(tx *sql.Tx) error {
		var err error
		if t, err = getTask(ctx, tx, id); err != nil {
			return err
		}
		if err := h.check(t); err != nil {
			return err
		}
		why := oneLine("blocked", reason)
		if on != 0 {
			if on == id {
				return invalidf("task %d cannot wait for itself", id)
			}
			if _, err := getTask(ctx, tx, on); err != nil {
				return fmt.Errorf("dependency: %w", err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO task_deps (task_id, dep_id) VALUES (?, ?)`, id, on); err != nil {
				return err
			}
			why = fmt.Sprintf("blocked on task %d", on)
		}
		return b.apply(ctx, tx, &t, move{to: task.Blocked, actor: h.actor(), why: why, session: h.Session,
			set:  released("blocked_reason = ?"),
			args: []any{strings.TrimSpace(reason)}})
	})
	return t, err
}

// Split decomposes the task into subtasks (OPEN, for any agent): the task
// waits in WAITING_FOR_SUBTASKS until every one is DONE or CLOSED. Each
// subtask has the task's reviewer and max_iterations: the subtasks carry
// the task's work, and each is merged on its own, so a subtask with none
// took the work around the review (its splitter, with no reviewer of its
// own, claimed it back, or another agent with none did).
func (b *Board) Split(ctx context.Context, id int64, h Holder, titles []string) ([]Task, error) {
	if len(titles) == 0 {
		return nil, invalidf("split needs at least one subtask title")
	}
	var kids []Task
	err := b.write(ctx, "split", func(tx *sql.Tx) error {
		t, err := getTask(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := h.check(t); err != nil {
			return err
		}
		// The head an earlier attempt froze (its review failed, the task
		// went back to its worker) is no change of the split task's: the
		// subtasks carry its work, and its review lists them (no head).
		if err := b.apply(ctx, tx, &t, move{to: task.WaitingForSubtasks, actor: h.actor(), session: h.Session,
			why: fmt.Sprintf("split into %d subtasks", len(titles)), set: released("head = ''")}); err != nil {
			return err
		}
		now := b.now()
		reviewState, maxIterations := reviewOf(t.Reviewer, t.MaxIterations)
		for _, title := range titles {
			title = strings.TrimSpace(title)
			if title == "" || len(title) > MaxTitleBytes || strings.ContainsAny(title, "\r\n") {
				return invalidf("subtask title %q: one line of 1 to %d bytes", title, MaxTitleBytes)
			}
			var kid int64
			if err := tx.QueryRowContext(ctx, `INSERT INTO tasks (title, priority, state, parent_id, max_retries, reviewer,
				max_iterations, review_state, created_by, created_at, updated_at) VALUES (?, ?, 'OPEN', ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
				title, t.Priority, id, t.MaxRetries, t.Reviewer, maxIterations, reviewState, h.actor(), now, now).Scan(&kid); err != nil {
				return err
			}
			if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
				session_id, seq, task_id) VALUES (?, ?, '', '', 'OPEN', 'task', ?, ?, ?, 0, ?)`,
				now, h.Agent, h.actor(), fmt.Sprintf("added: subtask of %d: %s", id, title), h.Session, kid); err != nil {
				return err
			}
			k, err := getTask(ctx, tx, kid)
			if err != nil {
				return err
			}
			kids = append(kids, k)
		}
		return nil
	})
	return kids, err
}

// Approve is PLANNED -> OPEN (or BLOCKED while a dependency is not closed).
func (b *Board) Approve(ctx context.Context, id int64) (Task, error) {
	return b.update(ctx, "approve", id, Holder{}, func(t *Task) (move, error) {
		if t.State != task.Planned {
			return move{}, fmt.Errorf("task %d is %s, not PLANNED: %w", t.ID, t.State, ErrState)
		}
		return move{to: task.Open, why: "approved"}, nil
	})
}

// Cancel cancels the task (a terminal state).
func (b *Board) Cancel(ctx context.Context, id int64) (Task, error) {
	return b.update(ctx, "cancel", id, Holder{}, func(t *Task) (move, error) {
		m := move{to: task.Cancelled, reason: task.ReasonAborted, why: "cancelled", set: released()}
		failLoop(t, review.ReasonCancelled, &m)
		return m, nil
	})
}

// Retry sends a FAILED task back to OPEN, counting a retry.
func (b *Board) Retry(ctx context.Context, id int64) (Task, error) {
	var t Task
	err := b.write(ctx, "retry", func(tx *sql.Tx) error {
		_, err := b.updateTx(ctx, tx, id, Holder{}, func(t *Task) (move, error) {
			if t.State != task.Failed {
				return move{}, fmt.Errorf("task %d is %s, not FAILED: only a failed task is retried: %w", t.ID, t.State, ErrState)
			}
			m := move{to: task.Open, reason: task.ReasonRetry, why: "retried", set: released("result = ''")}
			// A task the merge queue gave up on had passed its review:
			// what its worker does now is reviewed again.
			if st, it, ok, err := reopenReview(ctx, tx, *t); err != nil {
				return move{}, err
			} else if ok {
				m.set, m.args = append(m.set, "review_state = ?", "iteration = ?"), append(m.args, st, it)
			}
			// One its review failed (max_iterations, the worker's FAIL):
			// reviewed again too, with as many more rounds.
			if l, ok, err := retryReview(ctx, tx, *t); err != nil {
				return move{}, err
			} else if ok {
				m.set = append(m.set, "review_state = ?", "iteration = ?", "max_iterations = ?", "review_failure = ''")
				m.args = append(m.args, l.State().String(), int(l.Iteration()), int(l.MaxIterations()))
			}
			return m, nil
		})
		if err != nil {
			return err
		}
		t, err = getTask(ctx, tx, id)
		return err
	})
	return t, err
}

// Requeue takes the task from whoever holds it (or out of BLOCKED) and
// makes it OPEN for any agent.
func (b *Board) Requeue(ctx context.Context, id int64) (Task, error) {
	return b.update(ctx, "requeue", id, Holder{}, func(t *Task) (move, error) {
		switch t.State {
		case task.Claimed, task.InProgress, task.Blocked, task.Orphaned:
		default:
			return move{}, fmt.Errorf("task %d is %s: requeue takes a task back from its holder or out of BLOCKED: %w", t.ID, t.State, ErrState)
		}
		return move{to: task.Open, why: "requeued",
			set: newLine("blocked_reason = ''")}, nil
	})
}

// EventAssigned is the event of a change of a task's assignee (Assign): it
// moves no state (the task machine has no row for it: from and to are the
// task's state) and counts no retry.
const EventAssigned = "assigned"

// Assign changes who holds task id next: agent alone, or any agent when
// agent is "". Only a task that nobody holds and that can still be claimed
// again is reassigned: PLANNED, OPEN, BLOCKED, WAITING_FOR_SUBTASKS,
// ORPHANED or FAILED. Each of them comes back by a claim, which the
// assignee decides (and whose claimant becomes the review loop's worker),
// but for a parent waiting for its subtasks: it comes back by its review's
// FAIL, which sends the rework to the loop's worker, so that worker is
// changed with it (assignsRework). A held task (CLAIMED, IN_PROGRESS) is
// requeued first; a DONE task is refused (doneRefusal). A final state has
// nobody to claim it. The task's reviewer is refused: nobody reviews their
// own work, so it could never claim the task. The change is recorded as
// an event EventAssigned by the operator, naming the assignee (and the
// rework's worker) before and after; its line (work_head) and review loop
// stay, so whoever claims it continues the work. An OPEN task's change
// wakes the idle agents as any change of the open set does
// (board_version). Assigning a task to whom it goes already changes
// nothing and records nothing.
func (b *Board) Assign(ctx context.Context, id int64, agent string) (Task, error) {
	var t Task
	err := b.write(ctx, "assign", func(tx *sql.Tx) error {
		var err error
		if t, err = getTask(ctx, tx, id); err != nil {
			return err
		}
		switch {
		case Assignable(t.State):
		case t.State == task.Claimed || t.State == task.InProgress:
			return fmt.Errorf("task %d is %s, held by %s: requeue it first ('swarmd task requeue %d'), then assign it: %w",
				id, t.State, orNobody(t.Claimant), id, ErrState)
		case t.State == task.Done:
			return doneRefusal(t)
		default:
			return fmt.Errorf("task %d is %s, a final state: nobody claims it any more: %w", id, t.State, ErrState)
		}
		if agent != "" && agent == t.Reviewer {
			return invalidf("task %d is to be reviewed by %s: an agent cannot review its own work", id, agent)
		}
		rework := assignsRework(t) && agent != t.Worker
		if agent == t.Assignee && !rework {
			return nil
		}
		now := b.now()
		set, args := "assignee = ?", []any{agent}
		why := fmt.Sprintf("assigned to %s (was %s)", orAnyAgent(agent), orAnyAgent(t.Assignee))
		if rework {
			set, args = set+", worker = ?", append(args, agent)
			why += fmt.Sprintf(", its review's rework too (was %s's)", orAnyAgent(t.Worker))
		}
		if _, err := tx.ExecContext(ctx, `UPDATE tasks SET `+set+`, updated_at = ? WHERE id = ?`, append(args, now, id)...); err != nil {
			return fmt.Errorf("taskboard: assign task %d: %w", id, err)
		}
		if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
			abort_reason, session_id, seq, task_id) VALUES (?, '', ?, ?, ?, 'task', 'operator', ?, '', '', 0, ?)`,
			now, t.StateName, EventAssigned, t.StateName, why, id); err != nil {
			return fmt.Errorf("taskboard: assign task %d: %w", id, err)
		}
		t, err = getTask(ctx, tx, id)
		return err
	})
	return t, err
}

// EventReviewerAssigned is the event of a change of a task's reviewer
// (AssignReviewer): like EventAssigned, it moves no state.
const EventReviewerAssigned = "reviewer_assigned"

// AssignReviewer makes reviewer the one whose verdict task id's review
// waits for, in place of its reviewer now: one that left the swarm (a
// reload removed it, or renamed it) holds a DONE task under review for
// good, for nothing else moves a DONE task. The loop keeps its state,
// iteration and rounds. A verdict of the former reviewer's after the
// change is refused (VerdictTx: not its reviewer), and so is a reviewer
// who did the work (its worker, claimant or assignee): nobody reviews their
// own work. Refused too for a task with no review, one whose review has
// passed (the merge queue has it), and a final one.
func (b *Board) AssignReviewer(ctx context.Context, id int64, reviewer string) (Task, error) {
	if strings.TrimSpace(reviewer) == "" {
		return Task{}, invalidf("a reviewer needs a name")
	}
	var t Task
	err := b.write(ctx, "assign reviewer", func(tx *sql.Tx) error {
		var err error
		if t, err = getTask(ctx, tx, id); err != nil {
			return err
		}
		switch {
		case t.State.IsTerminal():
			return fmt.Errorf("task %d is %s, a final state: nobody reviews it any more: %w", id, t.State, ErrState)
		case t.Reviewer == "":
			return fmt.Errorf("task %d has no review: its reviewer comes with its claim (the claimant's reviewer config) or with 'task add --reviewer': %w", id, ErrState)
		case t.ReviewState == review.Complete.String():
			return fmt.Errorf("task %d has passed its review by %s: the verdict is given: %w", id, t.Reviewer, ErrState)
		}
		for _, who := range []string{t.Worker, t.Claimant, t.Assignee} {
			if who == reviewer {
				return invalidf("task %d is %s's work: an agent cannot review its own work", id, reviewer)
			}
		}
		if reviewer == t.Reviewer {
			return nil
		}
		now := b.now()
		if _, err := tx.ExecContext(ctx, `UPDATE tasks SET reviewer = ?, updated_at = ? WHERE id = ?`, reviewer, now, id); err != nil {
			return fmt.Errorf("taskboard: assign the reviewer of task %d: %w", id, err)
		}
		why := fmt.Sprintf("reviewer %s (was %s)", reviewer, t.Reviewer)
		if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
			abort_reason, session_id, seq, task_id) VALUES (?, '', ?, ?, ?, 'task', 'operator', ?, '', '', 0, ?)`,
			now, t.StateName, EventReviewerAssigned, t.StateName, why, id); err != nil {
			return fmt.Errorf("taskboard: assign the reviewer of task %d: %w", id, err)
		}
		t, err = getTask(ctx, tx, id)
		return err
	})
	return t, err
}

// ReviewerUnknown reports whether t waits for the verdict of a reviewer
// that is not one of agents (removed from the config, or renamed): DONE,
// its review waiting, and nobody to give it; AssignReviewer names
// another. agents nil: not known, never.
func ReviewerUnknown(t Task, agents []string) bool {
	return t.State == task.Done && t.ReviewState == review.Reviewing.String() && agents != nil && !slices.Contains(agents, t.Reviewer)
}

// Reviewing lists the tasks waiting for a verdict, by id.
func (b *Board) Reviewing(ctx context.Context) ([]Task, error) {
	return queryTasks(ctx, b.db.ReadSQL(), reviewingSQL)
}

// reviewingSQL orders by id through tasks_not_over: with the order alone
// SQLite read every task ever made, in id order, rather than sort the few
// its partial indexes hold.
const reviewingSQL = `SELECT ` + taskCols + ` FROM tasks WHERE state = 'DONE' AND review_state = 'reviewing' AND ` + notOver + ` ORDER BY id`

// assignsRework reports whether Assign gives t's review loop's worker
// with its assignee: t waits for its subtasks, and the loop that reviews
// it once they are done sends a FAIL's rework to that worker, not to the
// assignee (afterVerdict), where every other task Assign takes comes back
// by a claim. The worker is otherwise what the merge queue reads (whose
// branch, which daemon queues it) and what the review prompt names; a
// parent waiting has no change of its own to merge (Split cleared its
// head), so nothing but its next rework follows it, and whoever claims
// that is its worker again (reviewOnClaim). Its reviewer is never the new
// worker: Assign refuses it. "" (--anyone) sends the rework to any agent.
func assignsRework(t Task) bool {
	return t.State == task.WaitingForSubtasks && t.ReviewState == review.Working.String()
}

// doneRefusal is Assign's error for a DONE task: its work is its worker's
// until its review and merge are over (the reviewer judges that worker's
// work, the queue merges what it froze, queued on a shared store by the
// daemon that runs it, or by the queue's leader once none does), so
// neither its worker nor its assignee may change now; a FAIL or a
// rejection brings it back OPEN, to be assigned then.
func doneRefusal(t Task) error {
	what := "its work"
	if w := cmp.Or(t.Worker, t.Claimant); w != "" {
		what = w + "'s work"
	}
	return fmt.Errorf("task %d is DONE, %s under review or waiting to merge: it changes hands only once a review FAIL "+
		"or a merge rejection sends it back OPEN; assign it then: %w", t.ID, what, ErrState)
}

// AssignableStates are the states a task can be given to another agent in
// (Assign): nobody holds it, and it can still be claimed again.
func AssignableStates() []task.State {
	return []task.State{task.Planned, task.Open, task.Blocked, task.WaitingForSubtasks, task.Orphaned, task.Failed}
}

// Assignable reports whether s is one of AssignableStates.
func Assignable(s task.State) bool { return slices.Contains(AssignableStates(), s) }

// AssigneeUnknown reports whether t waits for an assignee that is not one
// of agents (removed from the config, or renamed): in a state Assign
// changes, no agent may claim it. agents nil: not known, never.
func AssigneeUnknown(t Task, agents []string) bool {
	return t.Assignee != "" && agents != nil && Assignable(t.State) && !slices.Contains(agents, t.Assignee)
}

// WorkerUnknown reports whether t's next rework waits for a worker that is
// not one of agents (removed from the config, or renamed): t waits for its
// subtasks, and once they are done its review's FAIL sends the rework to
// its loop's worker (assignsRework), whoever its assignee, so that worker,
// not a claim, decides who gets t next; Assign changes it. A DONE task
// under review is not: nobody may change its worker before the verdict,
// and a FAIL sends it back OPEN assigned to that worker (AssigneeUnknown
// then). agents nil: not known, never.
func WorkerUnknown(t Task, agents []string) bool {
	return assignsRework(t) && t.Worker != "" && agents != nil && !slices.Contains(agents, t.Worker)
}

func orNobody(agent string) string {
	if agent == "" {
		return "nobody"
	}
	return agent
}

// orAnyAgent names an assignee for people: "any agent" for none.
func orAnyAgent(agent string) string {
	if agent == "" {
		return "any agent"
	}
	return agent
}

// Unclaim returns the tasks claimed for a session that never started:
// those still CLAIMED for it, and started (0: none), the task the session's
// begin moved to IN_PROGRESS with its row before its process did not
// start. A task IN_PROGRESS since an earlier session, which the session
// only continued (Continue moved the claim to it), stays its agent's: the
// agent's next session continues it.
func (b *Board) Unclaim(ctx context.Context, session string, started int64) error {
	return b.write(ctx, "unclaim", func(tx *sql.Tx) error { return b.UnclaimTx(ctx, tx, session, started) })
}

// unclaimSQL reads the tasks held (tasks_held's term, as written), not
// every task ever made, for the session's claim.
const unclaimSQL = `SELECT ` + taskCols + ` FROM tasks WHERE claim_session = ? AND ` + holdingState + `
	AND (state = 'CLAIMED' OR (state = 'IN_PROGRESS' AND id = ?))`

// UnclaimTx is Unclaim in tx: with the close of the session's row
// (package settle), so that no restart finds one without the other.
func (b *Board) UnclaimTx(ctx context.Context, tx *sql.Tx, session string, started int64) error {
	ts, err := queryTasks(ctx, tx, unclaimSQL, session, started)
	if err != nil {
		return err
	}
	for i := range ts {
		if err := b.apply(ctx, tx, &ts[i], move{to: task.Open, actor: "swarmd", session: session,
			why: "the session it was claimed for never started", set: released()}); err != nil {
			return err
		}
	}
	return nil
}

// Orphan takes back what agent held because the agent stopped (or, with
// agent "", every held task: a daemon restart found their sessions gone).
// A CLAIMED task goes back to OPEN; an IN_PROGRESS one goes ORPHANED, then
// OPEN with orphan_recovered (a retry), or FAILED past max_retries. Each of
// these events carries the abort reason of the session that held the task,
// if it ended abnormally (abortOf). It returns the tasks it moved. An
// agent's tasks are taken back under its lease (a shared store): a daemon
// that lost it is refused (store.FencedError), since the agent's tasks are
// the other daemon's now, one perhaps held by a session running there.
func (b *Board) Orphan(ctx context.Context, agent, why string) ([]Task, error) {
	var out []Task
	err := b.write(ctx, "orphan", func(tx *sql.Tx) error {
		if agent != "" {
			if err := b.db.FenceTx(ctx, tx, agent); err != nil {
				return err
			}
		}
		var err error
		out, err = b.OrphanTx(ctx, tx, agent, why)
		return err
	})
	return out, err
}

// OrphanTx is Orphan in tx.
func (b *Board) OrphanTx(ctx context.Context, tx *sql.Tx, agent, why string) ([]Task, error) {
	q := `SELECT ` + taskCols + ` FROM tasks WHERE state IN ('CLAIMED', 'IN_PROGRESS')`
	var args []any
	if agent != "" {
		q += ` AND claimant = ?` // the index of held tasks, as in holding
		args = append(args, agent)
	}
	ts, err := queryTasks(ctx, tx, q, args...)
	if err != nil {
		return nil, err
	}
	for i := range ts {
		if err := b.orphanTx(ctx, tx, &ts[i], why); err != nil {
			return ts[:i], err
		}
	}
	return ts, nil
}

// orphanTx takes t, held, back from its holder as OrphanTx does: a CLAIMED
// task to OPEN; an IN_PROGRESS one to ORPHANED, then OPEN with
// orphan_recovered (a retry), or FAILED past max_retries.
func (b *Board) orphanTx(ctx context.Context, tx *sql.Tx, t *Task, why string) error {
	clear := newLine()
	abort, err := abortOf(ctx, tx, t.ClaimSession)
	if err != nil {
		return err
	}
	if t.State == task.Claimed {
		return b.apply(ctx, tx, t, move{to: task.Open, abort: abort, actor: "swarmd", why: why, set: clear})
	}
	if err := b.apply(ctx, tx, t, move{to: task.Orphaned, abort: abort, actor: "swarmd", why: why}); err != nil {
		return err
	}
	err = b.apply(ctx, tx, t, move{to: task.Open, reason: task.ReasonOrphanRecovered, abort: abort, actor: "swarmd",
		why: "requeued after " + why, set: clear})
	var exhausted *task.RetriesExhaustedError
	if errors.As(err, &exhausted) {
		m := move{to: task.Failed, abort: abort, actor: "swarmd", set: clear,
			why: fmt.Sprintf("%s, and its %d retries are used up", why, t.MaxRetries)}
		failLoop(t, review.ReasonAgentError, &m)
		err = b.apply(ctx, tx, t, m)
	}
	return err
}

// GiveBack takes back what agent held because the agent stopped for a cause
// that is not the task's failure (the operator stopped it, a reload removed
// it, its own max_sessions): each CLAIMED or IN_PROGRESS task goes OPEN with
// no transition reason, so no retry, as `task requeue` does, and its next
// attempt starts a new line. Each event carries the abort reason of the
// session that held the task, if it ended abnormally. It returns the tasks
// it moved. A stop that is the work's failure (its errors, a fatal error)
// is Orphan's. As Orphan, it is refused (store.FencedError) to a daemon
// that lost the agent's lease.
func (b *Board) GiveBack(ctx context.Context, agent, why string) ([]Task, error) {
	if agent == "" {
		return nil, invalidf("give back: no agent named")
	}
	var out []Task
	err := b.write(ctx, "give back", func(tx *sql.Tx) error {
		if err := b.db.FenceTx(ctx, tx, agent); err != nil {
			return err
		}
		ts, err := queryTasks(ctx, tx, `SELECT `+taskCols+` FROM tasks WHERE state IN ('CLAIMED', 'IN_PROGRESS') AND claimant = ?`, agent)
		if err != nil {
			return err
		}
		out = ts
		for i := range ts {
			if err := b.requeueTx(ctx, tx, &ts[i], why); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("taskboard: give back the tasks of %s: %w", agent, err)
	}
	return out, nil
}

// abortOf is the abort reason of how session ended, as a task event records
// it: the seed value of the abort reason its row has (task.AbortOf), or
// parent_aborted for a session its daemon's death cut off (restart
// recovery and a lost lease close such rows as orphaned); "" for a session
// that ended normally, has not ended or never started.
func abortOf(ctx context.Context, q querier, session string) (task.AbortReason, error) {
	if session == "" {
		return "", nil
	}
	var reason, outcome string
	err := q.QueryRowContext(ctx, `SELECT abort_reason, outcome FROM sessions WHERE session_id = ?`, session).Scan(&reason, &outcome)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("taskboard: how session %s ended: %w", session, err)
	}
	if r := task.AbortOf(reason); r != "" {
		return r, nil
	}
	if outcome == store.OutcomeOrphaned {
		return task.AbortParentAborted, nil
	}
	return "", nil
}

func oneLine(prefix, text string) string {
	text = strings.TrimSpace(text)
	if i := strings.IndexAny(text, "\r\n"); i >= 0 {
		text = text[:i] + " …"
	}
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	if text == "" {
		return prefix
	}
	return prefix + ": " + text
}

// OpenVersion changes whenever a write may have given an idle agent work:
// a task put into or changed in the set of OPEN tasks (or of reviews
// waiting), a task CLOSED that others depend on. The router compares it to
// wake idle agents. It is the board_version row, which the tasks' triggers
// move (migration 0020); a claim does not.
func (b *Board) OpenVersion(ctx context.Context) (string, error) {
	var n int64
	if err := b.db.ReadSQL().QueryRowContext(ctx, `SELECT n FROM board_version WHERE id = 1`).Scan(&n); err != nil {
		return "", fmt.Errorf("taskboard: open version: %w", err)
	}
	return strconv.FormatInt(n, 10), nil
}

// Claimable counts the work waiting for agents: OPEN tasks any agent may
// claim (anyone, counted up to atMost: the router wakes at most that many
// idle agents, and counting the rest of a long backlog on every change
// cost more than anything else a task did), and per agent the OPEN tasks
// assigned to it and the reviews waiting for it.
func (b *Board) Claimable(ctx context.Context, atMost int) (anyone int, mine map[string]int, err error) {
	rows, err := b.db.ReadSQL().QueryContext(ctx, `SELECT '', COUNT(*) FROM (SELECT 1 FROM tasks
			WHERE state = 'OPEN' AND assignee = '' AND `+depsClosed+` LIMIT ?) AS anyone
		UNION ALL
		SELECT assignee, COUNT(*) FROM tasks WHERE state = 'OPEN' AND assignee <> '' AND `+depsClosed+`
		GROUP BY assignee
		UNION ALL
		SELECT reviewer, COUNT(*) FROM tasks WHERE state = 'DONE' AND review_state = 'reviewing' GROUP BY reviewer`, atMost)
	if err != nil {
		return 0, nil, fmt.Errorf("taskboard: claimable: %w", err)
	}
	defer rows.Close()
	mine = map[string]int{}
	for rows.Next() {
		var who string
		var n int
		if err := rows.Scan(&who, &n); err != nil {
			return 0, nil, fmt.Errorf("taskboard: claimable: %w", err)
		}
		if who == "" {
			anyone += n
		} else {
			mine[who] += n
		}
	}
	return anyone, mine, rows.Err()
}
