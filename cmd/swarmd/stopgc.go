package main

import (
	"runtime/debug"
	"runtime/metrics"
)

// stopMemoryHeadroom is how far past what the daemon holds when its stop
// begins its memory may grow before the collector runs again.
const stopMemoryHeadroom = 64 << 20

// collectLessWhileStopping turns the garbage collector's pacing off for the
// daemon's stop: the process ends after it, and a collection there frees
// memory no one will use again (3% of the CPU of a stop of 200 agents, in a
// profile). A memory limit a little above what the daemon holds keeps a
// stop that runs long (sessions that take their grace, a store that is
// away) from growing without bound: the collector runs again at it. An
// operator's lower GOMEMLIMIT stays.
func collectLessWhileStopping() {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	limit := int64(stopMemoryHeadroom)
	if s[0].Value.Kind() == metrics.KindUint64 {
		limit += int64(s[0].Value.Uint64())
	}
	if cur := debug.SetMemoryLimit(-1); cur < limit {
		limit = cur
	}
	debug.SetMemoryLimit(limit)
	debug.SetGCPercent(-1)
}
