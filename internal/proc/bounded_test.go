package proc

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestWaitBounded: a tree that ends by itself is waited for; one past its
// bound is ended, with SIGTERM first when it has a grace (its trap runs)
// and killed at once without; one whose context ends is ended the same way.
func TestWaitBounded(t *testing.T) {
	s := newSupervisor(t)
	ctx := context.Background()

	tr := startSh(t, s, "quick", `exit 3`, nil)
	if got := tr.WaitBounded(ctx, time.Minute, 0); got != EndedOnItsOwn {
		t.Errorf("a tree that exits: %v, want EndedOnItsOwn", got)
	}
	if st := tr.Exit(); st.Code != 3 {
		t.Errorf("exit %v, want code 3", st)
	}

	// With a grace: SIGTERM, whose trap says so and exits 7.
	out := newLineSink()
	tr = startSh(t, s, "graceful", `trap 'echo term; exit 7' TERM; echo up; while :; do sleep 0.05; done`, out)
	out.next(t) // the trap is set
	if got := tr.WaitBounded(ctx, 50*time.Millisecond, time.Minute); got != EndedAtBound {
		t.Errorf("past its bound: %v, want EndedAtBound", got)
	}
	// Done comes after the last write: what the tree said is all there.
	if said := drain(out); !slices.Contains(said, "term") {
		t.Errorf("the tree said %q, want term (SIGTERM before the kill)", said)
	}
	if st := tr.Exit(); st.Code != 7 || st.Signal != 0 {
		t.Errorf("exit %v, want code 7 from the trap", st)
	}

	// With a grace that runs out: killed.
	out = newLineSink()
	tr = startSh(t, s, "stubborn", `trap '' TERM; echo up; while :; do sleep 0.05; done`, out)
	out.next(t)
	if got := tr.WaitBounded(ctx, 10*time.Millisecond, 50*time.Millisecond); got != EndedAtBound {
		t.Errorf("stubborn past its bound: %v, want EndedAtBound", got)
	}
	if st := tr.Exit(); st.Signal != syscall.SIGKILL {
		t.Errorf("exit %v, want killed", st)
	}

	// No grace, the context ends: killed at once, no bound needed.
	out = newLineSink()
	tr = startSh(t, s, "cancelled", `trap 'echo term' TERM; echo up; while :; do sleep 0.05; done`, out)
	out.next(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got := tr.WaitBounded(cctx, 0, 0); got != EndedByContext {
		t.Errorf("context ended: %v, want EndedByContext", got)
	}
	if st := tr.Exit(); st.Signal != syscall.SIGKILL {
		t.Errorf("exit %v, want killed without a SIGTERM first", st)
	}
}

// drain is what out holds now.
func drain(out *lineSink) []string {
	var lines []string
	for {
		select {
		case l := <-out.ch:
			lines = append(lines, l)
		default:
			return lines
		}
	}
}
