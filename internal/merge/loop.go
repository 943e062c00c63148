package merge

import (
	"context"
	"errors"
	"fmt"
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
	OutcomeMerged                  // the first entry is in the target
	OutcomeRejected                // the first entry was rejected
	OutcomeRebuild                 // the target moved under the candidate: step again to rebuild it
)

var outcomeNames = [...]string{"idle", "paused", "waiting", "merged", "rejected", "rebuild"}

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
		case out == OutcomeMerged || out == OutcomeRejected || out == OutcomeRebuild:
			continue
		case out == OutcomeWaiting || q.hasPending():
			after = q.opts.Recheck
		}
		if !q.sleep(ctx, after) {
			return
		}
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

// Step integrates the first entry of the queue, if the queue is not paused,
// and reports results to the callbacks. The loop calls it; tests and tools
// may call it directly (not while the loop runs).
func (q *Queue) Step(ctx context.Context) (Outcome, error) {
	q.report(ctx)
	paused, waiting, err := q.store.control(ctx)
	if err != nil {
		return OutcomeIdle, err
	}
	if paused {
		return OutcomePaused, nil
	}
	e, ok, err := q.store.next(ctx)
	if err != nil || !ok {
		if ok := err == nil && waiting != ""; ok {
			err = q.store.setWaiting(ctx, "", 0) // nothing left to wait for
		}
		return OutcomeIdle, err
	}
	if e.State == Testing {
		// Left under test by a loop that stopped or a daemon that died: no
		// gate is running for it any more.
		if err := q.store.requeue(ctx, &e, "resumed: the queue stopped during its test"); err != nil {
			return OutcomeIdle, err
		}
	}
	out, err := q.integrate(ctx, &e, waiting)
	q.setDepth(ctx)
	if out == OutcomeMerged || out == OutcomeRejected {
		q.report(ctx)
	}
	return out, err
}

// integrate takes e as far as it can go now.
func (q *Queue) integrate(ctx context.Context, e *Entry, waiting string) (Outcome, error) {
	if q.opts.Prepare != nil {
		if err := q.opts.Prepare(ctx, *e); err != nil {
			if ctx.Err() != nil {
				return OutcomeIdle, err
			}
			return q.wait(ctx, e, waiting, "cannot prepare the merge: "+err.Error(), nil)
		}
	}
	target, tree, err := q.repo.tip(ctx, q.opts.Into)
	if err != nil {
		return q.wait(ctx, e, waiting, fmt.Sprintf("cannot read %s: %v", q.opts.Into, err), err)
	}
	if why, err := q.blocked(ctx); why != "" || err != nil {
		return q.wait(ctx, e, waiting, why, err)
	}
	if waiting != "" {
		if err := q.store.setWaiting(ctx, "", e.Task); err != nil {
			return OutcomeWaiting, err
		}
	}
	cand, err := q.candidate(ctx, e, target, tree)
	var unmergeable *unmergeableError
	switch {
	case errors.As(err, &unmergeable):
		return q.reject(ctx, e, KindConflict, unmergeable.Error())
	case err != nil:
		return q.wait(ctx, e, "", "cannot build the candidate: "+err.Error(), err)
	case len(cand.conflicts) > 0:
		return q.reject(ctx, e, KindConflict, strings.Join(cand.conflicts, "\n"))
	case cand.noop:
		return q.merged(ctx, e, target, "the target holds this work already")
	}
	if out, ok, err := q.test(ctx, e, target, cand.commit); !ok {
		return out, err
	}
	return q.advance(ctx, e, target, cand.commit)
}

// candidate is e's candidate on target: the one whose gate passed already
// on the same target, else a new one.
func (q *Queue) candidate(ctx context.Context, e *Entry, target, tree string) (candidate, error) {
	if p := q.passed; p.entry == e.ID && p.target == target {
		return candidate{commit: p.candidate}, nil
	}
	q.passed = passedGate{}
	return q.build(ctx, e, target, tree)
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

// test runs the gate on candidate. ok reports that it passed (or that
// there is no gate); otherwise out and err are Step's result.
func (q *Queue) test(ctx context.Context, e *Entry, target, cand string) (out Outcome, ok bool, err error) {
	if len(q.opts.Gate) == 0 || (q.passed.entry == e.ID && q.passed.candidate == cand) {
		return 0, true, q.store.begin(ctx, e, target, cand, e.GateSeq) // no new gate run
	}
	if err := q.repo.ensureWorktree(ctx, q.wt, cand); err != nil {
		out, err := q.wait(ctx, e, "", "cannot prepare the integration worktree: "+err.Error(), err)
		return out, false, err
	}
	seq, err := q.store.nextGateSeq(ctx)
	if err != nil {
		return OutcomeIdle, false, err
	}
	if err := q.store.begin(ctx, e, target, cand, seq); err != nil {
		return OutcomeIdle, false, err
	}
	q.log.Info("merge gate started", zap.Int64("task", e.Task), zap.String("candidate", cand),
		zap.String("target", target), zap.Uint32("gate_seq", seq))
	run, err := q.runGate(ctx, e, q.wt, seq)
	if err != nil {
		// Stopped (or the gate could not start): the entry stays first.
		rerr := q.store.requeue(context.WithoutCancel(ctx), e, "gate not finished: "+err.Error())
		return OutcomeIdle, false, errors.Join(err, rerr)
	}
	q.opts.Metrics.GateDuration(run.duration)
	switch {
	case run.timedOut:
		out, err := q.reject(ctx, e, KindTimeout, fmt.Sprintf("the gate ran longer than %s and was killed\n%s", q.opts.Timeout, run.tail))
		return out, false, err
	case !run.passed():
		out, err := q.reject(ctx, e, KindGateFailed, run.tail)
		return out, false, err
	}
	q.passed = passedGate{entry: e.ID, target: target, candidate: cand}
	return 0, true, nil
}

// advance moves the target from old to cand: a compare-and-swap of the ref,
// or a fast-forward of the clean working tree that has it checked out.
func (q *Queue) advance(ctx context.Context, e *Entry, old, cand string) (Outcome, error) {
	msg := fmt.Sprintf("swarmd merge queue: task %d from %s", e.Task, e.Branch)
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
		q.log.Info("merge target moved; rebuilding the candidate", zap.Int64("task", e.Task), zap.Error(err))
		return OutcomeRebuild, q.store.requeue(ctx, e, "rebuild: "+err.Error())
	case errors.As(err, &blocked):
		if rerr := q.store.requeue(ctx, e, "waiting: "+blocked.why); rerr != nil {
			return OutcomeWaiting, rerr
		}
		return q.wait(ctx, e, "", blocked.why, nil)
	case err != nil:
		why := fmt.Sprintf("cannot advance %s: %v", q.opts.Into, err)
		return q.wait(ctx, e, "", why, errors.Join(err, q.store.requeue(context.WithoutCancel(ctx), e, why)))
	}
	q.passed = passedGate{}
	q.owned.set(cand)
	return q.merged(ctx, e, cand, "")
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

func (q *Queue) merged(ctx context.Context, e *Entry, commit, note string) (Outcome, error) {
	if err := q.store.finish(ctx, e, ResultMerged, commit, note); err != nil {
		return OutcomeMerged, err
	}
	q.opts.Metrics.MergeResult(ResultMerged)
	q.log.Info("merged", zap.Int64("task", e.Task), zap.String("branch", e.Branch), zap.String("into", q.opts.Into),
		zap.String("commit", commit))
	return OutcomeMerged, nil
}

func (q *Queue) reject(ctx context.Context, e *Entry, kind Kind, detail string) (Outcome, error) {
	q.passed = passedGate{}
	if err := q.store.finish(ctx, e, string(kind), "", detail); err != nil {
		return OutcomeRejected, err
	}
	q.opts.Metrics.MergeResult(string(kind))
	q.log.Info("merge rejected", zap.Int64("task", e.Task), zap.String("branch", e.Branch), zap.String("kind", string(kind)),
		zap.String("detail", firstLines(detail, 5)))
	return OutcomeRejected, nil
}

// report hands finished entries to the callbacks, oldest first. One that
// fails is retried at the next step.
func (q *Queue) report(ctx context.Context) {
	cb := q.opts.Callbacks
	if cb == nil {
		return
	}
	es, err := q.store.unnotified(ctx)
	if err != nil {
		q.log.Warn("merge queue: read results to report", zap.Error(err))
		q.setPending(true)
		return
	}
	failed := false
	for _, e := range es {
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

func (q *Queue) notify(ctx context.Context, cb Callbacks, e Entry) error {
	if e.State == Merged {
		return cb.OnMerged(ctx, e, e.Candidate)
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
