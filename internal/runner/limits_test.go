package runner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// TestDeniedToolIsNotAnError: a session stopped for a refused tool call is
// recorded as permission_denied, moves no error counter, shows its mail
// again, and the next prompt names the call.
func TestDeniedToolIsNotAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := backend.ToolPolicy{Deny: []string{"Bash"}}
		h := newHarness(t, func(c *Config) { c.Tools = pol; c.MinSessionInterval = 0; c.BackendName = "claude" })
		h.start()
		h.waitState(agent.Running)
		if got := h.be.specs[0].Tools; len(got.Deny) != 1 || got.Deny[0] != "Bash" {
			t.Fatalf("Spec.Tools = %+v", got)
		}
		d := &backend.ToolDenial{Tool: "Bash", Input: "rm -rf /", Why: "tools.deny: Bash"}
		h.be.session(0).finish(backend.Result{Outcome: backend.OutcomeError, AbortReason: backend.AbortPermissionDenied,
			Denied: d, Reason: "permission_denied: tool " + d.String()})
		s := h.waitFor("second session", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == 2 })
		if s.ConsecutiveErrors != 0 || s.TotalErrors != 0 {
			t.Errorf("errors %d/%d", s.ConsecutiveErrors, s.TotalErrors)
		}
		h.rec.mu.Lock()
		rec := h.rec.sessions[0]
		h.rec.mu.Unlock()
		if rec.OutcomeLabel() != OutcomePermissionDenied || rec.StoppedFor != backend.AbortPermissionDenied || rec.Backend != "claude" {
			t.Errorf("record %+v, label %s", rec, rec.OutcomeLabel())
		}
		if st := h.pr.settlements()[0]; st.Completed || !strings.Contains(st.Note, "Bash (rm -rf /): tools.deny: Bash") {
			t.Errorf("settlement %+v", st)
		}
		if why := h.pr.requests()[1].Why; why.Kind != WhyAfterToolDenied || why.Detail != d.String() {
			t.Errorf("next prompt's why %+v", why)
		}
		h.stop()
	})
	// A permission_denied exit of its own (exit 126) is an ordinary error.
	if stoppedFor(backend.Result{AbortReason: backend.AbortPermissionDenied}, false) != "" {
		t.Error("exit 126 taken for a refused tool")
	}
}

// TestAbortForBudget: Abort cancels the running session; it is recorded as
// budget_exhausted with the detail, counts no error, and is priced when its
// backend reported no cost. An Abort while no session runs does not touch
// the next one.
func TestAbortForBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var progress []ProgressRecord
		h := newHarness(t, func(c *Config) {
			c.MinSessionInterval = 0
			c.BackendName = "gem"
			c.Price = func(be, model string, u backend.Usage) float64 {
				if be != "gem" {
					t.Errorf("priced %s %s", be, model)
				}
				return u.CostUSD + float64(u.Tokens())/1e6
			}
			c.OnProgress = func(p ProgressRecord) { mu.Lock(); progress = append(progress, p); mu.Unlock() }
		})
		h.start()
		h.waitState(agent.Running)
		h.be.specs[0].OnProgress(backend.Progress{Usage: backend.Usage{InputTokens: 5}})
		mu.Lock()
		if len(progress) != 1 || progress[0].Agent != "alice" || progress[0].Backend != "gem" || progress[0].SessionID != h.be.specs[0].SessionID {
			t.Fatalf("progress %+v", progress)
		}
		mu.Unlock()
		h.r.Abort(backend.AbortBudgetExhausted, "budget_exhausted: alice spent $1.02 of $1.00")
		h.waitFor("second start", func(s Snapshot) bool { return h.be.starts() == 2 })
		if c, _ := h.be.session(0).counts(); c != 1 {
			t.Fatalf("cancels %d", c)
		}
		h.rec.mu.Lock()
		rec := h.rec.sessions[0]
		h.rec.mu.Unlock()
		if rec.OutcomeLabel() != OutcomeBudgetExhausted || !strings.HasPrefix(rec.Result.Reason, "budget_exhausted: alice spent") {
			t.Errorf("record %+v", rec)
		}
		if s := h.r.Snapshot(); s.TotalErrors != 0 {
			t.Errorf("total errors %d", s.TotalErrors)
		}
		if why := h.pr.requests()[1].Why; why.Kind != WhyAfterBudget {
			t.Errorf("why %+v", why)
		}
		// The second session ends on its own, priced by Price.
		h.waitState(agent.Running)
		h.be.session(1).finish(backend.Result{Outcome: backend.OutcomeSuccess, Model: "m1", Usage: backend.Usage{InputTokens: 2e6}})
		h.waitFor("third start", func(s Snapshot) bool { return h.be.starts() == 3 })
		h.rec.mu.Lock()
		rec = h.rec.sessions[1]
		h.rec.mu.Unlock()
		if rec.Result.Usage.CostUSD != 2 || rec.OutcomeLabel() != OutcomeSuccess {
			t.Errorf("second record %+v", rec)
		}
		h.stop()
	})
}

// fakeGate admits by the test's word and keeps what was reported.
type fakeGate struct {
	mu      sync.Mutex
	probe   bool // the tickets grant probes
	open    chan struct{}
	reason  string
	done    []backend.Result
	ran     []bool
	waiting []string
}

type fakeTicket struct{ g *fakeGate }

func (g *fakeGate) Acquire(ctx context.Context, _ string, waiting func(string)) (Ticket, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return fakeTicket{g}, nil
	default:
	}
	waiting(g.reason)
	select {
	case <-open:
		return fakeTicket{g}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (t fakeTicket) Probe() bool {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	return t.g.probe
}

func (t fakeTicket) Done(res backend.Result, ran bool) {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	t.g.done, t.g.ran = append(t.g.done, res), append(t.g.ran, ran)
}

// TestProbeSessionIsMarked: a session its provider's breaker granted as
// the probe starts with Spec.Probe (its CLI's own retries capped); others
// do not.
func TestProbeSessionIsMarked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{open: make(chan struct{}), probe: true}
		close(g.open)
		h := newHarness(t, func(c *Config) { c.Gate = g; c.MinSessionInterval = 0 })
		h.start()
		h.waitState(agent.Running)
		g.mu.Lock()
		g.probe = false
		g.mu.Unlock()
		h.be.session(0).finish(backend.Result{Outcome: backend.OutcomeSuccess})
		h.waitFor("second start", func(Snapshot) bool { return h.be.starts() == 2 })
		h.stop()
		if !h.be.specs[0].Probe || h.be.specs[1].Probe {
			t.Fatalf("probe flags %v, %v; want the first alone", h.be.specs[0].Probe, h.be.specs[1].Probe)
		}
	})
}

// TestGateHoldsBeforePrompt: while the provider gate holds, no prompt is
// built (no mail claimed) and the snapshot says why; once it opens the
// session runs and its result goes back with the ticket.
func TestGateHoldsBeforePrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{open: make(chan struct{}), reason: "rate limited until 10:00:20Z (429)"}
		h := newHarness(t, func(c *Config) { c.Gate = g; c.MinSessionInterval = 0 })
		h.start()
		s := h.waitFor("waiting", func(s Snapshot) bool { return s.Waiting != "" })
		if s.Waiting != g.reason || s.State.Kind != agent.BuildingPrompt || len(h.pr.requests()) != 0 {
			t.Fatalf("snapshot %+v, prompts %d", s, len(h.pr.requests()))
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if h.be.starts() != 0 {
			t.Fatal("a session started while the gate held")
		}
		close(g.open)
		h.waitState(agent.Running)
		if s := h.r.Snapshot(); s.Waiting != "" {
			t.Errorf("still waiting: %q", s.Waiting)
		}
		h.be.session(0).finish(backend.Result{Outcome: backend.OutcomeError, Reason: "500", ProviderError: "API error 500"})
		h.waitFor("second start", func(Snapshot) bool { return h.be.starts() == 2 })
		h.stop()
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.done) != 2 || g.done[0].ProviderError != "API error 500" || !g.ran[0] || !g.ran[1] {
			t.Fatalf("tickets %+v ran %v", g.done, g.ran)
		}
	})
}

// TestGateTicketBackWhenPaused: a pause that comes while the agent waits
// for its provider hands the ticket back unused (another agent may probe),
// and no session starts until the resume.
func TestGateTicketBackWhenPaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{open: make(chan struct{}), reason: "provider down"}
		h := newHarness(t, func(c *Config) { c.Gate = g; c.MinSessionInterval = 0 })
		h.start()
		h.waitFor("waiting", func(s Snapshot) bool { return s.Waiting != "" })
		h.r.Pause(Pause{Actor: "operator"})
		close(g.open)
		synctest.Wait()
		g.mu.Lock()
		ran := append([]bool(nil), g.ran...)
		g.mu.Unlock()
		if len(ran) != 1 || ran[0] || h.be.starts() != 0 {
			t.Fatalf("tickets back %v, starts %d", ran, h.be.starts())
		}
		h.r.Resume()
		h.waitState(agent.Running)
		h.stop()
	})
}

// max_sessions counts started sessions; silence counts completed sessions
// that held work and reported nothing, holds at the limit and starts again;
// a report or a session without work resets it, a failure changes nothing.
func TestLimitsCounts(t *testing.T) {
	var l limits
	l.started = 100
	if l.reached(0) {
		t.Error("max_sessions 0 reached")
	}
	l.started = 2
	if l.reached(3) {
		t.Error("2 of 3 sessions reached the limit")
	}
	l.started = 3
	if !l.reached(3) {
		t.Error("3 of 3 sessions did not reach the limit")
	}
	type call struct {
		completed, reported, holding bool
		wantN                        int
		wantHold                     bool
	}
	for i, c := range []call{
		{true, false, true, 1, false},
		{false, false, true, 0, false}, // a failure: nobody's silence
		{true, false, true, 2, false},
		{true, false, true, 3, true},
		{true, false, true, 1, false}, // counts again
		{true, true, true, 0, false},  // reported
		{true, false, true, 1, false},
		{true, false, false, 0, false}, // no work held
		{true, false, true, 1, false},
	} {
		n, hold := l.silence(c.completed, c.reported, c.holding, 3)
		if n != c.wantN || hold != c.wantHold {
			t.Errorf("call %d %+v: silence = %d, %v", i, c, n, hold)
		}
	}
	var never limits
	for range 5 {
		if _, hold := never.silence(true, false, true, 0); hold {
			t.Fatal("max_silent_sessions 0 held the agent")
		}
	}
	if never.silent != 5 {
		t.Errorf("silent %d with no limit, want 5", never.silent)
	}
}

// A ticket is handed back once, with how its session went.
func TestLimitsTicket(t *testing.T) {
	var l limits
	l.giveBack(backend.Result{}, false) // none: nothing to do
	g := &fakeGate{probe: true}
	l.ticket = fakeTicket{g}
	if !l.probing() {
		t.Error("a probe ticket's session is no probe")
	}
	l.giveBack(backend.Result{Reason: "x"}, true)
	l.giveBack(backend.Result{}, false)
	if len(g.ran) != 1 || !g.ran[0] || g.done[0].Reason != "x" || l.ticket != nil || l.probing() {
		t.Fatalf("ticket handed back %d times (%v), ticket %v", len(g.ran), g.ran, l.ticket)
	}
}

// The Abort last asked for is taken once; clear forgets it, its signal and
// the Abort that cancelled the last session.
func TestAborts(t *testing.T) {
	var a aborts
	a.init()
	if a.take() != nil {
		t.Fatal("an Abort in a new runner")
	}
	a.request(backend.AbortBudgetExhausted, "first")
	a.request(backend.AbortBudgetExhausted, "second")
	if got := len(a.ch); got != 1 {
		t.Errorf("%d abort signals queued, want 1", got)
	}
	if req := a.take(); req == nil || req.detail != "second" || a.take() != nil {
		t.Fatalf("took %+v, then again", req)
	}
	a.request(backend.AbortBudgetExhausted, "late")
	a.cancel = &abortRequest{reason: "x"}
	a.clear()
	if a.take() != nil || len(a.ch) != 0 || a.cancel != nil {
		t.Fatal("clear left an Abort")
	}
}
