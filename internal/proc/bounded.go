package proc

import (
	"context"
	"syscall"
	"time"
)

// Ending says why WaitBounded ended a tree, if it did.
type Ending int

// The Endings.
const (
	EndedOnItsOwn  Ending = iota // the tree ended before its bound and ctx
	EndedAtBound                 // the bound passed: the tree was ended
	EndedByContext               // ctx ended: the tree was ended
)

// WaitBounded waits for the tree to end, and ends it when bound passes (0:
// no bound) or ctx ends: with grace 0 it is killed whole at once; else it
// gets SIGTERM (its programs clean up: git removes its lock files) and is
// killed whole grace later. It returns once the tree has ended, and why.
// A tree that ended on its own just as it was being ended still counts as
// ended by WaitBounded; Exit tells the two apart (a signal or not).
func (t *Tree) WaitBounded(ctx context.Context, bound, grace time.Duration) Ending {
	var timeout <-chan time.Time
	if bound > 0 {
		timer := time.NewTimer(bound)
		defer timer.Stop()
		timeout = timer.C
	}
	why := EndedOnItsOwn
	select {
	case <-t.Done():
		return EndedOnItsOwn
	case <-timeout:
		why = EndedAtBound
	case <-ctx.Done():
		why = EndedByContext
	}
	t.end(grace)
	return why
}

// end ends the tree (see WaitBounded) and returns once it has ended. Its
// errors only say the tree had ended on its own meanwhile.
func (t *Tree) end(grace time.Duration) {
	if grace > 0 {
		_ = t.Signal(syscall.SIGTERM)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-t.Done():
			return
		case <-timer.C:
		}
	}
	_ = t.Kill()
	<-t.Done()
}
