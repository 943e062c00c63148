package runner

import (
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

// pauseState is the Runner's part for pauses.
type pauseState struct {
	pause *Pause        // guarded by Runner.mu; nil when not paused
	ch    chan struct{} // capacity 1: a pause or resume for the Run goroutine

	// Owned by the Run goroutine.
	frozen    bool
	procs     int // processes the freeze stopped
	frozenAt  time.Time
	frozenFor time.Duration // how long session has been frozen, earlier freezes included
	session   string        // the session frozenFor counts for
}

func (r *Runner) initPause(p *Pause) {
	r.pz.ch = make(chan struct{}, 1)
	if p != nil {
		cp := *p
		cp.Now = false // the session it froze died with the daemon
		r.pz.pause = &cp
	}
}

// Pause holds the agent (see Pause). Pausing a paused agent keeps its
// first Since and takes the new actor and reason; Now, once asked for,
// stays until Resume. It does not wait: a freeze happens on the Run
// goroutine, and Watch shows it (Snapshot.Frozen).
func (r *Runner) Pause(p Pause) {
	r.mu.Lock()
	if old := r.pz.pause; old != nil {
		p.Since, p.Now = old.Since, p.Now || old.Now
	}
	if p.Since.IsZero() {
		p.Since = time.Now()
	}
	r.pz.pause = &p
	r.changedLocked()
	r.mu.Unlock()
	r.signalPause()
}

// Resume lifts a pause, thawing a frozen session, and reports whether the
// agent was paused.
func (r *Runner) Resume() bool {
	r.mu.Lock()
	was := r.pz.pause != nil
	r.pz.pause = nil
	if was {
		r.changedLocked()
	}
	r.mu.Unlock()
	if was {
		r.signalPause()
		r.Wake() // out of the wait in BuildingPrompt
	}
	return was
}

// Paused returns the agent's pause, if it has one.
func (r *Runner) Paused() (Pause, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pz.pause == nil {
		return Pause{}, false
	}
	return *r.pz.pause, true
}

func (r *Runner) signalPause() {
	select {
	case r.pz.ch <- struct{}{}:
	default:
	}
}

// changedLocked publishes a change of the snapshot's pause fields. r.mu
// must be held.
func (r *Runner) changedLocked() {
	r.fillPauseLocked(&r.snap)
	r.snap.Version++
	close(r.changed)
	r.changed = make(chan struct{})
}

// fillPauseLocked copies the pause into a snapshot. r.mu must be held.
func (r *Runner) fillPauseLocked(s *Snapshot) {
	s.Paused, s.PauseReason, s.PausedBy, s.PausedSince = false, "", "", time.Time{}
	if p := r.pz.pause; p != nil {
		s.Paused, s.PauseReason, s.PausedBy, s.PausedSince = true, p.Reason, p.Actor, p.Since
	}
}

// snapPause fills a snapshot rebuilt by a transition: the pause, and
// whether the session is frozen. Only the Run goroutine calls it, with r.mu
// held.
func (r *Runner) snapPause(s *Snapshot) {
	r.fillPauseLocked(s)
	s.Frozen, s.FrozenProcs = r.pz.frozen, r.pz.procs
}

// setFrozen records and publishes whether the session is frozen; only the
// Run goroutine calls it.
func (r *Runner) setFrozen(frozen bool, procs int) {
	r.pz.frozen, r.pz.procs = frozen, procs
	r.mu.Lock()
	r.snap.Frozen, r.snap.FrozenProcs = frozen, procs
	r.changedLocked()
	r.mu.Unlock()
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
		case <-r.wakeCh:
		case <-r.stopCtx.Done():
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
	case paused && p.Now && !r.pz.frozen:
		r.freeze()
	case !paused && r.pz.frozen:
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
	sess := r.session()
	if sess == nil || r.m.State().Kind != agent.Running || r.timedOut {
		return
	}
	f, ok := sess.(Freezer)
	if !ok {
		r.log.Warn("pause --now: this backend's sessions cannot be frozen; the session runs on", zap.String("session", r.sessionID))
		return
	}
	if r.pz.session != r.sessionID {
		r.pz.session, r.pz.frozenFor = r.sessionID, 0
	}
	r.tm.pauseTimeout()
	n, err := f.Freeze()
	if err != nil {
		r.log.Warn("pause --now: freeze the session", zap.String("session", r.sessionID), zap.Error(err))
	}
	r.pz.frozenAt = time.Now()
	r.setFrozen(true, n)
	r.log.Info("paused: session frozen", zap.String("session", r.sessionID), zap.Int("processes", n))
}

// thaw continues the frozen session and re-arms its timeout with the time
// it had left.
func (r *Runner) thaw() {
	r.pz.frozenFor += time.Since(r.pz.frozenAt)
	if sess := r.session(); sess != nil {
		n, err := sess.(Freezer).Thaw()
		if err != nil {
			r.log.Warn("resume: thaw the session", zap.String("session", r.sessionID), zap.Error(err))
		}
		if r.cfg.Timeout > 0 {
			left := time.Until(r.sessStarted.Add(r.cfg.Timeout + r.pz.frozenFor))
			r.tm.startTimeout(max(left, 0))
		}
		r.log.Info("resumed: session thawed", zap.String("session", r.sessionID), zap.Int("processes", n),
			zap.Duration("frozen", r.pz.frozenFor))
	}
	r.setFrozen(false, 0)
}

// sessionGone forgets the freeze of a session that has ended (a stop thaws
// it to cancel it; SIGKILL needs no thaw).
func (r *Runner) sessionGone() {
	if r.pz.frozen {
		r.setFrozen(false, 0)
	}
}
