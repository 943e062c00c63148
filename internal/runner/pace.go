package runner

import (
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// A hot loop is hotLoopAfter sessions in a row that ended on their own
// within hotLoopSession of starting: a backend that exits at once, which
// min_session_interval throttles and status points out.
const (
	hotLoopSession = time.Second
	hotLoopAfter   = 3
)

// pace waits until min_session_interval has passed since the last session
// was spawned, so that a backend that exits at once is not respawned as fast
// as the machine allows. One timer, no polling; it reports false when a stop
// cut the wait short.
//
// A provider's rate limit with a known reset (the last session ended on a
// 429) is waited for here too, whatever the provider gate says.
func (r *Runner) pace() bool {
	var wait time.Duration
	if !r.lastSpawn.IsZero() && r.cfg.MinSessionInterval > 0 {
		wait = time.Until(r.lastSpawn.Add(r.cfg.MinSessionInterval))
	}
	if reset := time.Until(r.retryAfter); reset > wait {
		r.log.Info("rate limited: waiting for the provider's reset time", zap.Time("until", r.retryAfter))
		wait = reset
	}
	if wait <= 0 {
		return true
	}
	return sleep(r.stopCtx, wait)
}

// noteSessionEnd keeps what status shows about an ended session: whether
// the agent is in a hot loop and whether its log hit a full disk.
func (r *Runner) noteSessionEnd(res backend.Result, stopping bool) {
	r.setDiskFull(res.DiskFull)
	if res.LogDropped > 0 {
		r.log.Warn("session log capped at logs.max_session_bytes", zap.String("session", r.sessionID),
			zap.Int64("dropped_bytes", res.LogDropped), zap.Int64("max_session_bytes", r.cfg.MaxLogBytes))
	}
	// A session the runner ended (stop, interrupt, timeout) says nothing
	// about how long the backend runs by itself.
	if stopping || r.timedOut || r.forced || r.m.State().Kind == agent.Interrupting {
		return
	}
	if res.Ended.Sub(res.Started) >= hotLoopSession {
		r.quick = 0
		return
	}
	r.quick++
	if r.quick == hotLoopAfter {
		r.log.Warn("hot loop: sessions keep ending within a second of starting",
			zap.Int("sessions", r.quick), zap.Duration("min_session_interval", r.cfg.MinSessionInterval))
	}
}
