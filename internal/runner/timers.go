package runner

import (
	"context"
	"time"
)

// timer is one of the running session's timers. It is nil until armed and
// nil again once it fired or was stopped, so that a select on C never waits
// on a stale one: an unarmed timer's C is nil, which is never ready.
type timer struct{ t *time.Timer }

// arm starts the timer afresh; a previous one is stopped, not left to fire.
func (t *timer) arm(d time.Duration) {
	t.stop()
	t.t = time.NewTimer(d)
}

func (t *timer) armed() bool { return t.t != nil }

// C is the channel to select on; nil while unarmed.
func (t *timer) C() <-chan time.Time {
	if t.t == nil {
		return nil
	}
	return t.t.C
}

// fired forgets a timer whose C was received from.
func (t *timer) fired() { t.t = nil }

func (t *timer) stop() {
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
}

// timers are the running session's deadlines; only the Run goroutine uses
// them (waitSession selects on their channels).
type timers struct {
	timeout timer // session_timeout: the runner cancels the session
	kill    timer // the grace period after the runner cancelled it: force stop
	grace   timer // the grace period after urgent mail interrupted it: GraceExceeded
}

// startTimeout arms the session timeout of a session that just started, or
// what is left of it after a freeze.
func (ts *timers) startTimeout(d time.Duration) { ts.timeout.arm(d) }

// pauseTimeout stops the session timeout while the session is frozen; thaw
// arms it again with what was left.
func (ts *timers) pauseTimeout() { ts.timeout.stop() }

// cancelled bounds a session the runner cancelled (its timeout, an Abort)
// by the grace period instead of the session timeout. A kill already
// armed keeps its deadline: a second cancel gives no more time.
func (ts *timers) cancelled(grace time.Duration) {
	ts.timeout.stop()
	if !ts.kill.armed() {
		ts.kill.arm(grace)
	}
}

// interrupted bounds a session that urgent mail interrupted by the grace
// period, after which the machine gets GraceExceeded; its session timeout
// and a pending kill no longer apply.
func (ts *timers) interrupted(grace time.Duration) {
	ts.timeout.stop()
	ts.kill.stop()
	ts.grace.arm(grace)
}

// stop disarms all of them: the session has ended.
func (ts *timers) stop() {
	ts.timeout.stop()
	ts.grace.stop()
	ts.kill.stop()
}

// sleep waits for d, on one timer, and reports false when ctx ended the
// wait first (a stop): the backoff of CoolingDown and min_session_interval.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
