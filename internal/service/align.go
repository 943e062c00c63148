package service

import (
	"context"
	"time"
)

// UntilAligned is how long until the wall clock's next multiple of d. The
// daemon's periodic safety checks (the router's poll, the health check, the
// reaper's scan) wait for those instants, so that an idle daemon wakes once
// per period for all of them, not once for each.
func UntilAligned(d time.Duration) time.Duration {
	now := time.Now()
	return now.Truncate(d).Add(d).Sub(now)
}

// Every calls fn at the wall clock's multiples of every (UntilAligned),
// at once first if now is set, until ctx ends: the loop of a service that
// does one thing at a low rate, waking when the daemon's other periodic
// checks do.
func Every(ctx context.Context, every time.Duration, now bool, fn func(ctx context.Context)) {
	first := UntilAligned(every)
	if now {
		first = 0
	}
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn(ctx)
		t.Reset(UntilAligned(every))
	}
}
