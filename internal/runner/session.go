package runner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/hooks"
)

// One backend session's life: spawn it (Spawning), wait for it while it
// runs and handle what cuts it short (Running, Interrupting), finish it, and
// end it when the agent stops (cleanup).

// logPath is the log of the current session.
func (r *Runner) logPath() string { return r.cfg.Logs.LogPath(r.cfg.Name, r.seq) }

// spawn starts the session whose prompt was stored, after the blocking
// session_start hook; a start that fails is the session's error exit.
func (r *Runner) spawn() {
	spec := backend.Spec{
		Agent:     r.cfg.Name,
		SessionID: r.sessionID,
		Seq:       r.seq,
		Dir:       r.wt.Path,
		Prompt:    r.lastPrompt,
		LogPath:   r.logPath(),

		MaxLogBytes: r.cfg.MaxLogBytes,
		MaxTurns:    r.cfg.MaxTurns,
		MemoryMax:   r.cfg.MemoryMax,
		OnTool:      r.onTool(),
		Tools:       r.cfg.Tools,
		OnProgress:  r.onProgress(),
		Probe:       r.probing(),
	}
	r.lastPrompt = "" // the backend has it now; a sleeping agent need not keep a copy
	r.setSpecEnv(&spec)
	r.clearAbort()
	r.lastSpawn = time.Now()
	r.headBefore = r.promptHead
	if r.headBefore == "" {
		r.headBefore = r.head()
	}
	r.promptHead = "" // one prompt, one spawn
	spec.HeadBefore = r.headBefore
	err := r.hook(hooks.Payload{Event: hooks.SessionStart, State: agent.Spawning.String()})
	if err == nil {
		err = r.contain(&spec)
	}
	var sess backend.Session
	if err == nil {
		start := time.Now()
		if err = r.begin(start); err == nil {
			if sess, err = r.cfg.Backend.Start(r.stopCtx, spec); err != nil {
				r.abandon(start, err)
			}
		}
	}
	if err != nil {
		r.uncontain()
		r.release()
		r.settleTicket(backend.Result{}, false)
		if r.external() {
			return
		}
		msg := "start: " + err.Error()
		switch {
		case errors.Is(err, hooks.ErrBlocked):
			msg = err.Error()
		case backend.IsDiskFull(err):
			msg = "disk full: " + msg
			r.setDiskFull(msg)
		}
		r.why = Why{Kind: WhyAfterError, Detail: msg}
		r.apply(agent.EvSessionExited(agent.ExitOutcome{Kind: agent.Error, Msg: msg}), "runner", msg)
		return
	}
	r.claimed = false
	r.timedOut, r.forced, r.interrupted = false, false, false
	r.mu.Lock()
	r.sess = sess
	r.sessStarted = time.Now()
	r.mu.Unlock()
	if r.cfg.Timeout > 0 {
		r.tm.startTimeout(r.cfg.Timeout)
	}
	r.started++
	r.apply(agent.EvSessionStarted(r.seq), "runner", "pid "+strconv.Itoa(sess.Pid()))
	r.taskStarted()
	r.maybeInterrupt()
}

// contain gives the session about to start its sandbox (Config.Container).
func (r *Runner) contain(spec *backend.Spec) error {
	if r.cfg.Container == nil {
		return nil
	}
	wrap, release, err := r.cfg.Container.Contain(r.cfg.Name, r.sessionID)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	spec.Sandbox, r.uncontainF = wrap, release
	return nil
}

// uncontain releases the ended (or never started) session's sandbox.
func (r *Runner) uncontain() {
	if f := r.uncontainF; f != nil {
		r.uncontainF = nil
		f()
	}
}

// maybeInterrupt interrupts a Running session when urgent mail newer than its
// prompt is waiting.
func (r *Runner) maybeInterrupt() {
	if r.m.State().Kind != agent.Running || r.held() {
		return
	}
	r.mu.Lock()
	pending, at := r.maxUrgent > r.watermark, r.urgentAt
	r.mu.Unlock()
	if !pending {
		return
	}
	r.why = Why{Kind: WhyAfterInterrupt}
	r.applyUrgent(at)
}

func (r *Runner) applyUrgent(committed time.Time) {
	r.applyT(agent.EvUrgentMessage(), "router", "urgent mail", committed)
	r.interrupted = true
	// The grace period now bounds the session; a session timeout no longer
	// applies to it.
	r.tm.interrupted(r.cfg.GracePeriod)
}

// waitSession waits in Running or Interrupting for whatever comes first.
func (r *Runner) waitSession() {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	select {
	case <-sess.Done():
		r.finishSession(false)
	case <-r.tm.timeout.C():
		r.tm.timeout.fired()
		r.timedOut = true
		r.log.Info("session timeout, cancelling", zap.String("session", r.sessionID), zap.Duration("timeout", r.cfg.Timeout))
		r.signal(sess.Cancel, "cancel")
		r.tm.cancelled(r.cfg.GracePeriod)
	case <-r.tm.kill.C():
		r.tm.kill.fired()
		r.forced = true
		r.signal(sess.ForceStop, "force stop")
	case <-r.tm.grace.C():
		r.tm.grace.fired()
		r.apply(agent.EvGraceExceeded(), "runner", "grace period "+r.cfg.GracePeriod.String()+" exceeded")
		// The next session must not start while this one has a live process.
		<-sess.Done()
		r.finishSession(false) // its SessionExited is late: the machine rejects it
		r.why = Why{Kind: WhyAfterInterrupt}
	case <-r.urgentCh:
		r.maybeInterrupt()
	case <-r.pz.ch:
		r.pauseChanged()
	case <-r.abortCh:
		r.takeAbort()
	case <-r.stopCtx.Done():
		r.external()
	}
}

// finishSession records the ended session and feeds SessionExited. stopping
// says the agent is already Stopped (cleanup).
func (r *Runner) finishSession(stopping bool) {
	r.mu.Lock()
	sess := r.sess
	r.sess = nil
	r.mu.Unlock()
	r.sessionGone()
	r.uncontain()
	r.tm.stop()
	res, out, interrupted := r.sessionResult(sess)
	r.settleTicket(res, true)
	rec := r.sessionRecord(sess, res, out, stopping, interrupted)
	r.settle(rec, res, out, stopping)
	r.noteSessionEnd(res, stopping)
	if r.cfg.Observer != nil {
		r.cfg.Observer.OnSessionEnd(rec)
	}
	// What the session did, for the log and the hooks: a session its
	// provider cut off failed, though the machine counts it as no error.
	told := out
	if rec.Provider != "" {
		told = agent.ExitOutcome{Kind: agent.Error, Msg: res.Reason + " (the provider's: " + rec.Provider + ")"}
	}
	_ = r.hook(hooks.Payload{
		Event: hooks.SessionEnd, State: r.m.State().Kind.String(), Outcome: told.Kind.String(), Reason: res.Reason,
		HeadBefore: rec.HeadBefore, HeadAfter: rec.HeadAfter, Commits: rec.Commits,
	})
	r.log.Info("session ended", zap.String("session", sess.ID()), zap.Stringer("outcome", told),
		zap.Int("exit_code", res.ExitCode), zap.String("signal", res.Signal), zap.String("abort_reason", res.AbortReason),
		zap.Duration("duration", res.Ended.Sub(res.Started)))
	if stopping {
		return
	}
	r.retryAfter = res.RetryAfter
	if res.Fatal != "" {
		// No retry can fix it (an invalid API key): stop now instead of
		// burning the error budget.
		r.apply(agent.EvFatalError(res.Fatal), "runner", res.Fatal)
		return
	}
	prev := r.m.State().Kind
	switch {
	case prev == agent.Interrupting:
		r.why = Why{Kind: WhyAfterInterrupt}
	case stoppedFor(res, r.timedOut) != "":
		_, r.why = stoppedNote(res)
	case rec.Provider != "":
		r.why = Why{Kind: WhyAfterError, Detail: "the provider: " + rec.Provider}
	case out.Kind == agent.Success:
		r.why = Why{Kind: WhyAfterSuccess}
	default:
		r.why = Why{Kind: WhyAfterError, Detail: out.String()}
	}
	r.apply(agent.EvSessionExited(out), "runner", res.Reason)
}

// cleanup runs once the agent is Stopped: end the session (cancelled
// already by OperatorStop's side effect, or now for a FatalError), force it
// after the grace period or at once on ForceStop, and return unused mail.
func (r *Runner) cleanup() {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	if sess != nil {
		select {
		case <-sess.Done():
		default:
			r.signal(sess.Cancel, "cancel")
			t := time.NewTimer(r.cfg.GracePeriod)
			select {
			case <-sess.Done():
			case <-t.C:
				r.log.Warn("session ignored cancel for the grace period, force-stopping", zap.String("session", sess.ID()))
				r.forced = true
				r.signal(sess.ForceStop, "force stop")
			case <-r.forceCh:
				r.forced = true
				r.signal(sess.ForceStop, "force stop")
			}
			t.Stop()
			<-sess.Done()
		}
		r.finishSession(true)
	}
	r.settleTicket(backend.Result{}, false)
	r.release()
	if actor := r.stopActorName(); actor != "daemon" {
		r.stopped()
	}
	// Archive and the agent_stopped hook run even while the daemon stops:
	// only a force stop cuts them short.
	if _, err := r.cfg.Logs.Archive(r.forceCtx, r.cfg.Name, time.Now()); err != nil {
		r.log.Error("archive session logs", zap.Error(err))
	}
	r.mu.Lock()
	reason := r.snap.Reason
	r.mu.Unlock()
	_ = r.hook(hooks.Payload{Event: hooks.AgentStopped, State: agent.Stopped.String(), StopReason: reason})
}

func (r *Runner) signal(f func() error, what string) {
	if err := f(); err != nil {
		r.log.Warn("session "+what, zap.String("session", r.sessionID), zap.Error(err))
	}
}

func (r *Runner) session() backend.Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sess
}

// AgentOfSession is the agent a session id (newSessionID's form) belongs to;
// ok is false for anything else, such as a hook's tree id.
func AgentOfSession(id string) (string, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 || len(id)-i-1 != 12 {
		return "", false
	}
	if _, err := hex.DecodeString(id[i+1:]); err != nil {
		return "", false
	}
	j := strings.LastIndexByte(id[:i], '-')
	if j <= 0 {
		return "", false
	}
	if _, err := strconv.ParseUint(id[j+1:i], 10, 32); err != nil {
		return "", false
	}
	return id[:j], true
}

// newSessionID is unique across daemon restarts: agent, seq and 48 random bits.
func newSessionID(agentName string, seq uint32) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return agentName + "-" + strconv.FormatUint(uint64(seq), 10) + "-" + hex.EncodeToString(b[:])
}
