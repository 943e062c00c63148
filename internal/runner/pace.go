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

// pacing is what the Run goroutine keeps of past sessions to pace the
// next: when the last was spawned (min_session_interval counts from it), a
// rate-limited session's provider reset time, and what status shows (a hot
// loop, a full disk).
type pacing struct {
	lastSpawn  time.Time
	retryAfter time.Time // a rate-limited session's provider reset time
	quick      int       // sessions in a row that ended on their own in under hotLoopSession
	diskFull   string    // Snapshot.DiskFull
}

// wait is how long, at now, the next session must wait: until interval has
// passed since the last spawn, and until the provider's reset time
// (rateLimited says the reset is the longer wait).
func (p *pacing) wait(now time.Time, interval time.Duration) (d time.Duration, rateLimited bool) {
	if !p.lastSpawn.IsZero() && interval > 0 {
		d = p.lastSpawn.Add(interval).Sub(now)
	}
	if reset := p.retryAfter.Sub(now); reset > d {
		return reset, true
	}
	return d, false
}

// coolUntil is when a backoff that ends at until really ends: a rate limit
// keeps the agent cooling down until the provider's reset time, however
// short the backoff (later says it does).
func (p *pacing) coolUntil(until time.Time) (end time.Time, later bool) {
	if p.retryAfter.After(until) {
		return p.retryAfter, true
	}
	return until, false
}

// ended counts a session that ended on its own after d: it reports true
// when the sessions that ended at once make a hot loop now.
func (p *pacing) ended(d time.Duration) (hotNow bool) {
	if d >= hotLoopSession {
		p.quick = 0
		return false
	}
	p.quick++
	return p.quick == hotLoopAfter
}

// hot reports whether the agent is in a hot loop.
func (p *pacing) hot() bool { return p.quick >= hotLoopAfter }

// setDiskFull records how the last write failed for lack of space ("" once
// one works) and returns what it was.
func (p *pacing) setDiskFull(msg string) (was string) {
	was, p.diskFull = p.diskFull, msg
	return was
}

// pace waits until min_session_interval has passed since the last session
// was spawned, so that a backend that exits at once is not respawned as fast
// as the machine allows. One timer, no polling; it reports false when a stop
// cut the wait short.
//
// A provider's rate limit with a known reset (the last session ended on a
// 429) is waited for here too, whatever the provider gate says.
func (r *Runner) pace() bool {
	wait, rateLimited := r.pacing.wait(time.Now(), r.cfg.MinSessionInterval)
	if rateLimited {
		r.log.Info("rate limited: waiting for the provider's reset time", zap.Time("until", r.pacing.retryAfter))
	}
	if wait <= 0 {
		return true
	}
	return sleep(r.stop.ctx, wait)
}

// noteSessionEnd keeps what status shows about an ended session: whether
// the agent is in a hot loop and whether its log hit a full disk.
func (r *Runner) noteSessionEnd(res backend.Result, stopping bool) {
	r.setDiskFull(res.DiskFull)
	if res.LogDropped > 0 {
		r.log.Warn("session log capped at logs.max_session_bytes", zap.String("session", r.seq.id),
			zap.Int64("dropped_bytes", res.LogDropped), zap.Int64("max_session_bytes", r.cfg.MaxLogBytes))
	}
	// A session the runner ended (stop, interrupt, timeout) says nothing
	// about how long the backend runs by itself.
	if stopping || r.cur.timedOut || r.cur.forced || r.m.State().Kind == agent.Interrupting {
		return
	}
	if r.pacing.ended(res.Ended.Sub(res.Started)) {
		r.log.Warn("hot loop: sessions keep ending within a second of starting",
			zap.Int("sessions", r.pacing.quick), zap.Duration("min_session_interval", r.cfg.MinSessionInterval))
	}
}
