package merge

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Runs ahead (merge.parallel: 2), Zuul's way. While the gate tests the
// batch at the front, the queue builds the next batch's line on top of the
// front batch's last candidate, as if the front batch had passed, and runs
// the gate on it at the same time in a second integration worktree. The
// next step settles it before it looks at the queue:
//
//   - The front batch went in, so the target is now the commit the run ahead
//     was built on: that step would build the very same line. A green run
//     lets it advance the target with no gate run of its own (passedGate); a
//     red one starts the bisection with no run (the failed tree is red, and
//     the line rebuilt on the target has that tree).
//   - Anything else (the front batch failed, the target could not move to
//     its candidate, or moved elsewhere): the run tested a base that is not
//     the target. It is killed if still running, and forgotten.
//
// Nothing of it is stored: the entries ahead stay queued, and only the
// batch at the front moves the target, as without it. A daemon killed
// during a run ahead tests those entries again; the target is before or
// after the front batch, never half of it.

// MaxParallel bounds merge.parallel: the batch at the front and one ahead.
const MaxParallel = 2

// aheadDir is the second integration worktree, beside the first.
func (q *Queue) aheadDir() string { return q.wt + "-ahead" }

// ahead is one gate run ahead of the front batch.
type ahead struct {
	cancel context.CancelFunc
	done   chan struct{}

	// Written by the run's goroutine before done is closed.
	base string // the front batch's last candidate: the line's base
	line []link // the entries ahead, their candidates built on base
	run  gateRun
	seq  uint32
	ran  bool // the gate ran to its end on the line
	// recorded: merge_control names the run (Status.Ahead), to be cleared
	// by the loop once the goroutine is done.
	recorded bool
}

// startAhead starts a run ahead of the front batch, whose line is front,
// over up to size entries queued behind it; nil if none is started.
func (q *Queue) startAhead(ctx context.Context, front []link, size int) *ahead {
	if q.opts.Parallel < 2 || len(q.opts.Gate) == 0 || len(q.batch.suspects) > 0 {
		return nil // no gate, or bisecting: the halves are tested one by one
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &ahead{cancel: cancel, done: make(chan struct{}), base: front[len(front)-1].commit}
	go func() {
		defer close(a.done)
		if err := q.runAhead(ctx, a, front, size); err != nil && ctx.Err() == nil {
			q.log.Warn("merge gate ahead of the batch not run", zap.Error(err))
		}
	}()
	return a
}

// runAhead builds the line of up to size entries behind front on front's
// last candidate and runs the gate on it. It runs beside the loop's
// goroutine: it reads no state of the loop's but what it was given.
func (q *Queue) runAhead(ctx context.Context, a *ahead, front []link, size int) error {
	queued, err := q.store.front(ctx, len(front)+size)
	if err != nil {
		return err
	}
	for i, l := range front {
		if i >= len(queued) || queued[i].ID != l.e.ID {
			return nil // the queue is not as the front batch saw it
		}
	}
	base, baseTree := a.base, front[len(front)-1].tree
	for i := len(front); i < len(queued); i++ {
		e := &queued[i]
		// An entry that is not its task's work to merge now ends the line
		// too: its own step drops it.
		if q.opts.Stale != nil {
			if why, err := q.opts.Stale(ctx, *e); err != nil || why != "" {
				break
			}
		}
		// No Prepare: it is the loop's alone (the daemon's fetches and
		// fast-forwards the target). A head not here yet fails to build,
		// and the line ends before it, as at any error, conflict or entry
		// with nothing to add: its own step deals with it.
		cand, err := q.buildIn(ctx, q.aheadDir(), e, base, baseTree)
		if err != nil || len(cand.conflicts) > 0 || cand.noop {
			break
		}
		e.Target, e.Candidate = base, cand.commit // for the gate's log and environment
		a.line = append(a.line, link{e: e, commit: cand.commit, tree: cand.tree})
		base, baseTree = cand.commit, cand.tree
	}
	if len(a.line) == 0 {
		return nil
	}
	tip := a.line[len(a.line)-1]
	if err := q.repo.ensureWorktree(ctx, q.aheadDir(), tip.commit); err != nil {
		return fmt.Errorf("prepare the second integration worktree: %w", err)
	}
	if a.seq, err = q.store.nextGateSeq(ctx); err != nil {
		return err
	}
	es := lineEntries(a.line)
	tasks := make([]int64, len(es))
	for i, e := range es {
		tasks[i] = e.Task
	}
	// For swarmd merge status; the loop clears it once the run is done with.
	if err := q.store.setAhead(ctx, a.seq, tasks); err != nil {
		return err
	}
	a.recorded = true
	q.log.Info("merge gate started ahead", zap.Int64("task", tip.e.Task), zap.Int("batch", len(es)),
		zap.String("candidate", tip.commit), zap.String("on", a.base), zap.Uint32("gate_seq", a.seq))
	if a.run, err = q.runGate(ctx, es, q.aheadDir(), a.seq); err != nil {
		return err
	}
	a.ran = true
	return nil
}

// settleAhead takes in the run ahead, if any, once it has ended: the
// target is target now ("": none, and the run is dropped).
func (q *Queue) settleAhead(ctx context.Context, target string) {
	a := q.ahead
	if a == nil {
		return
	}
	q.ahead = nil
	if a.base != target {
		a.cancel() // built on a base that did not go in
	}
	<-a.done
	a.cancel()
	q.unrecord(ctx, a)
	if a.seq == 0 {
		return // no gate run was started: nothing to build ahead, or it failed first
	}
	if a.ran {
		q.opts.Metrics.GateDuration(a.run.duration)
	}
	if !a.ran || a.base != target || (!a.run.passed() && q.killedOutside(a.run)) {
		// A run the daemon's lease guard killed tested nothing either.
		q.opts.Metrics.RunAhead("dropped")
		return
	}
	es := lineEntries(a.line)
	tip := a.line[len(a.line)-1]
	if a.run.passed() {
		q.opts.Metrics.RunAhead("passed")
		q.batch.green(es)
		q.passed = passedGate{target: target, line: a.line, seq: a.seq}
		q.log.Info("merge gate ahead passed", zap.Int64("task", tip.e.Task), zap.Int("batch", len(es)), zap.Uint32("gate_seq", a.seq))
		return
	}
	kind, detail := q.rejection(a.run)
	q.opts.Metrics.RunAhead("failed")
	// As a red gate at the front: the next step's line has this tree and is
	// split without a run, down to the entry that fails.
	q.batch.split(es, tip.tree, redGate{kind: kind, tail: detail, seq: a.seq})
	q.log.Info("merge gate ahead failed; bisecting", zap.Int("batch", len(es)), zap.Uint32("gate_seq", a.seq))
}

// dropAhead kills the run ahead, if any, and waits for it.
func (q *Queue) dropAhead() {
	if q.ahead == nil {
		return
	}
	// The loop's context may be over (a stop): the record is still cleared.
	ctx, cancel := context.WithTimeout(context.Background(), unrecordTimeout)
	defer cancel()
	q.settleAhead(ctx, "") // no base is ""
}

// unrecordTimeout bounds clearing a dropped run's record at a stop.
const unrecordTimeout = 5 * time.Second

// unrecord clears a's record, if it made one; one it cannot clear now is
// cleared by the next step (clearStaleAhead), as a killed daemon's is.
func (q *Queue) unrecord(ctx context.Context, a *ahead) {
	if !a.recorded {
		return
	}
	if err := q.store.setAhead(ctx, 0, nil); err != nil {
		q.log.Warn("merge queue: clear the run ahead's record", zap.Error(err))
		q.staleChecked = false
	}
}

// clearStaleAhead clears, once per queue, the record of a run ahead that a
// daemon killed during it left: no run of this queue's is ahead yet.
func (q *Queue) clearStaleAhead(ctx context.Context) error {
	if q.staleChecked {
		return nil
	}
	a, err := q.store.ahead(ctx)
	if err == nil && a != nil {
		err = q.store.setAhead(ctx, 0, nil)
	}
	q.staleChecked = err == nil
	return err
}
