package runner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/hooks"
)

// One backend session's life: spawn it (Spawning), wait for it while it
// runs and handle what cuts it short (Running, Interrupting), finish it, and
// end it when the agent stops (cleanup).

// current is the running session: its process, for other goroutines too
// (LastOutput, the snapshot), and for the Run goroutine its sandbox, its
// timers and how the runner is ending it.
type current struct {
	mu      sync.Mutex
	sess    backend.Session // nil when none runs; guarded by mu
	started time.Time       // guarded by mu
	// Owned by the Run goroutine:
	tm          timers
	release     func() // releases the session's sandbox (Config.Container)
	timedOut    bool   // its session timeout cancelled it
	forced      bool   // the runner force-stopped it outside a GraceExceeded transition
	interrupted bool   // urgent mail interrupted it (UrgentMessage)
	// cut: a cancel or force stop was sent while it still ran. A session
	// that ended on its own before the daemon's stop reached it completed
	// (settleNote): its mail is delivered and its report applied.
	cut bool
}

// set makes sess the running session, started at now, which nothing has
// begun to end yet.
func (c *current) set(sess backend.Session, now time.Time) {
	c.timedOut, c.forced, c.interrupted, c.cut = false, false, false, false
	c.mu.Lock()
	c.sess, c.started = sess, now
	c.mu.Unlock()
}

// get is the running session, nil when none runs.
func (c *current) get() backend.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}

// startedAt is when the running session started; zero when none runs.
func (c *current) startedAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return time.Time{}
	}
	return c.started
}

// take forgets the ended session and stops its timers.
func (c *current) take() backend.Session {
	c.mu.Lock()
	sess := c.sess
	c.sess = nil
	c.mu.Unlock()
	c.tm.stop()
	return sess
}

// uncontain releases the ended (or never started) session's sandbox.
func (c *current) uncontain() {
	if f := c.release; f != nil {
		c.release = nil
		f()
	}
}

// lastOutput is when the running session last printed; zero when none
// runs.
func (c *current) lastOutput() time.Time {
	if s := c.get(); s != nil {
		return s.LastOutput()
	}
	return time.Time{}
}

// sequence numbers the agent's sessions: the seq of the current or next
// session, and the current session's id.
type sequence struct {
	n    uint32
	used bool // a session began with n: the next one takes n+1 (next)
	id   string
}

// next moves past the seq of a session that started and did not
// complete (an error, a timeout, an interrupt, a failed start): the seed's
// machine bumps session_seq only after a completed session, but every
// started session has a seq, a row, a log and a prompt of its own.
func (q *sequence) next() {
	if q.used {
		q.n++
		q.used = false
	}
}

// completed is the machine's IncrementSession.
func (q *sequence) completed() {
	q.n++
	q.used = false
}

// begun takes what Settler.Begin said: a seq another session has moves
// past it, and the seq is this session's once its row is made, whatever
// becomes of it.
func (q *sequence) begun(next uint32, err error) {
	if errors.Is(err, ErrSeqTaken) && next > q.n {
		q.n = next
	}
	q.used = err == nil
}

// newID names the next session.
func (q *sequence) newID(agentName string) { q.id = newSessionID(agentName, q.n) }

// logPath is the log of the current session.
func (r *Runner) logPath() string { return r.cfg.Logs.LogPath(r.cfg.Name, r.seq.n) }

// spawn starts the session whose prompt was stored, after the blocking
// session_start hook; a start that fails is the session's error exit.
func (r *Runner) spawn() {
	if r.work.unstored && !r.storeAgain() {
		return // the disk is still full, or the agent stops
	}
	r.aborts.clear()
	r.pacing.lastSpawn = time.Now()
	spec := r.spec()
	err := r.hook(hooks.Payload{Event: hooks.SessionStart, State: agent.Spawning.String()})
	if err == nil {
		err = r.contain(&spec)
	}
	var sess backend.Session
	if err == nil {
		sess, err = r.startSession(spec)
	}
	if err != nil {
		r.spawnFailed(err)
		return
	}
	r.work.claimed = false
	r.cur.set(sess, time.Now())
	if r.cfg.Timeout > 0 {
		r.cur.tm.startTimeout(r.cfg.Timeout)
	}
	r.limits.started++
	r.apply(agent.EvSessionStarted(r.seq.n), "runner", "pid "+strconv.Itoa(sess.Pid()))
	r.maybeInterrupt()
}

// spec is the session about to start; the backend takes the prompt, so the
// runner forgets it (a sleeping agent need not keep a copy).
func (r *Runner) spec() backend.Spec {
	spec := backend.Spec{
		Agent:     r.cfg.Name,
		SessionID: r.seq.id,
		Seq:       r.seq.n,
		Dir:       r.tree.wt.Path,
		Prompt:    r.work.text,
		LogPath:   r.logPath(),

		MaxLogBytes: r.cfg.MaxLogBytes,
		MaxTurns:    r.cfg.MaxTurns,
		MemoryMax:   r.cfg.MemoryMax,
		OnTool:      r.onTool(),
		Tools:       r.cfg.Tools,
		OnProgress:  r.onProgress(),
		Probe:       r.limits.probing(),
	}
	r.work.text = ""
	r.setSpecEnv(&spec)
	spec.HeadBefore = r.tree.startHead(r.head)
	return spec
}

// startSession makes the session's row durable, then starts its process.
// A session that does not start has its row, which its begin made (or,
// given up on, may have made unseen: its commit's answer lost), closed in
// the step that returns its claims (release): a daemon killed between two
// steps left it closed and its task IN_PROGRESS, taken back as a crash's.
func (r *Runner) startSession(spec backend.Spec) (backend.Session, error) {
	start, seq := time.Now(), r.seq.n
	err := r.begin(start)
	var sess backend.Session
	if err == nil {
		sess, err = r.cfg.Backend.Start(r.stop.ctx, spec)
	}
	if err != nil {
		r.work.unstarted = r.neverStarted(start, seq, err)
	}
	return sess, err
}

// spawnFailed gives back what the session that did not start held and
// feeds its error exit. A session whose row its begin made (its process
// then failed to start: a missing program, a fork that failed) ended as
// an error, and the observers are told so, as of any session with a row:
// swarmd sessions lists it, and the metrics count it.
func (r *Runner) spawnFailed(err error) {
	r.cur.uncontain()
	ended, hasRow := r.work.unstarted, r.seq.used
	r.release()
	if ended != nil && hasRow && r.cfg.Observer != nil {
		r.cfg.Observer.OnSessionEnd(*ended)
	}
	r.limits.giveBack(backend.Result{}, false)
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
	r.work.why = Why{Kind: WhyAfterError, Detail: msg}
	r.apply(agent.EvSessionExited(agent.ExitOutcome{Kind: agent.Error, Msg: msg}), "runner", msg)
}

// contain gives the session about to start its sandbox (Config.Container).
func (r *Runner) contain(spec *backend.Spec) error {
	if r.cfg.Container == nil {
		return nil
	}
	wrap, release, err := r.cfg.Container.Contain(r.cfg.Name, r.seq.id)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	spec.Sandbox, r.cur.release = wrap, release
	return nil
}

// maybeInterrupt interrupts a Running session when urgent mail newer than its
// prompt is waiting.
func (r *Runner) maybeInterrupt() {
	if r.m.State().Kind != agent.Running || r.held() {
		return
	}
	pending, at := r.inbox.pendingUrgent()
	if !pending {
		return
	}
	r.work.why = Why{Kind: WhyAfterInterrupt}
	r.applyUrgent(at)
}

func (r *Runner) applyUrgent(committed time.Time) {
	r.applyT(agent.EvUrgentMessage(), "router", "urgent mail", committed)
	r.cur.interrupted = true
	// The grace period now bounds the session; a session timeout no longer
	// applies to it.
	r.cur.tm.interrupted(r.cfg.GracePeriod)
}

// waitSession waits in Running or Interrupting for whatever comes first.
func (r *Runner) waitSession() {
	sess, tm := r.cur.get(), &r.cur.tm
	select {
	case <-sess.Done():
		r.finishSession(false)
	case <-tm.timeout.C():
		tm.timeout.fired()
		r.cur.timedOut = true
		r.log.Info("session timeout, cancelling", zap.String("session", r.seq.id), zap.Duration("timeout", r.cfg.Timeout))
		r.signal(sess, false)
		tm.cancelled(r.cfg.GracePeriod)
	case <-tm.kill.C():
		tm.kill.fired()
		r.cur.forced = true
		r.signal(sess, true)
	case <-tm.grace.C():
		tm.grace.fired()
		r.apply(agent.EvGraceExceeded(), "runner", "grace period "+r.cfg.GracePeriod.String()+" exceeded")
		// The next session must not start while this one has a live process.
		<-sess.Done()
		r.finishSession(false) // its SessionExited is late: the machine rejects it
		r.work.why = Why{Kind: WhyAfterInterrupt}
	case <-r.inbox.urgent:
		r.maybeInterrupt()
	case <-r.pz.ch:
		r.pauseChanged()
	case <-r.aborts.ch:
		r.takeAbort()
	case <-r.stop.ctx.Done():
		r.external()
	}
}

// finishSession records the ended session and feeds SessionExited. stopping
// says the agent is already Stopped (cleanup).
func (r *Runner) finishSession(stopping bool) {
	sess := r.cur.take()
	r.sessionGone()
	r.cur.uncontain()
	res, out, interrupted := r.sessionResult(sess)
	r.limits.giveBack(res, true)
	rec := r.sessionRecord(sess, res, out, stopping, interrupted)
	r.settle(rec, res, out, stopping)
	r.noteSessionEnd(res, stopping)
	if r.cfg.Observer != nil {
		r.cfg.Observer.OnSessionEnd(rec)
	}
	r.tellSessionEnd(sess, rec, res, out)
	if stopping {
		return
	}
	r.pacing.retryAfter = res.RetryAfter
	if res.Fatal != "" {
		// No retry can fix it (an invalid API key): stop now instead of
		// burning the error budget.
		r.apply(agent.EvFatalError(res.Fatal), "runner", res.Fatal)
		return
	}
	r.work.why = r.whyAfter(res, rec, out)
	r.apply(agent.EvSessionExited(out), "runner", res.Reason)
}

// tellSessionEnd runs the session_end hooks and logs the end: a session
// its provider cut off failed, though the machine counts it as no error.
func (r *Runner) tellSessionEnd(sess backend.Session, rec SessionRecord, res backend.Result, out agent.ExitOutcome) {
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
}

// whyAfter is why the session after the one that ended runs.
func (r *Runner) whyAfter(res backend.Result, rec SessionRecord, out agent.ExitOutcome) Why {
	switch {
	case r.m.State().Kind == agent.Interrupting:
		return Why{Kind: WhyAfterInterrupt}
	case stoppedFor(res, r.cur.timedOut) != "":
		_, why := stoppedNote(res)
		return why
	case rec.Provider != "":
		return Why{Kind: WhyAfterError, Detail: "the provider: " + rec.Provider}
	case out.Kind == agent.Success:
		return Why{Kind: WhyAfterSuccess}
	default:
		return Why{Kind: WhyAfterError, Detail: out.String()}
	}
}

// cleanup runs once the agent is Stopped: end the session (cancelled
// already by OperatorStop's side effect, or now for a FatalError), force it
// after the grace period or at once on ForceStop, and return unused mail.
func (r *Runner) cleanup() {
	if sess := r.cur.get(); sess != nil {
		r.endSession(sess)
		r.finishSession(true)
	}
	r.limits.giveBack(backend.Result{}, false)
	r.release()
	// What stopped the machine, not who asked last: an agent its errors
	// stopped just before the daemon's stop came has still failed.
	if r.halt != causeDaemon {
		r.stopped(r.halt == causeFailure)
	}
	// An agent stopped on its own (the operator, a reload, a fatal error)
	// has its logs archived now. A daemon's stop leaves them where they are
	// for its next start to archive, off the stop's path (the daemon's
	// archivePrevious): 200 archives and their fsyncs were most of what a
	// stop waited for. The agent_stopped hook runs either way; only a force
	// stop cuts them short.
	if r.stop.by() != "daemon" {
		if _, err := r.cfg.Logs.Archive(r.stop.forceCtx, r.cfg.Name, time.Now()); err != nil {
			r.log.Error("archive session logs", zap.Error(err))
		}
	}
	_ = r.hook(hooks.Payload{Event: hooks.AgentStopped, State: agent.Stopped.String(), StopReason: r.snapReason()})
}

// endSession waits for the session of a stopped agent to end: it is
// cancelled, and force-stopped after the grace period or at a force stop.
func (r *Runner) endSession(sess backend.Session) {
	select {
	case <-sess.Done():
		return
	default:
	}
	r.signal(sess, false)
	t := time.NewTimer(r.cfg.GracePeriod)
	defer t.Stop()
	select {
	case <-sess.Done():
	case <-t.C:
		r.log.Warn("session ignored cancel for the grace period, force-stopping", zap.String("session", sess.ID()))
		r.cur.forced = true
		r.signal(sess, true)
	case <-r.stop.forced():
		r.cur.forced = true
		r.signal(sess, true)
	}
	<-sess.Done()
}

// signal cancels sess (force: force-stops it), noting whether it still
// ran: a session already over was not cut short.
func (r *Runner) signal(sess backend.Session, force bool) {
	select {
	case <-sess.Done(): // it ended first: nothing of it is cut short
	default:
		r.cur.cut = true
	}
	f, what := sess.Cancel, "cancel"
	if force {
		f, what = sess.ForceStop, "force stop"
	}
	if err := f(); err != nil {
		r.log.Warn("session "+what, zap.String("session", r.seq.id), zap.Error(err))
	}
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
