package runner

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// The session timers' hand-offs: a cancel or an interrupt takes the
// session timeout's place, a second cancel gives no more time, and an
// unarmed timer never fires a select.
func TestTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ts timers
		if ts.timeout.C() != nil || ts.kill.C() != nil || ts.grace.C() != nil {
			t.Fatal("unarmed timers have channels")
		}
		ts.startTimeout(time.Minute)
		ts.cancelled(time.Second)
		if ts.timeout.armed() || !ts.kill.armed() {
			t.Fatalf("after cancel: timeout armed %v, kill armed %v", ts.timeout.armed(), ts.kill.armed())
		}
		time.Sleep(500 * time.Millisecond)
		ts.cancelled(time.Second) // keeps the first deadline
		start := time.Now()
		<-ts.kill.C()
		ts.kill.fired()
		if waited := time.Since(start); waited != 500*time.Millisecond {
			t.Errorf("kill fired after %v more, want 500ms", waited)
		}
		ts.startTimeout(time.Minute)
		ts.kill.arm(time.Minute)
		ts.interrupted(time.Second)
		if ts.timeout.armed() || ts.kill.armed() || !ts.grace.armed() {
			t.Fatal("an interrupt leaves only the grace timer")
		}
		ts.stop()
		if ts.timeout.armed() || ts.kill.armed() || ts.grace.armed() {
			t.Fatal("stop left a timer armed")
		}
	})
}

// sleep waits out its duration unless the context ends first.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		if !sleep(ctx, time.Second) {
			t.Error("sleep cut short without a stop")
		}
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		if sleep(ctx, time.Hour) || time.Since(start) != time.Second {
			t.Error("sleep did not end at the stop")
		}
	})
}
