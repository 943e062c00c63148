package merge

import (
	"context"
	"sync"
)

// The target is the queue's: whoever else moves it (an agent running `git
// update-ref refs/heads/main` in its worktree, a push) is to be seen,
// recorded and told, once. The queue remembers where it put the target (or
// found it at start, or was told a watcher reported it) and where it is
// putting it, so that a watcher can tell its moves from anyone else's, a
// move back to an old tip included.
//
// A watcher's look (Sight, then Claim) and the queue's own move race: the
// queue builds on the target wherever it is, a tip nobody has reported yet
// included, and may move it on while a watcher that read that tip is still
// looking. A claim made after the queue moved would take the queue's
// place back to the stale tip, and the queue's own move would then be
// reported as someone else's. So the queue's changes are counted (gen),
// a claim is refused when one came between the sighting and it, and a
// move the queue built on that no watcher had claimed is kept (found) for
// the next look to report: each move is reported once, whoever sees it
// first.

// Move is a move of the target the queue did not make: From, where the
// queue knew it to be (it put it there, found it there at start, or a
// move to it was reported), To, where it was found.
type Move struct{ From, To string }

// owned is the tip the queue knows to be in place and the one it is
// advancing the target to ("" when none).
type owned struct {
	mu               sync.Mutex
	current, pending string
	gen              uint64 // counts changes of current and pending
	found            []Move // moves someone else made that the queue built on, not reported yet
}

// advancing records tip as the one the target is about to be moved to.
func (o *owned) advancing(tip string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = tip
	o.gen++
}

// set records tip as in place.
func (o *owned) set(tip string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.current, o.pending = tip, ""
	o.gen++
}

// moved records the queue's move of the target from old to tip. An old
// that is not where the queue knew the target to be was someone else's
// move, which no watcher claimed yet: it is kept for the next look.
func (o *owned) moved(old, tip string) {
	if f, _ := o.move(old, tip); f != nil {
		o.addFound(*f)
	}
}

// move is moved for a caller that records the move someone else made
// that the queue built on itself (found, nil when none) in the store, with
// the queue's move, in one transaction: the count after the move orders
// that write (merge_target's gen); one that failed hands found back
// (addFound) for the next look.
func (o *owned) move(old, tip string) (found *Move, gen uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if old != o.current {
		found = &Move{From: o.current, To: old}
	}
	o.current, o.pending = tip, ""
	o.gen++
	return found, o.gen
}

// addFound keeps m for the next look to report.
func (o *owned) addFound(m Move) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.found = append(o.found, m)
}

// now is where the queue knows the target to be, and the count of its
// changes.
func (o *owned) now() (string, uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.current, o.gen
}

// done forgets a pending move that did not happen (the target moved
// meanwhile, a dirty checkout).
func (o *owned) done() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = ""
}

// Target is where the target branch is now.
func (q *Queue) Target(ctx context.Context) (string, error) {
	tip, _, err := q.repo.tip(ctx, q.opts.Into)
	return tip, err
}

// Sighting is one read of the target by a watcher, against what the queue
// knew when it was read.
type Sighting struct {
	Tip  string // where the target was
	Last string // where the queue knew it to be (its Move's From)
	// Own: Tip is where the queue put the target (or found it at start,
	// or a watcher claimed it), or where it is putting it.
	Own bool
	gen uint64
}

// Sight reads the target for a watcher. One that is not the queue's own
// is reported once Claim takes it.
func (q *Queue) Sight(ctx context.Context) (Sighting, error) {
	return q.owned.sight(func() (string, error) { return q.Target(ctx) })
}

// sight is Sight with the target read by read.
func (o *owned) sight(read func() (string, error)) (Sighting, error) {
	o.mu.Lock()
	s := Sighting{Last: o.current, gen: o.gen}
	pending := o.pending
	o.mu.Unlock()
	// Read after what the queue knew: a move of the queue's that lands
	// before this read was pending (or set) by then.
	tip, err := read()
	if err != nil {
		return Sighting{}, err
	}
	s.Tip = tip
	s.Own = tip == s.Last || (pending != "" && tip == pending)
	return s, nil
}

// Claim makes s.Tip, a move someone else made, the one the queue knows to
// be in place, so that it is reported once: false when the queue moved the
// target or began to since s was read (the watcher takes Found and sights
// again).
func (q *Queue) Claim(s Sighting) bool { return q.owned.claim(s) }

func (o *owned) claim(s Sighting) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gen != s.gen {
		return false
	}
	o.current, o.pending = s.Tip, ""
	o.gen++
	return true
}

// Found takes the moves someone else made that the queue moved the
// target on from before any watcher claimed them; each is returned once.
func (q *Queue) Found() []Move { return q.owned.takeFound() }

func (o *owned) takeFound() []Move {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := o.found
	o.found = nil
	return f
}

// Unrecorded hands back m, a move someone else made that Found or Claim
// took but whose record the store refused: the next look records it, or
// the queue's next merge with its own record; a stop before either leaves
// it to the next start (Settle), as the known tip is still before it.
func (q *Queue) Unrecorded(m Move) { q.owned.addFound(m) }

// IsAncestor reports whether commit a is an ancestor of b (or b itself).
func (q *Queue) IsAncestor(ctx context.Context, a, b string) (bool, error) {
	return q.repo.isAncestor(ctx, a, b)
}
