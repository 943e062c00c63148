package runner

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
)

// Pause is an operator's hold on an agent. It is kept beside the state
// machine, not in it: the seed's eight states stay exact. A paused agent
// starts no session: it waits in BuildingPrompt, as an idle agent does,
// until Resume. A running session finishes, unless Now froze it.
type Pause struct {
	Actor  string // who paused: operator, agent:NAME, daemon
	Reason string
	Since  time.Time
	// Now freezes the running session: every process of its tree is
	// stopped (SIGSTOP) and its session timeout stops counting, until
	// Resume continues it where it was.
	Now bool
}

// Freezer is a session whose process tree can be stopped and continued
// (the backends' sessions are).
type Freezer interface {
	Freeze() (int, error)
	Thaw() (int, error)
}

// pauser is the Runner's part for pauses: the operator's hold, set from
// any goroutine, and the freeze of the running session, the Run
// goroutine's.
type pauser struct {
	mu    sync.Mutex
	pause *Pause        // guarded by mu; nil when not paused
	ch    chan struct{} // capacity 1: a pause or resume for the Run goroutine
	fr    freeze        // owned by the Run goroutine
}

// freeze is how long the running session has been frozen (Pause.Now).
type freeze struct {
	frozen  bool
	procs   int // processes the freeze stopped
	at      time.Time
	total   time.Duration // how long session has been frozen, earlier freezes included
	session string        // the session total counts for
}

// init takes a pause that survived a restart: the session it froze died
// with the daemon, so it freezes nothing.
func (pz *pauser) init(p *Pause) {
	pz.ch = make(chan struct{}, 1)
	if p != nil {
		cp := *p
		cp.Now = false
		pz.pause = &cp
	}
}

// set pauses: a pause of a paused agent keeps the first Since and takes
// the new actor and reason; Now, once asked for, stays until lift.
func (pz *pauser) set(p Pause, now time.Time) {
	pz.mu.Lock()
	if old := pz.pause; old != nil {
		p.Since, p.Now = old.Since, p.Now || old.Now
	}
	if p.Since.IsZero() {
		p.Since = now
	}
	pz.pause = &p
	pz.mu.Unlock()
	pz.signal()
}

// lift ends the pause and reports whether there was one.
func (pz *pauser) lift() bool {
	pz.mu.Lock()
	was := pz.pause != nil
	pz.pause = nil
	pz.mu.Unlock()
	if was {
		pz.signal()
	}
	return was
}

func (pz *pauser) get() (Pause, bool) {
	pz.mu.Lock()
	defer pz.mu.Unlock()
	if pz.pause == nil {
		return Pause{}, false
	}
	return *pz.pause, true
}

func (pz *pauser) signal() { poke(pz.ch) }

// fill copies the pause into a snapshot.
func (pz *pauser) fill(s *Snapshot) {
	p, paused := pz.get()
	s.Paused, s.PauseReason, s.PausedBy, s.PausedSince = paused, p.Reason, p.Actor, p.Since
}

// froze records that session's processes were stopped at now; a freeze of
// another session than the last one's starts counting afresh.
func (f *freeze) froze(session string, procs int, now time.Time) {
	if f.session != session {
		f.session, f.total = session, 0
	}
	f.frozen, f.procs, f.at = true, procs, now
}

// thawed records the end of the freeze and returns how long the session
// has been frozen in all.
func (f *freeze) thawed(now time.Time) time.Duration {
	f.total += now.Sub(f.at)
	f.frozen, f.procs = false, 0
	return f.total
}

// timeoutLeft is what is left at now of a session timeout d of a session
// started at started, its freezes not counted.
func (f *freeze) timeoutLeft(started time.Time, d time.Duration, now time.Time) time.Duration {
	return max(started.Add(d+f.total).Sub(now), 0)
}

// Pause holds the agent (see Pause). Pausing a paused agent keeps its
// first Since and takes the new actor and reason; Now, once asked for,
// stays until Resume. It does not wait: a freeze happens on the Run
// goroutine, and Watch shows it (Snapshot.Frozen).
func (r *Runner) Pause(p Pause) {
	r.pz.set(p, time.Now())
	r.publishPause()
}

// Resume lifts a pause, thawing a frozen session, and reports whether the
// agent was paused.
func (r *Runner) Resume() bool {
	if !r.pz.lift() {
		return false
	}
	r.publishPause()
	r.Wake() // out of the wait in BuildingPrompt
	return true
}

// Paused returns the agent's pause, if it has one.
func (r *Runner) Paused() (Pause, bool) { return r.pz.get() }

// publishPause publishes the snapshot's pause fields: the pause as it is
// now, so that of two concurrent changes the last publish shows the last.
func (r *Runner) publishPause() {
	r.snaps.update(func(s *Snapshot) bool {
		r.pz.fill(s)
		return true
	})
}

// publishFrozen publishes whether the session is frozen; only the Run
// goroutine calls it.
func (r *Runner) publishFrozen() {
	frozen, procs := r.pz.fr.frozen, r.pz.fr.procs
	r.snaps.update(func(s *Snapshot) bool {
		s.Frozen, s.FrozenProcs = frozen, procs
		r.pz.fill(s)
		return true
	})
}

// holdWhilePaused waits in BuildingPrompt while the agent is paused, on the
// wake-ups an idle agent waits for (Resume sends one). It reports false
// when a stop cut the wait short.
func (r *Runner) holdWhilePaused() bool {
	for {
		if _, paused := r.Paused(); !paused {
			return true
		}
		select {
		case <-r.inbox.wake:
		case <-r.stop.ctx.Done():
			return false
		}
	}
}

// held reports whether urgent mail must wait: a paused agent is not
// interrupted; the message goes into the first prompt after the resume.
func (r *Runner) held() bool {
	_, paused := r.Paused()
	return paused
}

// pauseChanged applies a pause or resume to the running session: freeze it
// for a pause --now, thaw it when the pause is lifted, then let urgent mail
// that waited interrupt it.
func (r *Runner) pauseChanged() {
	p, paused := r.Paused()
	switch {
	case paused && p.Now && !r.pz.fr.frozen:
		r.freeze()
	case !paused && r.pz.fr.frozen:
		r.thaw()
	}
	if !paused {
		r.maybeInterrupt()
	}
}

// freeze stops the running session's whole tree. A session that is already
// ending (timed out, interrupted) is left to end: the pause then holds the
// next one. The session timeout stops counting: its timer is stopped here
// and armed again at the thaw with what was left.
func (r *Runner) freeze() {
	sess := r.cur.get()
	if sess == nil || r.m.State().Kind != agent.Running || r.cur.timedOut {
		return
	}
	f, ok := sess.(Freezer)
	if !ok {
		r.log.Warn("pause --now: this backend's sessions cannot be frozen; the session runs on", zap.String("session", r.seq.id))
		return
	}
	r.cur.tm.pauseTimeout()
	n, err := f.Freeze()
	if err != nil {
		r.log.Warn("pause --now: freeze the session", zap.String("session", r.seq.id), zap.Error(err))
	}
	r.pz.fr.froze(r.seq.id, n, time.Now())
	r.publishFrozen()
	r.log.Info("paused: session frozen", zap.String("session", r.seq.id), zap.Int("processes", n))
}

// thaw continues the frozen session and re-arms its timeout with the time
// it had left.
func (r *Runner) thaw() {
	now := time.Now()
	total := r.pz.fr.thawed(now)
	if sess := r.cur.get(); sess != nil {
		n, err := sess.(Freezer).Thaw()
		if err != nil {
			r.log.Warn("resume: thaw the session", zap.String("session", r.seq.id), zap.Error(err))
		}
		if r.cfg.Timeout > 0 {
			r.cur.tm.startTimeout(r.pz.fr.timeoutLeft(r.cur.startedAt(), r.cfg.Timeout, time.Now()))
		}
		r.log.Info("resumed: session thawed", zap.String("session", r.seq.id), zap.Int("processes", n),
			zap.Duration("frozen", total))
	}
	r.publishFrozen()
}

// sessionGone forgets the freeze of a session that has ended (a stop thaws
// it to cancel it; SIGKILL needs no thaw).
func (r *Runner) sessionGone() {
	if r.pz.fr.frozen {
		r.pz.fr.frozen, r.pz.fr.procs = false, 0
		r.publishFrozen()
	}
}
