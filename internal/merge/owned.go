package merge

import (
	"context"
	"sync"
)

// The target is the queue's: whoever else moves it (an agent running `git
// update-ref refs/heads/main` in its worktree, a push) is to be seen,
// recorded and told. The queue remembers where it put the target (or
// found it at start) and where it is putting it, so that a watcher can
// tell its moves from anyone else's, a move back to an old tip included.

// owned is the tip the queue knows to be in place and the one it is
// advancing the target to ("" when none).
type owned struct {
	mu               sync.Mutex
	current, pending string
}

// advancing records tip as the one the target is about to be moved to.
func (o *owned) advancing(tip string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = tip
}

// set records tip as in place.
func (o *owned) set(tip string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.current, o.pending = tip, ""
}

// done forgets a pending move that did not happen (the target moved
// meanwhile, a dirty checkout).
func (o *owned) done() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = ""
}

func (o *owned) has(tip string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return tip == o.current || (o.pending != "" && tip == o.pending)
}

func (o *owned) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.current
}

// Target is where the target branch is now.
func (q *Queue) Target(ctx context.Context) (string, error) {
	tip, _, err := q.repo.tip(ctx, q.opts.Into)
	return tip, err
}

// Owns reports whether tip is where the queue put the target (or found
// it at start, or was told to Accept it), or where it is putting it now.
func (q *Queue) Owns(tip string) bool { return q.owned.has(tip) }

// LastOwned is where the queue last put the target (or found or accepted
// it), not where it is still putting it.
func (q *Queue) LastOwned() string { return q.owned.last() }

// Accept makes tip the one the queue knows to be in place: a move someone
// else made, seen and reported, is not reported again, and the queue
// builds on it as it would on any target that moved.
func (q *Queue) Accept(tip string) { q.owned.set(tip) }

// IsAncestor reports whether commit a is an ancestor of b (or b itself).
func (q *Queue) IsAncestor(ctx context.Context, a, b string) (bool, error) {
	return q.repo.isAncestor(ctx, a, b)
}
