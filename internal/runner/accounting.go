package runner

import (
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// Accounting of ended sessions: what their result is once the runner's own
// part in how they ended is in it, what they cost, and what they did to the
// worktree (commits between HEAD before and after), for the SessionRecord
// observers get.

// sessionResult is how an ended session went, as the runner accounts for
// it: its result with the runner's reasons (its timeout, an Abort, urgent
// mail) and its price, the outcome the machine gets, and whether urgent mail
// interrupted it.
func (r *Runner) sessionResult(sess backend.Session) (res backend.Result, out agent.ExitOutcome, interrupted bool) {
	res = sess.Result()
	if r.cur.timedOut {
		// The runner owns the session timeout; the backend only saw signals.
		res.AbortReason = "timeout"
		res.Reason = "session timeout after " + r.cfg.Timeout.String() + " (" + res.Reason + ")"
	}
	if a := r.aborts.cancel; a != nil && !r.cur.timedOut && !r.cur.interrupted && res.Outcome != backend.OutcomeSuccess {
		// Whatever signal the backend is cancelled with, the cause is ours.
		res.AbortReason, res.Reason = a.reason, a.detail+" ("+res.Reason+")"
	}
	r.aborts.cancel = nil
	// The record needs an end and a start, whatever the backend reported.
	if res.Ended.IsZero() {
		res.Ended = time.Now()
	}
	if res.Started.IsZero() {
		res.Started = res.Ended
	}
	if res.AbortReason == backend.AbortOOM && r.cfg.LeaseGuardKilled != nil && r.cfg.LeaseGuardKilled(res.Started) {
		// A SIGKILL swarmd did not send, while the lease guard killed every
		// session of the daemon: the guard's, not the OOM killer's.
		res.AbortReason = backend.AbortParentAborted
		res.Reason = "killed by the lease guard: this daemon's agent leases were not renewed in time (" + res.Reason + ")"
	}
	r.price(&res)
	out = outcome(res, r.cur.timedOut)
	// Interrupted is what the machine says: from Interrupting, any exit
	// goes back to BuildingPrompt, never SessionComplete, so the session
	// did not complete (its mail is shown again, settle.Record.Completed is
	// false), even when it exited 0 before the interrupt reached it; its
	// row must say so, not "success". The abort reason is the interrupt's
	// only when the interrupt ended it.
	interrupted = r.cur.interrupted
	if interrupted && out.Kind != agent.Success {
		res.AbortReason = backend.AbortUrgentMessage
	}
	return res, out, interrupted
}

// sessionRecord describes the ended session; it reads HEAD to count the
// session's commits, so it runs once the session's processes are gone.
func (r *Runner) sessionRecord(sess backend.Session, res backend.Result, out agent.ExitOutcome, stopping, interrupted bool) SessionRecord {
	headAfter := r.head()
	return SessionRecord{
		Agent: r.cfg.Name, SessionID: sess.ID(), Seq: r.seq.n, Outcome: out, Result: res,
		Stopped: stopping, LogPath: r.logPath(), Backend: r.cfg.BackendName,
		HeadBefore: r.tree.headBefore, HeadAfter: headAfter, Commits: r.commits(r.tree.headBefore, headAfter), Task: r.work.task,
		ForceStopped: r.cur.forced, Interrupted: interrupted,
		TurnLimit: turnLimited(res, r.cur.timedOut), StoppedFor: stoppedFor(res, r.cur.timedOut),
		Provider: providerTrouble(res, r.cur.timedOut),
	}
}

// outcome is the exit outcome the machine gets: a purposeful end (see
// stoppedFor) and the provider's trouble (see providerTrouble) are a
// Success, so that they count no error.
func outcome(res backend.Result, timedOut bool) agent.ExitOutcome {
	switch {
	case timedOut:
		return agent.ExitOutcome{Kind: agent.Timeout}
	case res.Outcome == backend.OutcomeSuccess || stoppedFor(res, timedOut) != "" || providerTrouble(res, timedOut) != "":
		return agent.ExitOutcome{Kind: agent.Success}
	default:
		return agent.ExitOutcome{Kind: agent.Error, Msg: res.Reason}
	}
}

// commits counts the commits between two HEADs; 0 when either is unknown
// or they are equal (no git process then).
func (r *Runner) commits(before, after string) int {
	if before == "" || after == "" || before == after {
		return 0
	}
	n, err := r.cfg.Workspace.CommitsBetween(r.stop.forceCtx, before, after)
	if err != nil {
		r.log.Warn("count the session's commits", zap.Error(err))
	}
	return n
}

// head is the worktree's HEAD, "" when it cannot be read (logged).
func (r *Runner) head() string {
	h, err := r.cfg.Workspace.Head(r.stop.forceCtx, r.cfg.Name)
	if err != nil {
		r.log.Warn("read worktree HEAD", zap.Error(err))
	}
	return h
}

// price sets the cost of a session from Config.Price, which gets the
// usage with the backend's own cost in it, if it reported one.
func (r *Runner) price(res *backend.Result) {
	if r.cfg.Price == nil || res.Usage.Tokens() == 0 && res.Usage.CostUSD <= 0 {
		return
	}
	res.Usage.CostUSD = r.cfg.Price(r.cfg.BackendName, res.Model, res.Usage)
}

// turnLimited reports whether a session ended at its max_turns: one of the
// purposeful ends (see stoppedFor).
func turnLimited(res backend.Result, timedOut bool) bool {
	return stoppedFor(res, timedOut) == backend.AbortMaxTurns
}
