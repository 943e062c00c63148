package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// What becomes of a session, recorded through the Settler: its row before
// its process starts, its outcome once it ended (before the next session is
// built), the mail and task a session that never started had claimed, and
// an agent's tasks when it stops. None of these gives up while the store is
// slow or locked: the agent waits where it is, and says so.

// Settler records what became of the agent's sessions (package settle). Its
// methods retry while the store refuses for a reason that passes, calling
// wait at each refusal, until they succeed or ctx ends.
type Settler interface {
	// Begin records that a session is about to start: its row is durable
	// before the process runs, and the task its prompt newly claimed
	// (SessionBegin.Task) moves to IN_PROGRESS in the same transaction. A
	// seq some other session has already is ErrSeqTaken, with next the
	// first free one (the task then stays CLAIMED, for Release).
	Begin(ctx context.Context, b SessionBegin, wait func(error)) (next uint32, err error)
	// Settle records a finished session's outcome exactly once: its row's
	// end, its mail acknowledged (completed) or noted (not), its task and
	// review reported by the signal its result carries.
	Settle(ctx context.Context, s Settlement, wait func(error)) (SettleResult, error)
	// Release returns the mail and task claimed for a session that never
	// started, and u.Started (unless 0), the task its Begin started; a task
	// the session only continued stays its agent's. With u.Ended it closes
	// the session's row, if a Begin made it, in the same transaction.
	Release(ctx context.Context, u Unstarted, wait func(error)) error
	// Stopped is told that the agent stopped for good in this run (not for
	// a daemon shutdown): the tasks it holds go back to the board, as a
	// failure of the work when failed (its errors, a fatal error: a
	// retry), else for any agent without a retry (the operator, a reload,
	// max_sessions).
	Stopped(ctx context.Context, agent, reason string, failed bool, wait func(error)) error
	// Transient reports whether err is the store being slow or away (worth
	// waiting for) rather than a refusal.
	Transient(err error) bool
	// Fenced reports whether err is a write refused because this daemon no
	// longer holds the agent's lease: one of the Transient refusals, which
	// passes only once the lease is taken back.
	Fenced(err error) bool
}

// ErrSeqTaken: another session already has the seq (a second daemon ran
// this agent).
var ErrSeqTaken = errors.New("session seq already used")

// errLeaseLost: a write given up at a stop because this daemon lost the
// agent's lease (Settler.Fenced). It would pass only once the lease is
// taken back, which a stopping daemon does not wait for: another daemon
// runs the agent and closes this one's open session as orphaned.
var errLeaseLost = errors.New("given up at the stop: this daemon lost the agent's lease (another daemon runs the agent now)")

// SessionBegin is a session about to start.
type SessionBegin struct {
	Agent      string
	SessionID  string
	Seq        uint32
	Started    time.Time
	HeadBefore string
	LogPath    string
	// Task is the task the session's prompt newly claimed (0: none, or one
	// the agent held already): its start is recorded with the session's.
	Task int64
}

// Unstarted is a session that never started, for Settler.Release.
type Unstarted struct {
	SessionID string
	// Started is the task the session's Begin was to start (0: none).
	Started int64
	// Ended, when the session's Begin was tried, is its end as its row
	// records it: given up on, a Begin may have made the row unseen (its
	// commit's answer lost), which must not stay open as a session that
	// runs. nil: no Begin was tried, no row.
	Ended *SessionRecord
}

// Settlement is how a session ended.
type Settlement struct {
	Session   SessionRecord // the ended session, as observers get it
	Completed bool          // SessionComplete: Running -> SessionExited(Success)
	Note      string        // why not completed
	Mail      int           // messages the prompt carried
	Task      int64         // the task the prompt carried, 0 for none
	Review    int64         // the task whose review the prompt asked for, 0 for none
	// ReviewHead is the commit that review showed: the task's frozen head
	// then ("" for none). The verdict is on it.
	ReviewHead string
	Result     string // the backend's final result text, for the signals
}

// SettleResult is what a settled session said.
type SettleResult struct {
	// Signalled: the session completed and its result carried a signal
	// (done, pass or fail): the unit of work it was about is over. With no
	// mail and no task, the agent then idles.
	Signalled bool
}

// storeWaitShown is how long a write may take before the agent shows that
// it waits on the store (status, the dashboards, /readyz).
const storeWaitShown = 2 * time.Second

// storeBackoff bounds the pause before building a prompt again after the
// store refused the reads and claims of the last try.
const (
	storeFirstBackoff = 10 * time.Millisecond
	storeMaxBackoff   = time.Second
)

// waitingOnStore runs f with ctx, showing in the snapshot that the agent
// waits on the store once f has taken storeWaitShown or the store refused
// once. ctx ends with a force stop, and with a stop while the store's last
// refusal was fenced (Settler.Fenced): f's error is then errLeaseLost's.
// Without that a daemon that lost the lease would retry until a second
// signal, and an operator's stop would not stop it.
func (r *Runner) waitingOnStore(what string, f func(ctx context.Context, wait func(error)) error) error {
	since := time.Now()
	t := time.AfterFunc(storeWaitShown, func() { r.setStoreWait("waiting on the store: "+what, since) })
	ctx, cancel := context.WithCancelCause(r.stop.forceCtx)
	var fenced atomic.Bool
	giveUp := func() {
		if fenced.Load() && r.stop.requested() {
			cancel(errLeaseLost)
		}
	}
	onStop := context.AfterFunc(r.stop.ctx, giveUp)
	defer func() {
		onStop()
		cancel(nil)
		t.Stop()
		r.setStoreWait("", time.Time{})
	}()
	err := f(ctx, func(err error) {
		fenced.Store(r.cfg.Settler.Fenced(err))
		giveUp()
		r.setStoreWait("waiting on the store: "+what+": "+err.Error(), since)
	})
	if err != nil && errors.Is(context.Cause(ctx), errLeaseLost) {
		return fmt.Errorf("%s: %w: %w", what, errLeaseLost, err)
	}
	return err
}

// setStoreWait publishes why the agent waits on the store ("" when it does
// not).
func (r *Runner) setStoreWait(reason string, since time.Time) {
	r.snaps.update(func(s *Snapshot) bool {
		if s.StoreWait == reason {
			return false
		}
		s.StoreWait, s.StoreWaitSince = reason, since
		return true
	})
}

// begin makes the session's row durable before its process starts, and
// starts the task its prompt newly claimed in the same commit. An error
// means the session must not start: a stop came first, or its seq is
// another session's (the seq then moves past it).
func (r *Runner) begin(start time.Time) error {
	b := SessionBegin{Agent: r.cfg.Name, SessionID: r.seq.id, Seq: r.seq.n, Started: start,
		HeadBefore: r.tree.headBefore, LogPath: r.logPath(), Task: r.work.startTask()}
	// Cut short by a stop (stop.ctx): the session must not start then.
	return r.waitingOnStore("record the session's start", func(_ context.Context, wait func(error)) error {
		next, err := r.cfg.Settler.Begin(r.stop.ctx, b, wait)
		r.seq.begun(next, err)
		if err == nil {
			r.work.begun()
		}
		return err
	})
}

// settle records how the session ended before the next prompt is built:
// the next session must see exactly the mail and task that no completed
// session settled. It waits for the store as long as it takes; only a
// force stop cuts it short, leaving the outcome in the session's log for
// restart recovery.
func (r *Runner) settle(rec SessionRecord, res backend.Result, out agent.ExitOutcome, stopping bool) {
	st := r.work.settlement(rec, res.Text)
	st.Completed, st.Note = r.settleNote(rec, res, out, stopping)
	var sr SettleResult
	err := r.waitingOnStore("record the session's outcome", func(ctx context.Context, wait func(error)) error {
		var err error
		sr, err = r.cfg.Settler.Settle(ctx, st, wait)
		return err
	})
	if errors.Is(err, errLeaseLost) {
		r.log.Warn("the session's outcome is not recorded: this daemon lost the agent's lease and stops; "+
			"the daemon that holds it closes the session as orphaned", zap.String("session", rec.SessionID), zap.Error(err))
	} else if err != nil {
		// Force-stopped, or the database is gone: the outcome is in the
		// session's log, and the next start applies it.
		r.log.Error("record the session's outcome (restart recovery applies it from the session log)",
			zap.String("session", rec.SessionID), zap.Error(err))
	}
	r.work.signalled = sr.Signalled
	r.countSilence(st, sr)
}

// settleNote says whether the ended session completed, and why not.
func (r *Runner) settleNote(rec SessionRecord, res backend.Result, out agent.ExitOutcome, stopping bool) (completed bool, note string) {
	prev := r.m.State().Kind
	switch {
	case stopping && r.cur.cut && out.Kind != agent.Success:
		// A session whose process the stop's signal found over (exited
		// 0, its end not yet seen) ended on its own: it completed, below.
		// Recording it a success and not completed showed its mail again.
		note = "that session was stopped with its agent (" + r.snapReason() + ")"
	case prev == agent.Interrupting:
		note = "that session was interrupted by urgent mail"
	case res.Fatal != "":
		note = "that session failed: " + res.Fatal
	case out.Kind == agent.Timeout:
		note = "that session timed out"
	case stoppedFor(res, r.cur.timedOut) != "":
		note, _ = stoppedNote(res)
	case rec.Provider != "":
		note = "that session was cut off by its provider (" + rec.Provider + ")"
	case out.Kind == agent.Success && (prev == agent.Running || stopping):
		// Stopping, it ended on its own before the stop reached it.
		return true, ""
	default:
		note = "that session failed: " + out.String()
	}
	if r.cur.forced {
		note += " and was force-stopped"
	}
	return false, note
}

// countSilence holds the agent once MaxSilent sessions in a row completed
// holding a task or a review and ended without a signal: an agent that
// never reports would run session after session on the same work (a
// reviewer that never says PASS or FAIL ran 335 sessions in 6 minutes).
func (r *Runner) countSilence(st Settlement, sr SettleResult) {
	maxSilent := r.cfg.MaxSilent
	if r.cfg.Hold == nil {
		maxSilent = 0 // counted, never held
	}
	n, hold := r.limits.silence(st.Completed, sr.Signalled, st.Task != 0 || st.Review != 0, maxSilent)
	if !hold {
		return
	}
	what := "task #" + strconv.FormatInt(st.Task, 10)
	if st.Review != 0 {
		what = "the review of task #" + strconv.FormatInt(st.Review, 10)
	}
	reason := strconv.Itoa(n) + " sessions in a row held " + what +
		" and ended without DONE, PASS or FAIL (max_silent_sessions); swarmd resume " + r.cfg.Name + " lets it go on"
	r.log.Warn("holding the agent: its sessions do not report on their work", zap.String("reason", reason))
	r.cfg.Hold(reason)
}

// release returns mail and tasks claimed by a prompt whose session never
// started, and closes the session's row, if its begin was tried, in the
// same step.
func (r *Runner) release() {
	started, ok := r.work.unclaim()
	ended := r.work.unstarted
	r.work.unstarted = nil
	if !ok && ended == nil {
		return
	}
	// Not stop.ctx: returning the mail must happen even while stopping. What
	// a force stop leaves, restart recovery takes back: the claims of a
	// session with no row, or an open row and its task as a crash's.
	err := r.waitingOnStore("return what the session that never started claimed", func(ctx context.Context, wait func(error)) error {
		return r.cfg.Settler.Release(ctx, Unstarted{SessionID: r.seq.id, Started: started, Ended: ended}, wait)
	})
	if err != nil {
		r.log.Error("return what a session that never started claimed", zap.String("session", r.seq.id), zap.Error(err))
	}
}

// stopped returns the agent's tasks to the board: it stopped for good,
// failed says whether for the work's failure (stopCause).
func (r *Runner) stopped(failed bool) {
	err := r.waitingOnStore("requeue the agent's tasks", func(ctx context.Context, wait func(error)) error {
		return r.cfg.Settler.Stopped(ctx, r.cfg.Name, "agent "+r.cfg.Name+" stopped: "+r.snapReason(), failed, wait)
	})
	if err != nil {
		r.log.Error("return the agent's tasks", zap.Error(err))
	}
}

// storeBackoff is the backoff of prompt builds while the store refuses
// them: the current pause and when the refusals began.
type storeBackoff struct {
	delay time.Duration
	since time.Time
}

// refused counts a refusal at now: the pause before the next try doubles,
// from storeFirstBackoff up to storeMaxBackoff.
func (b *storeBackoff) refused(now time.Time) (delay time.Duration, since time.Time) {
	if b.delay == 0 {
		b.since = now
	}
	b.delay = min(max(2*b.delay, storeFirstBackoff), storeMaxBackoff)
	return b.delay, b.since
}

// answered ends the refusals, reporting whether there were any.
func (b *storeBackoff) answered() bool {
	was := b.delay != 0
	b.delay = 0
	return was
}

// storeRefused reports whether a prompt's build failed because the store
// was slow or away; then the agent waits (shown) and builds again, instead
// of stopping.
func (r *Runner) storeRefused(err error) bool {
	if !r.cfg.Settler.Transient(err) {
		return false
	}
	now := time.Now()
	delay, since := r.storeBackoff.refused(now)
	if time.Since(since) >= storeWaitShown {
		r.setStoreWait("waiting on the store: build the prompt: "+err.Error(), since)
	}
	// Once a wait, not once a try: a store away for minutes logged a line
	// a second for each agent. Its status says it waits meanwhile.
	logf := r.log.Debug
	if since.Equal(now) {
		logf = r.log.Warn
	}
	logf("build prompt: the store refused; building again", zap.Duration("in", delay), zap.Error(err))
	sleep(r.stop.ctx, delay)
	return true
}

// storeAnswered clears the build's store wait.
func (r *Runner) storeAnswered() {
	if r.storeBackoff.answered() {
		r.setStoreWait("", time.Time{})
		r.log.Info("build prompt: the store answers again")
	}
}

// neverStarted is the end of the current session, seq, begun at start,
// whose process did not start for cause: an error, its reason saying so.
func (r *Runner) neverStarted(start time.Time, seq uint32, cause error) *SessionRecord {
	res := backend.Result{Outcome: backend.OutcomeError, Started: start, Ended: time.Now(), Reason: "never started: " + cause.Error()}
	return &SessionRecord{Agent: r.cfg.Name, SessionID: r.seq.id, Seq: seq, Outcome: agent.ExitOutcome{Kind: agent.Error, Msg: res.Reason},
		Result: res, LogPath: r.cfg.Logs.LogPath(r.cfg.Name, seq), Backend: r.cfg.BackendName, HeadBefore: r.tree.headBefore}
}
