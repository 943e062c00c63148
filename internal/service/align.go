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

// Every calls fn first after first, then every after each call returns,
// until ctx ends: the loop of a service that does one thing at a low rate
// (first 0: at once).
func Every(ctx context.Context, first, every time.Duration, fn func(ctx context.Context)) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn(ctx)
		t.Reset(every)
	}
}
