package merge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Outcome is what one Step did.
type Outcome int

const (
	OutcomeIdle     Outcome = iota // nothing queued
	OutcomePaused                  // the queue is paused
	OutcomeWaiting                 // the first entry cannot go yet; Status.Waiting says why
	OutcomeMerged                  // the first entry (batched: one or more) is in the target
	OutcomeRejected                // the first entry (batched: one or more) was rejected, and none merged
	OutcomeRebuild                 // the target moved under the candidate: step again to rebuild it
	OutcomeSplit                   // a batch's gate failed: step again to test its first half
)

var outcomeNames = [...]string{"idle", "paused", "waiting", "merged", "rejected", "rebuild", "split"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// run is the loop: step while there is work, then sleep until woken (an
// enqueue, a resume, Wake) or, while waiting, until the recheck.
func (q *Queue) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	defer q.dropAhead()
	// The lead first: from its commit on, a loop that ran the queue before
	// (another daemon's, that lost the merge lock without seeing it yet)
	// has its writes refused, and does not move the target.
	for {
		err := q.store.lead(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		q.log.Warn("merge queue: take the lead", zap.Error(err))
		if !q.sleep(ctx, q.opts.Recheck) {
			return
		}
	}
	for {
		out, err := q.Step(ctx)
		if ctx.Err() != nil {
			return
		}
		var after time.Duration
		switch {
		case err != nil:
			q.log.Warn("merge queue step failed", zap.Error(err))
			after = q.opts.Recheck
		case out == OutcomeMerged || out == OutcomeRejected || out == OutcomeRebuild || out == OutcomeSplit:
			continue
		case out == OutcomeWaiting || q.hasPending():
			after = q.opts.Recheck
		}
		if !q.rest(ctx, after) {
			return
		}
	}
}

// rest waits before the next step: for a wake, or after when it is over
// 0, but at least waitFloor then, whatever wakes the loop. A wait or a
// failed step is not tried again at once: a step's own writes wake the
// daemon's feeder, which may wake the queue, and a queue that could not
// go (a full disk) was seen stepping 37 times a second, writing its wait
// each time. It reports false when ctx ended.
func (q *Queue) rest(ctx context.Context, after time.Duration) bool {
	if after > 0 {
		floor := min(waitFloor, after)
		if !sleepFor(ctx, floor) {
			return false
		}
		if after -= floor; after == 0 {
			return true // waited the whole recheck
		}
	}
	return q.sleep(ctx, after)
}

// waitFloor is the least time between two steps of a queue that waits or
// whose step failed.
const waitFloor = time.Second

// sleepFor waits d, or until ctx ends (false).
func sleepFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sleep waits for a wake, or for d when d > 0. It reports false when ctx
// ended.
func (q *Queue) sleep(ctx context.Context, d time.Duration) bool {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-q.wake:
	case <-timeout:
	}
	return true
}

// Step integrates the first entries of the queue, one batch (one entry
// unless batching), if the queue is not paused, and reports results to the
// callbacks. The loop calls it; tests and tools may call it directly (not
// while the loop runs).
func (q *Queue) Step(ctx context.Context) (Outcome, error) {
	q.report(ctx)
	paused, waiting, err := q.store.control(ctx)
	if err != nil {
		return OutcomeIdle, err
	}
	if paused {
		return OutcomePaused, nil
	}
	if err := q.clearStaleAhead(ctx); err != nil {
		return OutcomeIdle, err
	}
	if q.ahead != nil {
		target, _, err := q.repo.tip(ctx, q.opts.Into)
		if err != nil {
			return OutcomeIdle, fmt.Errorf("merge queue: read %s: %w", q.opts.Into, err)
		}
		q.settleAhead(ctx, target) // before the front is read: it may start a bisection
	}
	front, err := q.store.front(ctx, q.batch.want())
	if err != nil || len(front) == 0 {
		if err == nil {
			q.reportDepth(0, true) // emptied by another process (the CLI), or never filled
		}
		if ok := err == nil && waiting != ""; ok {
			err = q.store.setWaiting(ctx, "", 0) // nothing left to wait for
		}
		return OutcomeIdle, err
	}
	// What other daemons queued since the last step counts from now, not
	// only once this batch is done.
	q.setDepth(ctx, true)
	es := make([]*Entry, len(front))
	var resumed []*Entry
	for i := range front {
		es[i] = &front[i]
		if es[i].State == Testing {
			resumed = append(resumed, es[i])
		}
	}
	if len(resumed) > 0 {
		// Left under test by a loop that stopped or a daemon that died: no
		// gate is running for them any more. Their move may have landed
		// (landed): its move begun stays until that is known.
		if err := q.store.requeueInDoubt(ctx, resumed, "resumed: the queue stopped during its test"); err != nil {
			return OutcomeIdle, err
		}
	}
	q.batch.match(es)
	out, err := q.integrate(ctx, es, resumed, waiting)
	q.setDepth(ctx, true)
	if out == OutcomeMerged || out == OutcomeRejected || out == OutcomeSplit {
		q.report(ctx)
	}
	return out, err
}

// integrate takes the batch es, in queue order, as far as it can go now.
func (q *Queue) integrate(ctx context.Context, es, resumed []*Entry, waiting string) (Outcome, error) {
	var res outcomes
	// An entry that is not its task's work to merge now is dropped before
	// anything is prepared or built for it, but for a resumed entry with a
	// candidate: the target may hold that already (landed), and what the
	// target holds is recorded as it is.
	mayHaveLanded := func(e *Entry) bool { return e.Candidate != "" && slices.Contains(resumed, e) }
	es, err := q.fresh(ctx, es, func(e *Entry) bool { return !mayHaveLanded(e) }, &res)
	if err != nil || len(es) == 0 {
		return res.outcome(), err
	}
	if q.opts.Prepare != nil {
		for i, e := range es {
			err := q.opts.Prepare(ctx, *e)
			switch {
			case err == nil:
				continue
			case ctx.Err() != nil:
				return OutcomeIdle, err
			case i == 0:
				return q.wait(ctx, e, waiting, "cannot prepare the merge: "+err.Error(), nil)
			}
			es = es[:i] // the batch goes without it; it waits at the front next
			break
		}
	}
	first := es[0]
	target, tree, err := q.repo.tip(ctx, q.opts.Into)
	if err != nil {
		return q.wait(ctx, first, waiting, fmt.Sprintf("cannot read %s: %v", q.opts.Into, err), err)
	}
	if why, err := q.blocked(ctx); why != "" || err != nil {
		return q.wait(ctx, first, waiting, why, err)
	}
	if waiting != "" {
		if err := q.store.setWaiting(ctx, "", first.Task); err != nil {
			return OutcomeWaiting, err
		}
	}
	if es, err = q.landed(ctx, es, resumed, target, &res); err != nil || len(es) == 0 {
		return res.outcome(), err
	}
	if es, err = q.fresh(ctx, es, mayHaveLanded, &res); err != nil || len(es) == 0 {
		return res.outcome(), err
	}
	line, lerr := q.line(ctx, es, target, tree, &res)
	if err := q.finish(ctx, &res); err != nil {
		return res.outcome(), err
	}
	switch {
	case lerr != nil && !res.any() && len(line) == 0:
		return q.wait(ctx, first, "", "cannot build the candidate: "+lerr.Error(), lerr)
	case lerr != nil && ctx.Err() == nil:
		// The line ends before the entry; it waits at the front next time.
		// (Cut short by the stop, it is no news.)
		q.log.Warn("merge batch cut short: cannot build a candidate", zap.Error(lerr))
	}
	if len(line) == 0 {
		return res.outcome(), nil
	}
	// A batch whose candidate has the tree of one that failed already (the
	// half left after a green first half) is split without a gate run,
	// down to one entry, which is then tested alone.
	for len(line) > 1 && q.batch.isRed(line[len(line)-1].tree) {
		line = line[:len(line)/2]
	}
	// A lone entry is rejected only by a gate run of its own, even when
	// its candidate has the red batch's tree: a gate's result can depend
	// on more than the tree (a flaky test, a test that fails only beside
	// another task: SWARM_MERGE_TASKS), and the red batch's verdict would
	// then blame an entry no gate ever failed.
	out, ok, err := q.test(ctx, line, target)
	if !ok {
		res.or(out)
		return res.outcome(), err
	}
	out, err = q.advance(ctx, line, target)
	res.or(out)
	return res.outcome(), err
}

// landed records as merged the resumed entries whose candidate the target
// holds already (the daemon died after advancing the target, before
// recording it) and returns the others. It records what the target holds,
// whatever the task's state now: OnMerged's caller does not close a task
// whose frozen head the entry is not (Options.Stale's rule).
func (q *Queue) landed(ctx context.Context, es, resumed []*Entry, target string, res *outcomes) ([]*Entry, error) {
	var rest []*Entry
	for _, e := range es {
		if !slices.Contains(resumed, e) || e.Candidate == "" {
			rest = append(rest, e)
			continue
		}
		in, err := q.repo.isAncestor(ctx, e.Candidate, target)
		if err != nil {
			return nil, fmt.Errorf("merge queue: is task %d's candidate in %s: %w", e.Task, q.opts.Into, err)
		}
		if !in {
			rest = append(rest, e)
			continue
		}
		res.merged(e, e.Candidate, "the target holds its candidate already")
		q.batch.found(e)
	}
	return rest, q.finish(ctx, res)
}

// fresh drops, as stale (KindStale, stored at once), the entries of es
// that check selects and Options.Stale says are not to be merged now, and
// returns the others, in order.
func (q *Queue) fresh(ctx context.Context, es []*Entry, check func(*Entry) bool, res *outcomes) ([]*Entry, error) {
	if q.opts.Stale == nil {
		return es, nil
	}
	var rest []*Entry
	for _, e := range es {
		if !check(e) {
			rest = append(rest, e)
			continue
		}
		why, err := q.opts.Stale(ctx, *e)
		if err != nil {
			return nil, fmt.Errorf("merge queue: is task %d's entry at %s its work: %w", e.Task, short(e.Head), err)
		}
		if why == "" {
			rest = append(rest, e)
			continue
		}
		q.log.Warn("merge entry dropped: not its task's work to merge now", zap.Int64("task", e.Task),
			zap.String("head", e.Head), zap.String("why", why))
		res.dropped(e, why)
		q.batch.found(e)
	}
	return rest, q.finish(ctx, res)
}

// staleIn is why an entry of es is not to be merged now, "" when each is
// (Options.Stale).
func (q *Queue) staleIn(ctx context.Context, es []*Entry) (string, error) {
	if q.opts.Stale == nil {
		return "", nil
	}
	for _, e := range es {
		why, err := q.opts.Stale(ctx, *e)
		if err != nil || why != "" {
			return why, err
		}
	}
	return "", nil
}

// link is one entry of a batch's line of candidates: its candidate commit
// is the target with this entry and every one before it merged.
type link struct {
	e            *Entry
	commit, tree string
}

// line builds the batch's candidates on target, one after the other in
// queue order, each its own commit on the one before. An entry that does
// not merge into the line is rejected as a conflict before any gate runs,
// and the line goes on without it; one that adds nothing goes in at once
// when nothing is before it, else it rides with the line. An error ends
// the line where it is (the entry waits at the front next time).
func (q *Queue) line(ctx context.Context, es []*Entry, target, tree string, res *outcomes) ([]link, error) {
	if p := q.passed; p.matches(es, target) {
		line := slices.Clone(p.line)
		for i := range line {
			line[i].e = es[i] // this step's rows
		}
		return line, nil
	}
	q.passed = passedGate{}
	base, baseTree := target, tree
	var line []link
	for _, e := range es {
		cand, err := q.build(ctx, e, base, baseTree)
		var unmergeable *unmergeableError
		var corrupt *corruptError
		var carried *carriedError
		var history *historyError
		switch {
		case errors.As(err, &corrupt):
			res.rejected(e, KindCorrupt, corrupt.Error())
		case errors.As(err, &carried):
			res.rejected(e, KindCarried, carried.Error())
		case errors.As(err, &history):
			res.rejected(e, KindHistory, history.Error())
		case errors.As(err, &unmergeable):
			res.rejected(e, KindConflict, unmergeable.Error())
		case err != nil:
			return line, err
		case len(cand.conflicts) > 0:
			res.rejected(e, KindConflict, strings.Join(cand.conflicts, "\n"))
		case cand.noop && len(line) == 0:
			res.merged(e, target, "the target holds this work already")
		case cand.noop:
			line = append(line, link{e: e, commit: base, tree: baseTree})
		default:
			line = append(line, link{e: e, commit: cand.commit, tree: cand.tree})
			base, baseTree = cand.commit, cand.tree
		}
		if res.has(e) {
			q.batch.found(e)
		}
	}
	return line, nil
}

// blocked says why the target cannot be advanced now: it is checked out in
// a working tree with local changes or an operation in progress.
func (q *Queue) blocked(ctx context.Context) (string, error) {
	cos, err := q.repo.checkoutsOf(q.opts.Into)
	if err != nil {
		return "", err
	}
	for _, co := range cos {
		if co.busy != "" {
			return fmt.Sprintf("%s is checked out at %s with %s in progress; the queue waits until it is finished",
				q.opts.Into, co.path, co.busy), nil
		}
		files, err := q.repo.localChanges(ctx, co.path)
		if err != nil {
			return "", fmt.Errorf("check %s for local changes: %w", co.path, err)
		}
		if len(files) > 0 {
			return fmt.Sprintf("%s is checked out at %s with local changes (%s); the queue waits until they are committed or stashed",
				q.opts.Into, co.path, fileList(files)), nil
		}
	}
	return "", nil
}

// test runs the gate once on the line's last candidate, which holds the
// whole batch. ok reports that it passed (or that there is no gate);
// otherwise out and err are Step's result: a failed batch of one is
// rejected, a failed batch of more is split (OutcomeSplit) and its first
// half tested at the next step.
func (q *Queue) test(ctx context.Context, line []link, target string) (out Outcome, ok bool, err error) {
	es, cands := make([]*Entry, len(line)), make([]string, len(line))
	for i, l := range line {
		es[i], cands[i] = l.e, l.commit
	}
	tip := line[len(line)-1]
	if len(q.opts.Gate) == 0 || q.passed.line != nil {
		return 0, true, q.store.beginBatch(ctx, es, cands, target, q.passed.seq) // no new gate run
	}
	if err := q.repo.ensureWorktree(ctx, q.wt, tip.commit); err != nil {
		out, err := q.wait(ctx, es[0], "", "cannot prepare the integration worktree: "+err.Error(), err)
		return out, false, err
	}
	seq, err := q.store.nextGateSeq(ctx)
	if err != nil {
		return OutcomeIdle, false, err
	}
	if err := q.store.beginBatch(ctx, es, cands, target, seq); err != nil {
		return OutcomeIdle, false, err
	}
	q.log.Info("merge gate started", zap.Int64("task", tip.e.Task), zap.Int("batch", len(es)), zap.String("candidate", tip.commit),
		zap.String("target", target), zap.Uint32("gate_seq", seq))
	q.ahead = q.startAhead(ctx, line, q.batch.size)
	run, err := q.runGate(ctx, es, q.wt, seq)
	if err != nil {
		// Stopped (or the gate could not start): the batch stays first.
		q.dropAhead()
		rerr := q.store.requeueBatch(context.WithoutCancel(ctx), es, "gate not finished: "+err.Error())
		return OutcomeIdle, false, errors.Join(err, rerr)
	}
	q.opts.Metrics.GateDuration(run.duration)
	if !run.passed() && q.killedOutside(run) {
		// The daemon's lease guard killed the gate (the daemon was stopped
		// or cut off from the store past its lease): the run is not the
		// batch's, which is tested again, nobody rejected on it.
		q.dropAhead()
		q.log.Warn("merge gate killed by the daemon's lease guard; testing the batch again", zap.Int64("task", tip.e.Task),
			zap.Int("batch", len(es)), zap.Uint32("gate_seq", seq))
		why := fmt.Sprintf("gate run %d was killed by the daemon's lease guard, not failed: tested again", seq)
		return OutcomeRebuild, false, q.store.requeueBatch(ctx, es, why)
	}
	if run.passed() {
		q.batch.green(es)
		q.passed = passedGate{target: target, line: line, seq: seq}
		return 0, true, nil // a run ahead goes on: the next step settles it
	}
	q.dropAhead() // built on a candidate that will not go in
	kind, detail := q.rejection(run)
	if len(es) == 1 {
		var res outcomes
		res.rejected(es[0], kind, detail)
		q.batch.failed()
		q.batch.found(es[0])
		return res.outcome(), false, q.finish(ctx, &res)
	}
	q.batch.split(es, tip.tree, redGate{kind: kind, tail: detail, seq: seq})
	q.log.Info("merge gate failed on a batch; bisecting", zap.Int("batch", len(es)), zap.Uint32("gate_seq", seq))
	why := fmt.Sprintf("bisect: the gate failed on the batch of %d (gate run %d); its first half is tested next", len(es), seq)
	return OutcomeSplit, false, q.store.requeueBatch(ctx, es, why)
}

// advance moves the target from old to the line's last candidate in one
// compare-and-swap of the ref, or a fast-forward of the clean working tree
// that has it checked out: the whole batch goes in, or none of it.
func (q *Queue) advance(ctx context.Context, line []link, old string) (Outcome, error) {
	es := lineEntries(line)
	cand := line[len(line)-1].commit
	msg := fmt.Sprintf("swarmd merge queue: task %d from %s", es[0].Task, es[0].Branch)
	if len(es) > 1 {
		msg = "swarmd merge queue: " + taskList(es)
	}
	// The gate ran on the candidate's files; the target takes its objects
	// by name. One replaced while the gate ran is seen here: nothing moves,
	// and the next step builds again, where the check before the gate
	// finds the change it is in and rejects it.
	if check, err := q.repo.checkChange(ctx, old, cand); err != nil || len(check.bad) > 0 {
		q.passed = passedGate{} // this line is not to be taken again as it is
		why := "rebuild: objects of the batch were replaced while its gate ran: " + strings.Join(check.bad, ", ")
		if err != nil {
			why = fmt.Sprintf("rebuild: check the batch's objects: %v", err)
		}
		if ctx.Err() == nil { // cut short by the stop, it is no news
			q.log.Warn("merge queue: not advancing the target", zap.Int64("task", es[0].Task), zap.Int("batch", len(es)), zap.String("why", why))
		}
		return OutcomeRebuild, q.store.requeueBatch(ctx, es, why)
	}
	// The tasks may have moved on while the gate ran (one cancelled, say):
	// nothing moves, and the next step drops what is stale and builds the
	// rest again.
	if why, err := q.staleIn(ctx, es); err != nil || why != "" {
		q.passed = passedGate{}
		if err != nil {
			why = fmt.Sprintf("cannot check the batch's tasks: %v", err)
			return OutcomeIdle, errors.Join(err, q.store.requeueBatch(context.WithoutCancel(ctx), es, why))
		}
		q.log.Info("merge queue: not advancing the target: an entry is stale now", zap.Int64("task", es[0].Task), zap.String("why", why))
		return OutcomeRebuild, q.store.requeueBatch(ctx, es, "rebuild: "+why)
	}
	// Only the queue's loop that leads moves the target: one that lost the
	// lead while its gate ran (another daemon took the merge lock, and
	// runs this batch again) leaves the batch to it.
	if err := q.store.leading(ctx); err != nil {
		q.passed = passedGate{}
		return OutcomeIdle, err
	}
	// Known before it is there: a watcher that reads the new tip at once
	// must not take the queue's own move for someone else's.
	q.owned.advancing(cand)
	defer q.owned.done() // a move that did not happen
	cos, err := q.repo.checkoutsOf(q.opts.Into)
	if err == nil && len(cos) > 0 {
		err = q.fastForward(ctx, cos[0], old, cand, msg)
	} else if err == nil {
		err = q.repo.updateRef(ctx, q.opts.Into, cand, old, msg)
	}
	var blocked *blockedError
	switch {
	case errors.Is(err, errMoved):
		q.log.Info("merge target moved; rebuilding the candidate", zap.Int64("task", es[0].Task), zap.Int("batch", len(es)), zap.Error(err))
		return OutcomeRebuild, q.store.requeueBatch(ctx, es, "rebuild: "+err.Error())
	case errors.As(err, &blocked):
		if rerr := q.store.requeueBatch(ctx, es, "waiting: "+blocked.why); rerr != nil {
			return OutcomeWaiting, rerr
		}
		return q.wait(ctx, es[0], "", blocked.why, nil)
	case err != nil:
		why := fmt.Sprintf("cannot advance %s: %v", q.opts.Into, err)
		return q.wait(ctx, es[0], "", why, errors.Join(err, q.store.requeueInDoubt(context.WithoutCancel(ctx), es, why)))
	}
	q.passed = passedGate{}
	var res outcomes
	var found *Move
	var unrecorded []Move
	if q.store.tracks() {
		// The tip is known with the merges, in their transaction, and so
		// is a move someone else made that the queue built on before a
		// look claimed it: a stop before the next look loses neither.
		// So is one a look saw but could not record (the store refused
		// it, Unrecorded): once the known tip is past it, no start
		// would.
		var gen uint64
		found, gen = q.owned.move(old, cand)
		res.tip = &tipWrite{tip: cand, gen: gen}
		if found != nil {
			res.tip.events = q.events(ctx, []Move{*found}, "by the merge queue, which merged onto it")
		}
		unrecorded = q.owned.takeFound()
		res.tip.events = append(res.tip.events, q.events(ctx, unrecorded, "by the merge queue, as it merged")...)
	} else {
		q.owned.moved(old, cand)
	}
	for _, l := range line {
		res.merged(l.e, l.commit, "")
		q.batch.found(l.e)
	}
	err = q.finish(ctx, &res)
	switch {
	case err != nil && res.tip != nil:
		// The next look records them.
		if found != nil {
			q.owned.addFound(*found)
		}
		for _, m := range unrecorded {
			q.owned.addFound(m)
		}
	case res.tip != nil:
		q.recorded(res.tip.events)
	}
	return res.outcome(), err
}

// blockedError: a person's working tree keeps the target from moving.
type blockedError struct{ why string }

func (e *blockedError) Error() string { return e.why }

// fastForward advances the target in the working tree that has it checked
// out, if it is still clean: git merge --ff-only never discards a commit
// and refuses rather than overwrite a local change.
func (q *Queue) fastForward(ctx context.Context, co checkout, old, cand, msg string) error {
	if why, err := q.blocked(ctx); why != "" || err != nil {
		if err != nil {
			return err
		}
		return &blockedError{why: why}
	}
	// git merge --ff-only compares nothing: it takes the checkout from
	// wherever it is now to cand, if it can. A person who rewound the
	// target in the checkout while the gate ran (git reset --hard HEAD~1)
	// would see the queue bring back what they dropped. The compare of
	// the compare-and-swap is done here instead; what is left is the
	// moment between this read and git's.
	if cur, _, err := q.repo.tip(ctx, q.opts.Into); err != nil {
		return err
	} else if cur != old {
		return fmt.Errorf("%s is at %s now, not %s: %w", q.opts.Into, short(cur), short(old), errMoved)
	}
	err := q.repo.fastForward(ctx, co.path, cand, msg)
	if err == nil {
		return nil
	}
	cur, _, terr := q.repo.tip(ctx, q.opts.Into)
	switch {
	case terr != nil:
		return errors.Join(err, terr)
	case cur != old:
		return fmt.Errorf("%s is at %s now, not %s: %w", q.opts.Into, short(cur), short(old), errMoved)
	}
	return &blockedError{why: fmt.Sprintf("%s is checked out at %s and git would not fast-forward it (%v); the queue waits",
		q.opts.Into, co.path, err)}
}

// wait records why e cannot go now (unless it is recorded already) and
// returns OutcomeWaiting with err.
func (q *Queue) wait(ctx context.Context, e *Entry, waiting, why string, err error) (Outcome, error) {
	if why == "" && err != nil {
		why = err.Error()
	}
	if why != waiting {
		if werr := q.store.setWaiting(context.WithoutCancel(ctx), why, e.Task); werr != nil {
			err = errors.Join(err, werr)
		}
		q.log.Info("merge queue waiting", zap.Int64("task", e.Task), zap.String("why", why))
	}
	return OutcomeWaiting, err
}

// report hands finished entries to the callbacks, oldest first. One that
// fails is retried at the next step.
func (q *Queue) report(ctx context.Context) {
	cb := q.opts.Callbacks
	if cb == nil {
		return
	}
	if err := q.store.leading(ctx); err != nil {
		// The results are the leading loop's to report (its daemon pushes
		// the target it moved).
		q.log.Warn("merge queue: results not reported", zap.Error(err))
		q.setPending(true)
		return
	}
	es, err := q.store.unnotified(ctx)
	if err != nil {
		q.log.Warn("merge queue: read results to report", zap.Error(err))
		q.setPending(true)
		return
	}
	failed := false
	var line map[string]bool // the target's latest commits, read once
	for _, e := range es {
		if e.State == Merged && line == nil {
			line = q.targetLine(ctx, merged(es), lastMerged(es))
		}
		if e.State == Merged && !line[e.Candidate] {
			held, err := q.holds(ctx, e.Candidate)
			if err != nil {
				q.log.Warn("merge queue: look for a merged task's commit on the target; reported later", zap.Int64("task", e.Task), zap.Error(err))
				failed = true
				continue
			}
			if !held {
				// Recorded by a loop that lost the lead before its report
				// pushed it (its daemon stopped there): the commit is on
				// that daemon's own target alone. Reporting it would close
				// the task with its work on no shared target.
				why := fmt.Sprintf("its merge commit %s is on no target this queue reports (a daemon that lost the merge queue made it, and never pushed it): merged again", short(e.Candidate))
				q.log.Warn("merge queue: a merged task's commit is not on the target; merging it again", zap.Int64("task", e.Task), zap.String("commit", e.Candidate))
				if err := q.store.mergeAgain(ctx, e, why); err != nil {
					q.log.Warn("merge queue: queue a task to merge again", zap.Int64("task", e.Task), zap.Error(err))
					failed = true
				}
				q.Wake()
				continue
			}
		}
		if err := q.notify(ctx, cb, e); err != nil {
			q.log.Warn("merge result callback failed; it is called again later", zap.Int64("task", e.Task),
				zap.String("result", e.Result), zap.Error(err))
			failed = true
			continue
		}
		if err := q.store.markNotified(ctx, e.ID); err != nil {
			q.log.Warn("merge queue: mark result reported", zap.Int64("task", e.Task), zap.Error(err))
			failed = true
		}
	}
	q.setPending(failed)
}

// targetLine is the last n commits of the target's first-parent line,
// where the queue's merges land: one git for a report's results, which
// holds then asks of the others alone; none when the latest is the tip
// (a batch of one: the tip is a file's read). Empty when it cannot be
// read.
func (q *Queue) targetLine(ctx context.Context, n int, latest string) map[string]bool {
	line := map[string]bool{}
	if tip, err := q.Target(ctx); err == nil && tip == latest {
		line[tip] = true
		if n == 1 {
			return line
		}
	}
	// A rebased task is several commits of the line: room for some.
	out, err := q.repo.run(ctx, q.repo.commonDir, nil, "rev-list", "--first-parent", "--max-count="+strconv.Itoa(4*n+8),
		"refs/heads/"+q.opts.Into, "--")
	if err != nil {
		return line
	}
	for _, c := range strings.Fields(out) {
		line[c] = true
	}
	return line
}

// merged counts the merged results of es.
func merged(es []Entry) int {
	n := 0
	for _, e := range es {
		if e.State == Merged {
			n++
		}
	}
	return n
}

// lastMerged is the commit of the latest merged result of es (by id: the
// last the queue put on the target), "" when none.
func lastMerged(es []Entry) string {
	last := ""
	var id int64
	for _, e := range es {
		if e.State == Merged && e.ID > id {
			last, id = e.Candidate, e.ID
		}
	}
	return last
}

// holds reports whether the target this queue's report pushes holds
// commit: this repository's, else what Options.Holds says.
func (q *Queue) holds(ctx context.Context, commit string) (bool, error) {
	if commit == "" {
		return false, nil
	}
	here, err := q.repo.hasCommit(ctx, commit)
	if err != nil {
		return false, err
	}
	if here {
		target, err := q.Target(ctx)
		if err != nil {
			return false, err
		}
		if ok, err := q.IsAncestor(ctx, commit, target); err != nil || ok {
			return ok, err
		}
	}
	if q.opts.Holds == nil {
		return false, nil
	}
	return q.opts.Holds(ctx, commit)
}

func (q *Queue) notify(ctx context.Context, cb Callbacks, e Entry) error {
	if e.State == Merged {
		return cb.OnMerged(ctx, e, e.Candidate)
	}
	if Kind(e.Result) == KindStale {
		return nil // dropped: no result of the task's work, nothing to send back
	}
	return cb.OnRejected(ctx, e, Kind(e.Result), e.Detail)
}

// fileList names up to 5 files.
func fileList(files []string) string {
	const most = 5
	s := strings.Join(files[:min(len(files), most)], ", ")
	if len(files) > most {
		s += fmt.Sprintf(" and %d more", len(files)-most)
	}
	if len(files) == 1 {
		return "1 file: " + s
	}
	return fmt.Sprintf("%d files: %s", len(files), s)
}
