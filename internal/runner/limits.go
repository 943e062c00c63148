package runner

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// Gate holds an agent's sessions while its provider cannot take them (a
// rate limit until its reset, a circuit breaker after server errors): the
// runner acquires a ticket before it builds each prompt, waiting in
// BuildingPrompt as a paused agent does, and hands it back with the
// session's result.
type Gate interface {
	// Acquire returns when the agent may start a session, or with ctx's
	// error. It calls waiting with the reason when it starts to wait (and
	// may call it again when the reason changes).
	Acquire(ctx context.Context, agent string, waiting func(reason string)) (Ticket, error)
}

// Ticket is a granted start.
type Ticket interface {
	// Done reports how the session ended; ran is false when no session
	// started with the ticket (an idle agent, a failed spawn, a stop).
	Done(res backend.Result, ran bool)
}

// ProgressRecord is a running session's progress (backend.Progress) as
// Config.OnProgress gets it.
type ProgressRecord struct {
	Agent     string
	SessionID string
	Seq       uint32
	Backend   string
	Progress  backend.Progress
}

// Purposeful ends: swarmd stopped the session on purpose. Such a session
// counts as no error (the machine sees it exit as a Success, which moves no
// counter: SessionStarted reset the consecutive ones), is recorded with
// its reason as its outcome, and its mail and task are shown again in the
// next prompt with the reason.
//
// stoppedFor returns the reason: max_turns (the turn limit),
// permission_denied (a call the tools policy refuses; exit code 126 is an
// ordinary error), budget_exhausted; "" for any other end.
func stoppedFor(res backend.Result, timedOut bool) string {
	if timedOut {
		return ""
	}
	switch res.AbortReason {
	case backend.AbortMaxTurns, backend.AbortBudgetExhausted:
		return res.AbortReason
	case backend.AbortPermissionDenied:
		if res.Denied != nil {
			return res.AbortReason
		}
	}
	return ""
}

// providerTrouble is why a session that did not succeed was cut off by its
// provider (a rate limit, a server error, an overload, a lost connection),
// or "". Such an end is the provider's, not the agent's: it counts no error
// (the machine sees it as a Success, as a purposeful end), its mail and task
// are shown again, and the provider's health (Config.Gate) holds the next
// session; a rate limit's reset is waited for whatever the gate says.
func providerTrouble(res backend.Result, timedOut bool) string {
	switch {
	case timedOut || res.Outcome == backend.OutcomeSuccess || res.Fatal != "":
		return ""
	case res.RateLimited:
		return "rate limited (429)"
	case res.ProviderError != "":
		return res.ProviderError
	}
	return ""
}

// stoppedNote is the settlement note and the next prompt's reason of a
// purposeful end.
func stoppedNote(res backend.Result) (note string, why Why) {
	switch res.AbortReason {
	case backend.AbortMaxTurns:
		return "that session reached its turn limit (" + res.Reason + ")", Why{Kind: WhyAfterTurnLimit, Detail: res.Reason}
	case backend.AbortPermissionDenied:
		d := res.Denied.String()
		return "that session was stopped for calling a tool its policy refuses (" + d + ")", Why{Kind: WhyAfterToolDenied, Detail: d}
	}
	return "that session was stopped: its budget ran out (" + res.Reason + ")", Why{Kind: WhyAfterBudget, Detail: res.Reason}
}

// abortRequest is an Abort waiting for the Run goroutine.
type abortRequest struct{ reason, detail string }

// aborts are the Abort requests: one waits at a time (the last one), for
// the Run goroutine, which keeps the one that cancelled the running session.
type aborts struct {
	mu     sync.Mutex
	req    *abortRequest // guarded by mu
	ch     chan struct{} // capacity 1
	cancel *abortRequest // owned by the Run goroutine: it cancelled the running session
}

func (a *aborts) init() { a.ch = make(chan struct{}, 1) }

// request queues an Abort for the Run goroutine, replacing one it has not
// taken.
func (a *aborts) request(reason, detail string) {
	a.mu.Lock()
	a.req = &abortRequest{reason: reason, detail: detail}
	a.mu.Unlock()
	poke(a.ch)
}

// take returns the queued Abort, if any, and forgets it.
func (a *aborts) take() *abortRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	req := a.req
	a.req = nil
	return req
}

// clear forgets an Abort that came while no session ran, and the one
// that cancelled the last session.
func (a *aborts) clear() {
	a.take()
	select {
	case <-a.ch:
	default:
	}
	a.cancel = nil
}

// Abort cancels the running session on purpose, with abort reason reason
// (backend.AbortBudgetExhausted) and detail for its record: the session
// is recorded with that outcome and counts as no error. It does not wait,
// and does nothing when no session is running by the time the Run
// goroutine gets to it; a session that starts later is not affected.
func (r *Runner) Abort(reason, detail string) { r.aborts.request(reason, detail) }

// takeAbort cancels the running session for a pending Abort.
func (r *Runner) takeAbort() {
	req := r.aborts.take()
	sess := r.cur.get()
	if req == nil || sess == nil || r.m.State().Kind != agent.Running || r.cur.timedOut || r.aborts.cancel != nil {
		return
	}
	r.aborts.cancel = req
	r.log.Info("cancelling the session", zap.String("session", r.seq.id), zap.String("abort_reason", req.reason),
		zap.String("why", req.detail))
	r.signal(sess, false)
	// The grace period bounds it now, not the session timeout.
	r.cur.tm.cancelled(r.cfg.GracePeriod)
}

// limits are the agent's counts against its limits, and its provider's
// grant: sessions started in this run (max_sessions), sessions in a row
// that completed holding work and said nothing (max_silent_sessions), and
// the Gate's ticket for the next session. The Run goroutine owns them.
type limits struct {
	started int
	silent  int
	ticket  Ticket // from Config.Gate, until the session it admitted ends
}

// reached reports whether max sessions (0: no limit) have started.
func (l *limits) reached(max int) bool { return max > 0 && l.started >= max }

// silence counts a settled session: one that completed holding a task or a
// review (holding) and reported nothing adds to the silent ones, one that
// reported resets them; a failure or an interrupt is nobody's silence. Once
// max (0: never) are silent in a row, hold is true with how many, and the
// count starts again.
func (l *limits) silence(completed, reported, holding bool, max int) (n int, hold bool) {
	if !completed {
		return 0, false
	}
	if reported || !holding {
		l.silent = 0
		return 0, false
	}
	l.silent++
	if max <= 0 || l.silent < max {
		return l.silent, false
	}
	n, l.silent = l.silent, 0
	return n, true
}

// Prober is a Ticket that may grant a provider's probe session (the
// provider's breaker is open and this session tests it).
type Prober interface{ Probe() bool }

// probing reports whether the session about to start is a probe.
func (l *limits) probing() bool {
	p, ok := l.ticket.(Prober)
	return ok && p.Probe()
}

// giveBack hands the ticket back with how its session went.
func (l *limits) giveBack(res backend.Result, ran bool) {
	if t := l.ticket; t != nil {
		l.ticket = nil
		t.Done(res, ran)
	}
}

// admit waits for the agent's provider to take a session (Config.Gate),
// showing why in the snapshot meanwhile. It reports false when a stop cut
// the wait short.
func (r *Runner) admit() bool {
	if r.cfg.Gate == nil || r.limits.ticket != nil {
		return true
	}
	t, err := r.cfg.Gate.Acquire(r.stop.ctx, r.cfg.Name, r.setWaiting)
	r.setWaiting("")
	if err != nil {
		return false
	}
	r.limits.ticket = t
	return true
}

// setWaiting publishes why the agent waits for its provider ("" when it
// does not).
func (r *Runner) setWaiting(reason string) {
	r.snaps.update(func(s *Snapshot) bool {
		if s.Waiting == reason {
			return false
		}
		s.Waiting = reason
		return true
	})
}

// onProgress is the session's Spec.OnProgress: every change goes to
// Config.OnProgress.
func (r *Runner) onProgress() func(backend.Progress) {
	f := r.cfg.OnProgress
	if f == nil {
		return nil
	}
	rec := ProgressRecord{Agent: r.cfg.Name, SessionID: r.seq.id, Seq: r.seq.n, Backend: r.cfg.BackendName}
	return func(p backend.Progress) {
		rec := rec
		rec.Progress = p
		f(rec)
	}
}
