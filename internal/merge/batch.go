package merge

import (
	"context"
	"slices"

	"go.uber.org/zap"
)

// Batching. With merge.batch above 1 a step takes up to that many entries
// from the front of the queue, builds their candidates in a line (each
// its own commit on the one before, in queue order), runs the gate once on
// the last one, and on green moves the target over all of them in one
// compare-and-swap. On red it bisects: the next step tests the first half;
// a green half goes in, and the half left, whose candidate has the very
// tree that failed, is split again without a gate run; a red half is split
// until one entry is left, which is rejected as a red gate is today.
//
// The size adapts, as TCP's window does: a red gate on a new batch halves
// it (the red gates of its bisection do not: they chase the same failure),
// each green gate doubles it, between 1 and merge.batch. A queue with a
// failure now and then is back at full size after a gate or two; one where
// most fail tests nearly one at a time, where batching would only cost
// runs.
//
// None of this is stored: it is a guess about what the next gate will
// say. A restarted daemon starts at full size with no batch under suspicion,
// and the queue's rows alone say what is merged.

// DefaultBatch is the largest batch of the config's default (merge.batch);
// Options.Batch 0 means 1, one entry at a time.
const DefaultBatch = 8

// batchState is the loop's batching: only its goroutine touches it.
type batchState struct {
	max, size int
	// suspects are the entries of a batch whose gate failed and that are
	// neither merged nor rejected yet, in queue order: one of them fails.
	suspects []suspect
	// red are the trees whose gate failed during this bisection.
	red map[string]redGate
}

type suspect struct {
	id   int64
	head string
}

// redGate is a gate run that failed.
type redGate struct {
	kind Kind
	tail string
	seq  uint32
}

func newBatchState(n int) batchState {
	n = min(max(n, 1), MaxBatch)
	return batchState{max: n, size: n}
}

// MaxBatch bounds merge.batch: a red gate over more tasks costs too many
// runs to bisect.
const MaxBatch = 64

// want is how many entries the next step looks at: the suspects while
// bisecting, else the current size.
func (b *batchState) want() int {
	if len(b.suspects) > 0 {
		return len(b.suspects)
	}
	return b.size
}

// match ends a bisection whose suspects are no longer the front of the
// queue as they were (a new head queued for one, an entry gone).
func (b *batchState) match(es []*Entry) {
	if len(b.suspects) == 0 {
		return
	}
	ok := len(es) >= len(b.suspects)
	for i := 0; ok && i < len(b.suspects); i++ {
		ok = es[i].ID == b.suspects[i].id && es[i].Head == b.suspects[i].head
	}
	if !ok {
		b.suspects, b.red = nil, nil
	}
}

// isRed reports whether a candidate with tree failed its gate already.
func (b *batchState) isRed(tree string) bool {
	_, ok := b.red[tree]
	return ok
}

// split starts (or goes on with) a bisection: the batch es failed its gate
// on a candidate with tree.
func (b *batchState) split(es []*Entry, tree string, run redGate) {
	b.failed()
	b.suspects = b.suspects[:0]
	for _, e := range es {
		b.suspects = append(b.suspects, suspect{id: e.ID, head: e.Head})
	}
	if b.red == nil {
		b.red = map[string]redGate{}
	}
	b.red[tree] = run
}

// failed shrinks the size after a red gate on a new batch; the red gates
// of a bisection chase the same failure and leave it as it is.
func (b *batchState) failed() {
	if len(b.suspects) == 0 {
		b.size = max(1, b.size/2)
	}
}

// green grows the size after a green gate.
func (b *batchState) green([]*Entry) { b.size = min(b.max, b.size*2) }

// found takes e, merged or rejected, off the suspects; with none left the
// bisection is over.
func (b *batchState) found(e *Entry) {
	b.suspects = slices.DeleteFunc(b.suspects, func(s suspect) bool { return s.id == e.ID })
	if len(b.suspects) == 0 {
		b.suspects, b.red = nil, nil
	}
}

// passedGate is the line whose gate passed while the target could not be
// advanced yet (a dirty checkout), or a run ahead's that passed on what is
// now the target: the same candidates go in without a second gate run, if
// the front of the queue and the target are as they were.
type passedGate struct {
	target string
	line   []link
	seq    uint32 // the gate run that passed
}

func (p passedGate) matches(es []*Entry, target string) bool {
	if p.line == nil || p.target != target || len(es) < len(p.line) {
		return false
	}
	for i, l := range p.line {
		if es[i].ID != l.e.ID || es[i].Head != l.e.Head {
			return false
		}
	}
	return true
}

// outcomes collects the results of one step, to be stored together.
type outcomes struct {
	results            []result
	stored             int // results[:stored] are in the store
	nMerged, nRejected int
	split, rebuild     bool
	waiting            bool
	// tip: the target moved to, written with the results (merge_target).
	tip *tipWrite
}

func (o *outcomes) merged(e *Entry, commit, note string) {
	o.results = append(o.results, result{e: e, result: ResultMerged, commit: commit, detail: note})
	o.nMerged++
}

func (o *outcomes) rejected(e *Entry, kind Kind, detail string) {
	o.results = append(o.results, result{e: e, result: string(kind), detail: detail})
	o.nRejected++
}

// dropped: e is not to be merged now (Options.Stale says why).
func (o *outcomes) dropped(e *Entry, why string) { o.rejected(e, KindStale, why) }

func (o *outcomes) has(e *Entry) bool {
	return slices.ContainsFunc(o.results, func(r result) bool { return r.e == e })
}

func (o *outcomes) any() bool { return o.nMerged+o.nRejected > 0 }

// or folds in the outcome of the step's last part.
func (o *outcomes) or(out Outcome) {
	switch out {
	case OutcomeMerged:
		o.nMerged++
	case OutcomeRejected:
		o.nRejected++
	case OutcomeSplit:
		o.split = true
	case OutcomeRebuild:
		o.rebuild = true
	case OutcomeWaiting:
		o.waiting = true
	}
}

// outcome is the step's: a split or a rebuild asks for another step at
// once, as do merges and rejections.
func (o *outcomes) outcome() Outcome {
	switch {
	case o.split:
		return OutcomeSplit
	case o.rebuild:
		return OutcomeRebuild
	case o.nMerged > 0:
		return OutcomeMerged
	case o.nRejected > 0:
		return OutcomeRejected
	case o.waiting:
		return OutcomeWaiting
	}
	return OutcomeIdle
}

// finish stores the results collected so far in one transaction, then
// counts and logs them.
func (q *Queue) finish(ctx context.Context, o *outcomes) error {
	rs := o.results[o.stored:]
	if len(rs) == 0 {
		return nil
	}
	if err := q.store.finishBatch(ctx, rs, o.tip); err != nil {
		return err
	}
	o.stored = len(o.results)
	for _, r := range rs {
		q.opts.Metrics.MergeResult(r.result)
		if r.result == ResultMerged {
			q.log.Info("merged", zap.Int64("task", r.e.Task), zap.String("branch", r.e.Branch), zap.String("into", q.opts.Into),
				zap.String("commit", r.commit))
			continue
		}
		q.log.Info("merge rejected", zap.Int64("task", r.e.Task), zap.String("branch", r.e.Branch), zap.String("kind", r.result),
			zap.String("detail", firstLines(r.detail, 5)))
	}
	return nil
}
