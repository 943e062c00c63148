package service

import "time"

// UntilAligned is how long until the wall clock's next multiple of d. The
// daemon's periodic safety checks (the router's poll, the health check, the
// reaper's scan) wait for those instants, so that an idle daemon wakes once
// per period for all of them, not once for each.
func UntilAligned(d time.Duration) time.Duration {
	now := time.Now()
	return now.Truncate(d).Add(d).Sub(now)
}
