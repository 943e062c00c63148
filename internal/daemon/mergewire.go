package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/environ"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/service"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// openMerge opens the merge queue when the config has one (merge:). The
// board then closes tasks only when they are merged.
func (d *Daemon) openMerge(ctx context.Context, cfg *config.Config) error {
	if cfg.Merge == nil {
		return nil
	}
	opts := merge.Options{
		Repo: cfg.Repo, StateDir: cfg.StateDir, Into: cfg.Merge.Into, Gate: cfg.Merge.Gate,
		Timeout: cfg.Merge.Timeout, Strategy: cfg.Merge.Strategy, Batch: cfg.Merge.Batch,
		Parallel: cfg.Merge.Parallel,
		DB:       d.db, Procs: d.host.sup, Logs: d.kit.logs, Callbacks: mergeHooks{d}, Metrics: d.metrics,
		// Gate logs rotate as an agent's session logs do: a gate that
		// prints a test suite's output writes megabytes a run.
		GateLogged: func(seq uint32) { d.kit.rotation.Settled(merge.LogName, seq) },
		Log:        d.log.Named("merge"), Sandbox: d.gateSandbox(),
		Killed: d.guard.killedSince, // the lease guard kills gates too
		Clone:  targetClone(cfg), Moves: moveReporter{d},
		Stale: mergeHooks{d}.stale,
		Git:   d.host.tools.git,
	}
	if opts.Sandbox != nil {
		// A HOME of the gate's own, empty for each run (gateSandbox),
		// never the daemon's: code from the branch under test would write
		// the daemon's ~/.gitconfig, ~/.ssh, shell files.
		home, err := gateHome(cfg)
		if err != nil {
			return err
		}
		// Nor a program a session could have put in a PATH directory
		// it writes (tools.go).
		opts.Env = environ.Build("", os.Environ(), []string{"HOME=" + home, "PATH=" + d.host.tools.path})
	}
	if cfg.SharedStore() {
		opts.Prepare = d.fetchHead // heads of other machines' agents
		opts.Holds = d.remoteHolds // merges of the daemon that held the queue before
	}
	q, err := merge.Open(ctx, opts)
	if err != nil {
		return setupError(err)
	}
	d.merge.queue = q
	return nil
}

// mergeHooks tells the task board what the merge queue did.
type mergeHooks struct{ d *Daemon }

// OnMerged closes the task: its work is on the target, which goes to the
// remote so that every daemon of the swarm sees it. On a shared store the
// remote's target is the swarm's: it holds the merge before the task is
// closed (publishTarget), or the report waits and is made again.
func (h mergeHooks) OnMerged(ctx context.Context, e merge.Entry, commit string) error {
	if cfg, _ := h.d.current(); cfg.Merge != nil {
		if cfg.SharedStore() && cfg.Remote != "" {
			if err := h.d.publishTarget(ctx, cfg.Merge.Into, cfg.Remote, commit); err != nil {
				return err
			}
		} else {
			h.d.pushTarget(cfg.Merge.Into)
		}
	}
	_, err := h.d.tasks.Merged(ctx, e.Task, e.Head, commit)
	if errors.Is(err, taskboard.ErrState) {
		// The target holds a change that is not the task's to merge now
		// (the queue dropped such entries before their gate: this one
		// went in as the task moved on, or before a restart): the task
		// is not closed on it.
		h.d.log.Warn("merge queue: merged, but the task is not closed on it", zap.Int64("task", e.Task),
			zap.String("head", e.Head), zap.String("commit", commit), zap.Error(err))
		return nil
	}
	return err
}

// stale is why the queue is not to merge e now (merge.Options.Stale): its
// head is not its task's frozen head, or the task is not ready to merge.
func (h mergeHooks) stale(ctx context.Context, e merge.Entry) (string, error) {
	err := h.d.tasks.Mergeable(ctx, e.Task, e.Head)
	var not *taskboard.NotMergeable
	switch {
	case errors.As(err, &not):
		return not.Why, nil
	case errors.Is(err, taskboard.ErrNotFound):
		return err.Error(), nil
	}
	return "", err
}

// OnRejected sends the task back to its worker with what went wrong, in
// its next prompt and as mail.
func (h mergeHooks) OnRejected(ctx context.Context, e merge.Entry, kind merge.Kind, detail string) error {
	into, strategy := "the merge target", ""
	if cfg, _ := h.d.current(); cfg.Merge != nil {
		into, strategy = cfg.Merge.Into, cfg.Merge.Strategy
	}
	why := "the merge queue rejected it: " + string(kind)
	if kind == merge.KindCorrupt {
		// Not the worker's doing, most likely: something that writes the
		// shared object store replaced what the change was committed as.
		h.d.log.Error("merge queue: objects of a change do not match their names (replaced in the object store?); check with `git fsck`",
			zap.Int64("task", e.Task), zap.String("agent", e.Agent), zap.String("head", e.Head), zap.String("detail", detail))
		if _, err := h.d.mail.NoteToOperator(ctx, fmt.Sprintf("task #%d: objects of its change were replaced", e.Task),
			fmt.Sprintf("The merge queue rejected task #%d (%s's commit %s): %s\n\n`git fsck` lists every such object.",
				e.Task, e.Agent, e.Head, detail)); err != nil {
			h.d.log.Warn("mail the operator", zap.Int64("task", e.Task), zap.Error(err))
		}
	}
	// What to do and why, once: the task's feedback, which the worker's
	// next prompt shows; the mail only says that it came back.
	feedback := rejectionTodo(kind, into, strategy)
	if strings.TrimSpace(detail) != "" {
		feedback += "\n\n" + detail
	}
	cfg, _ := h.d.current()
	max := config.DefaultMaxMergeRejections
	if cfg.Merge != nil {
		max = cfg.Merge.MaxRejections
	}
	_, gaveUp, err := h.d.tasks.Rejected(ctx, e.Task, e.Head, why, feedback, max)
	if errors.Is(err, taskboard.ErrState) {
		// Not the task's work to merge now (it moved on since): nothing
		// goes back to its worker.
		h.d.log.Info("merge queue: a rejection not applied to its task", zap.Int64("task", e.Task), zap.Error(err))
		return nil
	}
	if err != nil {
		return err
	}
	if gaveUp {
		// Nobody made it mergeable in max rounds: the operator decides.
		h.d.log.Warn("merge queue: task failed, rejected too often", zap.Int64("task", e.Task), zap.Int("max_rejections", max),
			zap.String("kind", string(kind)))
		d := h.d
		d.notifyTaskFailed(e.Task, e.Agent, fmt.Sprintf("merge_rejected: the merge queue rejected it %d times (merge.max_rejections), the last time for %s", max, kind))
		body := fmt.Sprintf("Task #%d failed: the merge queue rejected it %d times (merge.max_rejections), the last time for %s.\n\n"+
			"`swarmd task show %d` has the history; `swarmd task retry %d` gives it back to the board.", e.Task, max, kind, e.Task, e.Task)
		if _, err := h.d.mail.NoteToOperator(ctx, fmt.Sprintf("task #%d failed: merge_rejected", e.Task), body); err != nil {
			h.d.log.Warn("mail the operator", zap.Int64("task", e.Task), zap.Error(err))
		}
		return nil
	}
	body := fmt.Sprintf("Task #%d did not merge into %s (%s). Your next session has it back, with what to do.", e.Task, into, kind)
	if _, err := h.d.mail.Send(ctx, mailbox.Draft{From: mailbox.Operator, To: e.Agent,
		Subject: fmt.Sprintf("merge of task #%d: %s", e.Task, kind), Body: body}); err != nil {
		h.d.log.Warn("mail the merge result", zap.Int64("task", e.Task), zap.Error(err))
	}
	return nil
}

// rejectionTodo tells the worker what to do about a rejection of kind by
// the queue merging into into with strategy.
func rejectionTodo(kind merge.Kind, into, strategy string) string {
	switch kind {
	case merge.KindConflict:
		if strategy == string(merge.StrategyRebase) {
			// A merge of into would be dropped by the queue's rebase, and
			// the conflict met again.
			return fmt.Sprintf("It conflicts with %[1]s: rebase your branch onto %[1]s (`git rebase %[1]s`), resolve the "+
				"conflicts in the files below as the rebase stops on each, and end your session with DONE.", into)
		}
		return fmt.Sprintf("It conflicts with %[1]s: merge %[1]s into your branch (`git merge %[1]s`), resolve the conflicts "+
			"in the files below, commit, and end your session with DONE.", into)
	case merge.KindGateFailed:
		return fmt.Sprintf("The merge gate failed on it, merged onto %s: fix what the gate reports below (the tail of its "+
			"output), commit, and end your session with DONE.", into)
	case merge.KindCorrupt:
		return fmt.Sprintf("Objects of its commits in the repository's object store no longer match their names (named below): "+
			"they were replaced after they were committed, so it cannot be merged into %s as it stands. It is for the operator "+
			"to look into (the daemon logs it as an error): do not build on those commits; end your session with DONE.", into)
	case merge.KindCarried:
		// Not `git rebase INTO`: it replays a squash commit (no merge
		// commit), rejected again, and a dropped merge's task commits
		// that INTO does not hold (a target rewound), which then merge
		// unflagged. Only the commits the newest carried merge lacks are
		// this task's.
		return fmt.Sprintf("Its commits carry merge commits the queue made of other tasks, which %[1]s does not hold (named below, "+
			"the newest first): merged, they would bring those tasks' work in again. Put only your own commits on %[1]s: "+
			"`git rebase --onto %[1]s COMMIT`, with COMMIT the first one named below (it replays the commits that COMMIT does "+
			"not hold; if COMMIT merged this very task, whose commits are yours, run `git rebase %[1]s` instead). Check with "+
			"`git log %[1]s..HEAD` that what is left is this task's work only, and end your session with DONE.", into)
	case merge.KindHistory:
		return fmt.Sprintf("Merged into %s as its history stands, it would not be the change its reviewer was shown "+
			"(why below, and how to make its history plain): do as said below, and end your session with DONE.", into)
	case merge.KindTimeout:
		return fmt.Sprintf("The merge gate ran out of time on it, merged onto %s: find what hangs or is too slow, fix it, "+
			"commit, and end your session with DONE.", into)
	}
	return fmt.Sprintf("It did not merge into %s: fix it, commit, and end your session with DONE.", into)
}

// mergeFeeder is feedMerge as a service, on the agents' context: the
// merges are their work.
func (d *Daemon) mergeFeeder() service.Service {
	return service.Func(func(context.Context) (func(), error) { return d.feedMerge(d.run.ctx), nil })
}

// feedMerge queues the tasks that are ready to merge each time the
// database changed (d.merge.changed), until stop is closed. Enqueue is
// idempotent, so a task seen twice is queued once.
func (d *Daemon) feedMerge(ctx context.Context) (stop func()) {
	if d.merge.queue == nil {
		return func() {}
	}
	cfg, _ := d.current()
	shared := cfg.SharedStore()
	done, finished := make(chan struct{}), make(chan struct{})
	var leader chan struct{}
	if shared {
		// One daemon of the swarm runs the queue: the merge lock's holder.
		leader = make(chan struct{})
		go func() { defer close(leader); d.leadMerge(ctx, done) }()
	} else {
		d.merge.queue.Start(ctx)
		// The one queue of this swarm: its target is this daemon's to
		// watch (stop waits for the watch as it waits for a leader).
		leader = make(chan struct{})
		go func() { defer close(leader); d.watchTarget(ctx, done) }()
	}
	go func() {
		defer close(finished)
		for {
			d.enqueueReady(ctx)
			if shared {
				d.merge.queue.Wake() // another daemon may have queued work
			}
			var again <-chan time.Time // the lines waiting to merge are pushed again
			if shared && cfg.Remote != "" {
				again = time.After(linePushAgain)
			}
			select {
			case <-done:
				return
			case <-d.merge.changed:
			case <-again:
			}
			select { // a burst of commits is looked at once
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		if leader != nil {
			<-leader
		}
		d.merge.queue.Stop()
	}
}

func (d *Daemon) enqueueReady(ctx context.Context) {
	ready, err := d.tasks.ReadyToMerge(ctx, nil)
	if err != nil {
		if ctx.Err() == nil { // not the daemon's stop
			d.log.Warn("merge queue: ready tasks", zap.Error(err))
		}
		return
	}
	cfg, _ := d.current()
	var run map[string]bool // the agents some daemon runs, read once a pass if need be
	for _, r := range ready {
		if cfg.SharedStore() && !slices.Contains(cfg.AgentNames(), r.Worker) {
			// Its daemon queues it: that daemon keeps the line at the frozen
			// head and pushes it (pushWaitingLines), and an unfrozen task's
			// head is its worker's branch there. A worker no daemon runs
			// has no such daemon: the leader queues its frozen work.
			if !d.queueLeft(ctx, r, cfg.Remote, &run) {
				continue
			}
		}
		if !d.objectsIn(r.Worker) {
			continue // queued at a later pass, once they are in the repository
		}
		branch := d.trees.Branch(r.Worker)
		if r.Head != "" {
			branch = d.trees.LineBranch(r.ID) // the task's own line, frozen at r.Head
		}
		if _, err := d.merge.queue.Enqueue(ctx, r.ID, r.Worker, branch, r.Head); err != nil && !errors.Is(err, merge.ErrState) && ctx.Err() == nil {
			d.log.Warn("merge queue: enqueue", zap.Int64("task", r.ID), zap.Error(err))
		}
	}
	for id := range d.merge.leftHeads {
		if !slices.ContainsFunc(ready, func(r taskboard.Ready) bool { return r.ID == id }) {
			delete(d.merge.leftHeads, id) // merged, or sent back
		}
	}
	if cfg.SharedStore() && cfg.Remote != "" {
		d.pushWaitingLines(ready, cfg.AgentNames(), cfg.Remote)
		if cfg.Merge != nil {
			d.followTarget(ctx, cfg.Merge.Into, cfg.Remote)
		}
	}
}

// leftHead is a frozen head queueLeft could not get, when it tried, and
// whether the operator was sent a note of it.
type leftHead struct {
	head  string
	at    time.Time
	noted bool
}

// queueLeft reports whether this daemon queues r, a task ready to merge
// whose worker it does not run (a shared store): only when this daemon
// leads the queue, r's work is frozen at a head, no daemon of the swarm
// runs its worker (holds its lease, one that has not expired: the agent
// was removed from every config, or renamed), and this repository holds
// the head. Without it,
// nobody queued the task, and `task assign` refuses a DONE task: it stayed
// DONE for good. The entry is the one the worker's daemon would have made
// (its line at its frozen head, which the queue merges and nothing else),
// and Enqueue is idempotent, so a daemon that runs the worker again
// queues it once all the same. The head is fetched through the task's line
// first, at most every linePushAgain: queued without it, the entry would
// hold the queue up at its front, waiting for a push no daemon makes (only
// the worker's daemon pushes the line again). Then the operator is told,
// once per head, which task waits and how to push its line. run is the
// agents some daemon runs, read on first need (nil before).
func (d *Daemon) queueLeft(ctx context.Context, r taskboard.Ready, remote string, run *map[string]bool) bool {
	if r.Head == "" || !d.merge.leading.Load() {
		return false // an unfrozen task's head is in its worker's clone
	}
	if *run == nil {
		ls, err := d.db.Leases(ctx)
		if err != nil {
			d.log.Warn("merge queue: read which daemon runs each agent", zap.Error(err))
			return false
		}
		*run = make(map[string]bool, len(ls))
		now := time.Now()
		for _, l := range ls {
			// An expired lease is kept by no daemon: a dead one's, which
			// the others reap, or one left under this daemon's own name
			// by an earlier run of it (killed, or its stop could not give
			// it up), which nobody reaps when the agent is no longer in
			// its config.
			if l.Expires.After(now) {
				(*run)[l.Agent] = true
			}
		}
	}
	if (*run)[r.Worker] {
		return false // its daemon queues it
	}
	if ok, err := d.trees.HasCommit(ctx, r.Head); err != nil || ok {
		if err != nil {
			d.log.Warn("merge queue: the frozen head of a task whose worker left", zap.Int64("task", r.ID), zap.Error(err))
		}
		return ok
	}
	last, tried := d.merge.leftHeads[r.ID]
	if tried && last.head == r.Head && time.Since(last.at) < linePushAgain {
		return false
	}
	if d.merge.leftHeads == nil {
		d.merge.leftHeads = map[int64]leftHead{}
	}
	same := tried && last.head == r.Head
	now := leftHead{head: r.Head, at: time.Now(), noted: same && last.noted}
	defer func() { d.merge.leftHeads[r.ID] = now }()
	line := d.trees.LineBranch(r.ID)
	err := d.fetchLine(ctx, line, r.Head, remote)
	if err == nil {
		return true
	}
	fix := fmt.Sprintf("push it from the clone that has it (git push %s %s:refs/heads/%s)", remote, r.Head, line)
	if remote == "" {
		fix = "fetch it into this clone (no remote is configured to fetch it from)"
	}
	what := fmt.Sprintf("task %d is DONE and its review passed, but its worker %s is run by no daemon "+
		"of the swarm, and its frozen head %s cannot be fetched through its line %s: %s; the daemon that leads the queue "+
		"then queues it", r.ID, r.Worker, r.Head, line, fix)
	if !same {
		d.log.Warn("merge queue: "+what, zap.Int64("task", r.ID), zap.String("worker", r.Worker), zap.String("head", r.Head), zap.Error(err))
	}
	// The log is the leader's, maybe on another machine: the operator's
	// inbox (swarmd inbox, the dashboards) is where a person looks, told
	// once. Only of a worker that left the swarm: one that some daemon's
	// config still names has a daemon paused, dead or restarting, which
	// pushes the line when it is back, or whose agents another one takes.
	if !now.noted && d.leftTheSwarm(ctx, r.Worker) {
		if _, merr := d.mail.NoteToOperator(ctx, fmt.Sprintf("task #%d waits for its line to be pushed", r.ID),
			what+" ("+err.Error()+")."); merr != nil {
			d.log.Warn("mail the operator", zap.Int64("task", r.ID), zap.Error(merr))
		} else {
			now.noted = true
		}
	}
	return false
}

// leftTheSwarm reports whether no daemon's config names agent as it last
// recorded its agents (RecordMembers): removed from every config, or
// renamed. An error reading them says no.
func (d *Daemon) leftTheSwarm(ctx context.Context, agent string) bool {
	ms, err := d.db.Members(ctx)
	if err != nil {
		d.log.Warn("merge queue: read the swarm's agents", zap.Error(err))
		return false
	}
	return !slices.ContainsFunc(ms, func(m store.Member) bool { return m.Agent == agent })
}

// fetchLine fetches line from remote and fails unless this repository
// holds head then.
func (d *Daemon) fetchLine(ctx context.Context, line, head, remote string) error {
	if remote == "" {
		return fmt.Errorf("fetch %s: no remote", line)
	}
	got, err := d.trees.FetchBranch(ctx, line, remote)
	if err != nil {
		return err
	}
	if ok, err := d.trees.HasCommit(ctx, head); err != nil || ok {
		return err
	}
	return fmt.Errorf("fetch %s: %s is at %s, which does not hold %s", line, remote, got, head)
}

// linePushAgain is how often a daemon on a shared store pushes again the
// line of each of its tasks that waits to merge.
const linePushAgain = 5 * time.Second

// pushWaitingLines asks, every linePushAgain, for the line of each task of
// agents (this daemon's) that waits to merge at a frozen head to be pushed
// to remote again, kept at that head first. The daemon that merges fetches the line from there and
// waits until it holds the head, and only this daemon can push it: a push
// that failed (the remote away) is not retried otherwise, and a daemon
// that lost the agent's lease and pushed a fenced-off attempt's line last
// has replaced it there. A push with nothing new costs a round trip.
func (d *Daemon) pushWaitingLines(ready []taskboard.Ready, agents []string, remote string) {
	if d.merge.linePushed == nil {
		d.merge.linePushed = map[int64]time.Time{}
	}
	now := time.Now()
	waiting := make(map[int64]bool, len(ready))
	for _, r := range ready {
		if r.Head == "" || !slices.Contains(agents, r.Worker) {
			continue
		}
		waiting[r.ID] = true
		last, ok := d.merge.linePushed[r.ID]
		if !ok {
			// Its session's end asked for the push already.
			d.merge.linePushed[r.ID] = now
			continue
		}
		if now.Sub(last) < linePushAgain {
			continue
		}
		d.merge.linePushed[r.ID] = now
		task, head := r.ID, r.Head
		d.pusher.request(d.trees.LineBranch(task), func(ctx context.Context) error {
			// The line of a task waiting to merge is its frozen head: the
			// local line may not be there (a daemon killed between the
			// DONE's settlement and the line's keeping, at the session's
			// end), and pushed as it was, the remote's never got the head.
			if err := d.trees.KeepLine(ctx, task, head); err != nil {
				return err
			}
			return d.trees.PushLine(ctx, task, remote)
		})
	}
	for id := range d.merge.linePushed {
		if !waiting[id] {
			delete(d.merge.linePushed, id) // merged, or sent back
		}
	}
}
