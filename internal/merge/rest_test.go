package merge

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A queue that waits, or whose step failed, steps again no sooner than
// waitFloor, however often it is woken (its own writes woke it through
// the daemon's feeder 37 times a second on a full disk); a wake after the
// floor goes at once, and with no wake it looks again at Recheck. An idle
// queue (after 0) goes at the first wake.
func TestRestKeepsAFloorBetweenWaitingSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := &Queue{wake: make(chan struct{}, 1)}
		ctx := context.Background()
		rested := func(after time.Duration, wakeAt ...time.Duration) time.Duration {
			start := time.Now()
			done := make(chan struct{})
			go func() {
				defer close(done)
				q.rest(ctx, after)
			}()
			var waited time.Duration
			for _, at := range wakeAt {
				time.Sleep(at - waited)
				waited = at
				q.Wake()
			}
			<-done
			return time.Since(start)
		}
		if got := rested(10*time.Second, 0, 100*time.Millisecond, 500*time.Millisecond); got != waitFloor {
			t.Errorf("woken at once and again within the floor: stepped after %v, want %v", got, waitFloor)
		}
		if got := rested(10*time.Second, 3*time.Second); got != 3*time.Second {
			t.Errorf("woken after the floor: stepped after %v, want 3s", got)
		}
		if got := rested(10 * time.Second); got != 10*time.Second {
			t.Errorf("never woken: stepped after %v, want the recheck, 10s", got)
		}
		if got := rested(0, 200*time.Millisecond); got != 200*time.Millisecond {
			t.Errorf("an idle queue woken: stepped after %v, want 200ms", got)
		}
	})
}
