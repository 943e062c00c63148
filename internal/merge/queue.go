// Package merge is the merge queue: tasks whose work is finished (DONE, and
// passed review when a reviewer is set) are integrated into one branch,
// merge.into, in the order they were queued, and only when the project's
// own gate passes on the merged result.
//
// One step (Queue.Step) takes the first queued entry (with Options.Batch
// above 1, up to that many: batch.go) and:
//
//  1. waits, and says why (Status.Waiting and an event), while merge.into
//     is checked out in a working tree with local changes or an operation
//     in progress: a person's checkout is never touched then;
//  2. merges the entry's head into the target's current commit with
//     `git merge-tree --write-tree`: conflicting paths reject it (kind
//     conflict) with the paths, for the worker;
//  3. builds the candidate commit: strategy merge, a commit-tree of the
//     merged tree with the target and the head as parents; squash, one
//     parent; rebase, the branch replayed with `git rebase` in the
//     integration worktree;
//  4. checks the candidate out in the integration worktree
//     (<state_dir>/worktrees/.merge, detached) and runs the gate there: the
//     commands in order, one process tree of the proc.Supervisor, killed at
//     merge.timeout, logged to logs/merge/<gate_seq>.log like a session. A
//     failure rejects (gate_failed, with the output's tail), the timeout too
//     (timeout);
//  5. advances the target with a compare-and-swap: `git update-ref
//     refs/heads/INTO NEW OLD`, or, where INTO is checked out in a clean
//     working tree, `git merge --ff-only NEW` there, which updates its files
//     and refuses rather than overwrite anything. If the target moved
//     meanwhile, the entry is rebuilt on the new target and its gate run
//     again: nobody's commit is ever overwritten.
//
// Every state change is stored in swarm.db with an event (agent "merge"),
// so `swarmd merge status` reads the queue from the file and a restarted
// daemon resumes it: an entry that was under test is tested again, and one
// whose change the target already holds (the daemon died after advancing
// it) is recorded as merged. Results reach the caller through Callbacks,
// at least once: a result is marked reported only when its callback
// returned nil.
package merge

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/proc"
)

// Strategies, the values of merge.strategy.
const (
	StrategyMerge  = "merge"
	StrategySquash = "squash"
	StrategyRebase = "rebase"
)

// Defaults for Options' zero values.
const (
	DefaultTimeout = 30 * time.Minute
	DefaultRecheck = 10 * time.Second
	// DefaultIdentity is the author and committer of the commits the queue
	// makes (merge and squash commits, rebased commits' committer).
	DefaultName  = "swarmd merge queue"
	DefaultEmail = "swarmd@localhost"
)

// Starter starts process trees; *proc.Supervisor satisfies it.
type Starter interface {
	Start(proc.Spec) (*proc.Tree, error)
}

// LogPaths places the gate logs; *logs.Store satisfies it.
type LogPaths interface {
	LogPath(agent string, seq uint32) string
}

// Callbacks hear the queue's results; the caller moves the task on (DONE ->
// CLOSED when merged; back to its worker with the detail when rejected).
// A callback that returns an error is called again for the same entry at
// the next step and after a restart, so both must be idempotent.
type Callbacks interface {
	// OnMerged: the target now holds e's work at commit (the target itself
	// when it held it already).
	OnMerged(ctx context.Context, e Entry, commit string) error
	// OnRejected: e did not go in. detail is the conflicting paths, one a
	// line (KindConflict, also e.Paths()), or the tail of the gate's output
	// (KindGateFailed, KindTimeout); e.GateSeq names its log.
	OnRejected(ctx context.Context, e Entry, kind Kind, detail string) error
}

// Metrics are the queue's metrics; *metrics.Metrics satisfies it.
type Metrics interface {
	MergeQueueDepth(n int)        // swarmd_merge_queue_depth
	MergeResult(result string)    // swarmd_merges_total{result}: merged, conflict, gate_failed, timeout, corrupt, carried, history, stale
	GateDuration(d time.Duration) // swarmd_gate_duration_seconds
	RunAhead(result string)       // swarmd_merge_runs_ahead_total{result}: passed, failed, dropped
}

// Options configure a Queue. Into, Repo, StateDir, DB, Procs and Logs are
// required.
type Options struct {
	Repo     string        // the repository: any directory of its working trees
	StateDir string        // absolute; the integration worktree is StateDir/worktrees/.merge
	Into     string        // merge.into: the branch the queue advances
	Gate     []string      // merge.gate: shell commands; none merges clean candidates untested
	Timeout  time.Duration // merge.timeout for the whole gate; 0 means DefaultTimeout
	Strategy string        // merge.strategy; "" means StrategyMerge
	// Batch is merge.batch, the most entries one gate run tests together
	// (batch.go); 0 means 1, one at a time.
	Batch int
	// Parallel is merge.parallel: 2 runs the gate on the next batch, built
	// on the front batch's candidate, while the front batch's runs
	// (ahead.go); 0 means 1, one gate run at a time.
	Parallel int

	DB    DB
	Procs Starter
	Logs  LogPaths
	// GateLogged, when set, is told seq once the logs of gate run seq and
	// of every run before it are complete (each closed, none still
	// writing): the daemon's log rotation archives them. A run ahead may
	// end before the run it is ahead of; it is told once that one ends.
	GateLogged func(seq uint32)
	Callbacks  Callbacks // nil: results are stored, never reported
	Metrics    Metrics   // nil: none
	Log        *zap.Logger
	Now        func() time.Time // nil: time.Now
	// Env is the gate's environment before the SWARM_MERGE_* variables;
	// nil means the daemon's own.
	Env []string
	// Git is the git binary; "" means git from PATH.
	Git string
	// Recheck is how often a waiting queue (a dirty checkout, an error, a
	// callback that failed) looks again; 0 means DefaultRecheck.
	Recheck time.Duration
	// Name and Email are the identity of the commits the queue makes; ""
	// means DefaultName and DefaultEmail.
	Name, Email string
	// Sandbox, when set, contains each gate run: it wraps the gate's
	// command line (run in dir) in a sandbox, as proc.Spec.Wrapped.
	Sandbox func(dir string, argv []string) []string
	// Prepare, when set, runs before an entry is integrated: an error makes
	// the entry wait, with the error as the reason, until the next recheck.
	// A daemon of a swarm fetches there the head another machine pushed.
	// It is called from the loop's goroutine only: a run ahead does not
	// call it, and an entry whose head is not here yet is not run ahead.
	Prepare func(ctx context.Context, e Entry) error
	// Killed, when set, reports whether something outside the queue killed
	// the daemon's process trees at since or later: on a shared store, the
	// daemon's lease guard, which kills every tree of a daemon stopped or
	// cut off from the store past its lease, gates included. A gate run
	// it killed is not the batch's to fail: the batch is tested again.
	Killed func(since time.Time) bool
	// Holds, when set, reports whether the target a report pushes holds
	// commit, where this repository's own target does not: on a shared
	// store, after bringing in the target from where the swarm shares it
	// (another daemon's merges). An error leaves the report for later. A
	// merged result whose commit no target holds is merged again (report).
	Holds func(ctx context.Context, commit string) (bool, error)
	// Clone names this repository in the store's record of where its
	// target was last known (merge_target, known.go): "" keeps none. On a
	// shared store each daemon's clone has a row of its own.
	Clone string
	// Moves words the moves of the target someone else made that the
	// queue records itself (Settle, and a move it built on before a look
	// claimed it), and is told of them.
	Moves MoveReporter
	// Stale, when set, says why entry e is not to be merged now, "" when
	// it is: on the daemon, unless e.Head is its task's frozen head and
	// the task is ready to merge (DONE, its review passed), so that an
	// attempt the task's worker has reworked and reported done since is
	// never merged under it. The queue asks it of each entry before it
	// builds a candidate (a run ahead too), and of a batch's entries again
	// just before the target moves; a stale entry is dropped: rejected
	// with KindStale and the reason, and not reported to the callbacks (it
	// is no result of the task's). An entry the target holds already when
	// a restarted queue resumes it is recorded merged all the same (the
	// target has it): OnMerged's caller decides about the task.
	Stale func(ctx context.Context, e Entry) (why string, err error)
}

// Queue is the merge queue of one repository. Its methods are safe for
// concurrent use; one Queue (one daemon) runs the loop at a time, while
// any process may read and change the queue through a Store.
type Queue struct {
	store *Store
	repo  *repo
	opts  Options
	log   *zap.Logger
	now   func() time.Time
	wt    string // the integration worktree
	wake  chan struct{}

	// passed remembers the candidates whose gate passed while the target
	// could not be advanced yet (a dirty checkout): once the checkout is
	// clean, the same candidates go in without a second gate run. Only the
	// loop's goroutine touches it, and batch (batch.go).
	passed passedGate
	batch  batchState
	ahead  *ahead // a gate run ahead of the front batch (ahead.go), or nil
	// staleChecked: a record of a run ahead left by a killed daemon was
	// looked for (clearStaleAhead).
	staleChecked bool

	owned owned // the tips the queue set the target to (owned.go)

	gateLogs gateLogs // which gate runs still write their logs

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	pending bool // a result's callback failed: look again at the next recheck

	// depthMu orders the depth's reports with the loop's stop, so that a
	// stopped loop's queue reports 0 last (reportDepth).
	depthMu sync.Mutex
}

// Open checks the options and the repository: git new enough for
// merge-tree --write-tree, and the target branch present.
func Open(ctx context.Context, opts Options) (*Queue, error) {
	if err := checkOptions(&opts); err != nil {
		return nil, err
	}
	ident := []string{"GIT_AUTHOR_NAME=" + opts.Name, "GIT_AUTHOR_EMAIL=" + opts.Email,
		"GIT_COMMITTER_NAME=" + opts.Name, "GIT_COMMITTER_EMAIL=" + opts.Email}
	r, err := openRepo(ctx, opts.Repo, opts.Git, ident)
	if err != nil {
		return nil, err
	}
	r.managed = []string{filepath.Join(opts.StateDir, "worktrees")}
	if real, err := filepath.EvalSymlinks(r.managed[0]); err == nil && real != r.managed[0] {
		r.managed = append(r.managed, real) // however the registrations spell it
	}
	start, _, err := r.tip(ctx, opts.Into)
	if err != nil {
		return nil, fmt.Errorf("merge queue: merge.into %s in %s: %w (create the branch, or fix merge.into)", opts.Into, r.mainWT, err)
	}
	q := &Queue{
		store: NewStore(opts.DB, opts.Now),
		repo:  r,
		opts:  opts,
		log:   opts.Log,
		now:   opts.Now,
		wt:    filepath.Join(opts.StateDir, "worktrees", ".merge"),
		wake:  make(chan struct{}, 1),
		batch: newBatchState(opts.Batch),
	}
	q.owned.set(start) // where the target is at start is the baseline (Settle: once it is compared)
	q.store.clone, q.store.into = opts.Clone, opts.Into
	return q, nil
}

func checkOptions(o *Options) error {
	switch {
	case o.Into == "":
		return fmt.Errorf("merge queue: %w: no target branch (merge.into)", ErrInvalid)
	case o.Repo == "" || !filepath.IsAbs(o.StateDir):
		return fmt.Errorf("merge queue: %w: need the repository and an absolute state dir (got %q)", ErrInvalid, o.StateDir)
	case o.DB == nil || o.Procs == nil || o.Logs == nil:
		return fmt.Errorf("merge queue: %w: DB, Procs and Logs are required", ErrInvalid)
	case o.Batch < 0 || o.Batch > MaxBatch:
		return fmt.Errorf("merge queue: %w: batch %d (want 1 to %d)", ErrInvalid, o.Batch, MaxBatch)
	case o.Parallel < 0 || o.Parallel > MaxParallel:
		return fmt.Errorf("merge queue: %w: parallel %d (want 1 to %d)", ErrInvalid, o.Parallel, MaxParallel)
	}
	if o.Batch == 0 {
		o.Batch = 1
	}
	if o.Parallel == 0 {
		o.Parallel = 1
	}
	if o.Strategy == "" {
		o.Strategy = StrategyMerge
	}
	if !slices.Contains([]string{StrategyMerge, StrategySquash, StrategyRebase}, o.Strategy) {
		return fmt.Errorf("merge queue: %w: strategy %q (want merge, squash or rebase)", ErrInvalid, o.Strategy)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Recheck <= 0 {
		o.Recheck = DefaultRecheck
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Email == "" {
		o.Email = DefaultEmail
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Metrics == nil {
		o.Metrics = nopMetrics{}
	}
	return nil
}

type nopMetrics struct{}

func (nopMetrics) MergeQueueDepth(int)        {}
func (nopMetrics) MergeResult(string)         {}
func (nopMetrics) GateDuration(time.Duration) {}
func (nopMetrics) RunAhead(string)            {}

// Store is the queue's state, for callers that read or change it without
// running it.
func (q *Queue) Store() *Store { return q.store }

// WorktreePath is the integration worktree.
func (q *Queue) WorktreePath() string { return q.wt }

// Enqueue queues task's work: commit head, frozen when the task was
// reported DONE, or ("" : the operator reported it) the commit branch points
// at now. Whatever the worker commits later is not part of it.
func (q *Queue) Enqueue(ctx context.Context, task int64, agent, branch, head string) (Entry, error) {
	if head == "" {
		// The branch is read once, when the task is first queued. The
		// daemon queues every ready task again at each change of the
		// database: reading the branch each time made the entry follow
		// whatever the worker committed next, and the worker's branch
		// then carries its next task (a split parent has no head of its
		// own), so that task's unreviewed work merged under this one.
		if e, ok, err := q.store.unfrozen(ctx, task); err != nil || ok {
			return e, err
		}
		var err error
		if head, err = q.repo.branchCommit(ctx, branch); err != nil {
			return Entry{}, fmt.Errorf("merge queue: enqueue task %d: branch %s: %w", task, branch, err)
		}
	}
	e, err := q.store.Enqueue(ctx, task, agent, branch, head)
	if err != nil {
		return Entry{}, err
	}
	q.log.Debug("merge queued", zap.Int64("task", task), zap.String("agent", agent), zap.String("branch", branch),
		zap.String("head", head))
	q.setDepth(ctx, false)
	q.Wake()
	return e, nil
}

// Status returns the queue with its last 10 results.
func (q *Queue) Status(ctx context.Context) (Status, error) { return q.store.Status(ctx, 10) }

// Made reports whether commit is one a merge queue put on the target (this
// daemon's or, on a shared store, another's).
func (q *Queue) Made(ctx context.Context, commit string) (bool, error) {
	return q.store.Made(ctx, commit)
}

// LastMade is the target commit of the swarm's last merge (any daemon's,
// on a shared store), "" before the first.
func (q *Queue) LastMade(ctx context.Context) (string, error) { return q.store.LastMade(ctx) }

// List returns the last limit entries (all when limit <= 0), oldest first.
func (q *Queue) List(ctx context.Context, limit int) ([]Entry, error) {
	return q.store.List(ctx, limit)
}

// Retry queues a rejected task's head again, as the operator; it is
// refused (ErrState) when Options.Stale says the head is not to be merged.
func (q *Queue) Retry(ctx context.Context, task int64) (Entry, error) {
	var check func(context.Context, *sql.Tx, Entry) error
	if q.opts.Stale != nil {
		check = func(ctx context.Context, _ *sql.Tx, e Entry) error {
			why, err := q.opts.Stale(ctx, e)
			if err == nil && why != "" {
				err = fmt.Errorf("%s: %w", why, ErrState)
			}
			return err
		}
	}
	e, err := q.store.Retry(ctx, task, "operator", check)
	if err == nil {
		q.setDepth(ctx, false)
		q.Wake()
	}
	return e, err
}

// Pause stops the queue before its next candidate, as the operator.
func (q *Queue) Pause(ctx context.Context) error { return q.store.Pause(ctx, "operator") }

// Resume lets a paused queue go on, as the operator.
func (q *Queue) Resume(ctx context.Context) error {
	err := q.store.Resume(ctx, "operator")
	if err == nil {
		q.Wake()
	}
	return err
}

// Wake makes the loop look at the queue now. Enqueue, Retry and Resume
// wake it themselves; the daemon calls Wake when another process (the
// CLI) changed swarm.db.
func (q *Queue) Wake() {
	select {
	case q.wake <- struct{}{}:
	default: // a wake is pending already
	}
}

// Start runs the loop in a goroutine until ctx ends or Stop. It is
// idempotent.
func (q *Queue) Start(ctx context.Context) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done != nil {
		return
	}
	ctx, q.cancel = context.WithCancel(ctx)
	q.done = make(chan struct{})
	go q.run(ctx, q.done)
}

// Stop ends the loop and waits for it: a gate that is running is killed and
// its entry stays first in the queue, to be tested again. It is idempotent.
func (q *Queue) Stop() {
	q.mu.Lock()
	cancel, done := q.cancel, q.done
	q.cancel, q.done = nil, nil
	q.mu.Unlock()
	if done == nil {
		q.dropAhead() // Step called directly may have left a run ahead
		return
	}
	cancel()
	<-done
	q.depthMu.Lock()
	q.opts.Metrics.MergeQueueDepth(0) // no longer this queue's to report
	q.depthMu.Unlock()
}

// setDepth reports the queue's depth, as the store has it, if this queue
// reports it (reportDepth); stepping says Step reports it.
func (q *Queue) setDepth(ctx context.Context, stepping bool) {
	n, err := q.store.depth(context.WithoutCancel(ctx))
	if err != nil {
		q.log.Warn("merge queue depth", zap.Error(err))
		return
	}
	q.reportDepth(n, stepping)
}

// reportDepth sets swarmd_merge_queue_depth to n if this queue runs the
// queue: Step's caller does (the loop, or a test or tool stepping it);
// otherwise only while the loop runs. On a shared store every daemon's
// queue enqueues, but one loop runs the queue (the merge leader's): the
// others' depth stayed where their last enqueue put it, and a sum over
// the daemons counted every entry many times over. A loop that stops
// reports 0 (Stop): the queue is another's to report now.
func (q *Queue) reportDepth(n int, stepping bool) {
	q.depthMu.Lock()
	defer q.depthMu.Unlock()
	if !stepping {
		q.mu.Lock()
		running := q.done != nil
		q.mu.Unlock()
		if !running {
			return
		}
	}
	q.opts.Metrics.MergeQueueDepth(n)
}

func (q *Queue) setPending(p bool) {
	q.mu.Lock()
	q.pending = p
	q.mu.Unlock()
}

func (q *Queue) hasPending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending
}
