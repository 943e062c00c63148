package runner

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func success() backend.Result {
	return backend.Result{Outcome: backend.OutcomeSuccess, Reason: "exit status 0"}
}
func failure() backend.Result {
	return backend.Result{Outcome: backend.OutcomeError, Reason: "exit status 1", ExitCode: 1}
}

func TestSuccessLoopIncrementsSeq(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.be.plan = func(n int, s *fakeSession) { s.finish(success()) }
		h.start()
		h.waitFor("seq 4", func(s Snapshot) bool { return s.Seq >= 4 })
		h.stop()
		reqs := h.pr.requests()
		for i, req := range reqs[:3] {
			if got, want := req.Seq, uint32(i+1); got != want {
				t.Errorf("prompt %d: seq = %d, want %d", i, got, want)
			}
		}
		if got, want := reqs[0].Why.Kind, WhyFirst; got != want {
			t.Errorf("first why = %v, want %v", got, want)
		}
		if got, want := reqs[1].Why.Kind, WhyAfterSuccess; got != want {
			t.Errorf("second why = %v, want %v", got, want)
		}
		if !strings.HasPrefix(h.rec.path(), "Initializing>BuildingPrompt>Spawning>Running>SessionComplete>BuildingPrompt>Spawning>Running>SessionComplete") {
			t.Errorf("path = %s", h.rec.path())
		}
		// Each spawn got a distinct session id carrying agent and seq.
		seen := map[string]bool{}
		for _, sp := range h.be.specs {
			if seen[sp.SessionID] || !strings.HasPrefix(sp.SessionID, "alice-") {
				t.Errorf("session id %q duplicate or malformed", sp.SessionID)
			}
			seen[sp.SessionID] = true
		}
	})
}

func TestErrorCoolsDownThenRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.be.plan = func(n int, s *fakeSession) {
			if n == 0 {
				s.finish(failure())
			}
		}
		start := time.Now()
		h.start()
		s := h.waitState(agent.CoolingDown)
		if got, want := s.State.Until.Sub(start), 2*time.Second; got != want {
			t.Errorf("backoff until = start+%v, want +%v", got, want)
		}
		if s.ConsecutiveErrors != 1 || s.TotalErrors != 1 {
			t.Errorf("counters = %d/%d, want 1/1", s.ConsecutiveErrors, s.TotalErrors)
		}
		h.waitState(agent.Running)
		if got := time.Since(start); got != 2*time.Second {
			t.Errorf("retry after %v, want 2s", got)
		}
		reqs := h.pr.requests()
		if got := reqs[len(reqs)-1].Why; got.Kind != WhyAfterError || !strings.Contains(got.Detail, "exit status 1") {
			t.Errorf("why after error = %+v", got)
		}
		// SessionStarted resets consecutive errors, not total.
		s = h.r.Snapshot()
		if s.ConsecutiveErrors != 0 || s.TotalErrors != 1 {
			t.Errorf("after restart counters = %d/%d, want 0/1", s.ConsecutiveErrors, s.TotalErrors)
		}
		h.stop()
	})
}

func TestSpawnFailuresStopAtThreshold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Thresholds = agent.Thresholds{MaxConsecutiveErrors: 3, MaxTotalErrors: 20} })
		h.be.startErr = func(int) error { return errBoom }
		start := time.Now()
		h.start()
		h.stoppedOnItsOwn()
		s := h.r.Snapshot()
		if s.State.Kind != agent.Stopped || !strings.Contains(s.Reason, "3 consecutive errors") {
			t.Fatalf("state %v reason %q", s.State, s.Reason)
		}
		// Backoffs 2s + 4s before the third failure.
		if got := time.Since(start); got != 6*time.Second {
			t.Errorf("stopped after %v, want 6s", got)
		}
		// Every prompt's claimed mail went back: the sessions never started.
		if got, want := len(h.pr.released), 3; got != want {
			t.Errorf("released %d prompts, want %d", got, want)
		}
		if got := h.pr.stopped; len(got) != 1 || got[0] != "alice failed" {
			t.Errorf("tasks of the agent its errors stopped returned as %v, want [alice failed]", got)
		}
	})
}

func TestUrgentInterruptExitsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.start()
		h.waitState(agent.Running)
		h.r.Interrupt(7, time.Now())
		h.waitFor("second session", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == 2 })
		first := h.be.session(0)
		if c, f := first.counts(); c != 1 || f != 0 {
			t.Errorf("cancels/force = %d/%d, want 1/0", c, f)
		}
		s := h.r.Snapshot()
		if s.ConsecutiveErrors != 0 || s.TotalErrors != 0 {
			t.Errorf("interrupt counted as error: %d/%d", s.ConsecutiveErrors, s.TotalErrors)
		}
		if !strings.Contains(h.rec.path(), "Running>Interrupting>BuildingPrompt") {
			t.Errorf("path = %s", h.rec.path())
		}
		reqs := h.pr.requests()
		if got := reqs[1].Why.Kind; got != WhyAfterInterrupt {
			t.Errorf("why = %v, want after interrupt", got)
		}
		// The same message id does not interrupt twice.
		h.r.Interrupt(7, time.Now())
		synctest.Wait()
		if c, _ := h.be.session(1).counts(); c != 0 {
			t.Errorf("second session cancelled %d times by an old message", c)
		}
		h.stop()
	})
}

func TestUrgentIgnoredGraceExceededForceStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.be.plan = func(n int, s *fakeSession) { s.exitOnCancel = n != 0 }
		h.start()
		h.waitState(agent.Running)
		at := time.Now()
		h.r.Interrupt(1, at)
		h.waitFor("second session", func(s Snapshot) bool { return h.be.starts() == 2 && s.State.Kind == agent.Running })
		if got := time.Since(at); got != 10*time.Second {
			t.Errorf("force stop after %v, want the 10s grace", got)
		}
		if c, f := h.be.session(0).counts(); c != 1 || f != 1 {
			t.Errorf("cancels/force = %d/%d, want 1/1", c, f)
		}
		if !strings.Contains(h.rec.path(), "Running>Interrupting>BuildingPrompt>Spawning>Running") {
			t.Errorf("path = %s", h.rec.path())
		}
		if reqs := h.pr.requests(); reqs[len(reqs)-1].Why.Kind != WhyAfterInterrupt {
			t.Errorf("why after a forced interrupt = %+v", reqs[len(reqs)-1].Why)
		}
		var effect agent.EffectKind
		for _, tr := range h.rec.transitions() {
			if tr.Event.Kind == agent.GraceExceeded {
				effect = tr.Effect.Kind
			}
		}
		if effect != agent.ForceStopSession {
			t.Errorf("GraceExceeded effect = %v", effect)
		}
		h.stop()
	})
}

func TestUrgentDuringSpawningInterruptsOnceRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.be.block = make(chan struct{})
		h.start()
		h.waitState(agent.Spawning)
		h.r.Interrupt(3, time.Now())
		close(h.be.block)
		h.waitFor("interrupted", func(s Snapshot) bool { return h.be.starts() >= 2 })
		if c, _ := h.be.session(0).counts(); c != 1 {
			t.Errorf("first session cancels = %d, want 1", c)
		}
		h.stop()
	})
}

func TestUrgentAlreadyInPromptDoesNotInterrupt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.pr.watermark = 10
		h.start()
		h.waitState(agent.Running)
		h.r.Interrupt(9, time.Now()) // the prompt already holds messages up to 10
		synctest.Wait()
		if c, _ := h.be.session(0).counts(); c != 0 {
			t.Errorf("cancelled %d times for mail already in the prompt", c)
		}
		if got := h.r.Snapshot().State.Kind; got != agent.Running {
			t.Errorf("state = %v", got)
		}
		h.stop()
	})
}

func TestSessionTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Timeout = time.Minute })
		h.start()
		h.waitState(agent.Running)
		start := time.Now()
		s := h.waitState(agent.CoolingDown)
		if got := time.Since(start); got != time.Minute {
			t.Errorf("timeout after %v", got)
		}
		if s.ConsecutiveErrors != 1 {
			t.Errorf("consecutive = %d", s.ConsecutiveErrors)
		}
		var ex agent.ExitOutcome
		for _, tr := range h.rec.transitions() {
			if tr.Event.Kind == agent.SessionExited {
				ex = tr.Event.Outcome
			}
		}
		if ex.Kind != agent.Timeout {
			t.Errorf("outcome = %v, want Timeout", ex)
		}
		h.stop()
	})
}

func TestSessionTimeoutIgnoredIsKilledAfterGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Timeout = time.Minute; c.GracePeriod = 5 * time.Second })
		h.be.plan = func(n int, s *fakeSession) { s.exitOnCancel = false }
		h.start()
		h.waitState(agent.Running)
		start := time.Now()
		h.waitState(agent.CoolingDown)
		if got := time.Since(start); got != time.Minute+5*time.Second {
			t.Errorf("ended after %v, want timeout + grace", got)
		}
		if _, f := h.be.session(0).counts(); f != 1 {
			t.Errorf("force stops = %d", f)
		}
		h.rec.mu.Lock()
		forced := h.rec.sessions[0].ForceStopped
		h.rec.mu.Unlock()
		if !forced {
			t.Error("session record does not say the runner force-stopped it")
		}
		h.stop()
	})
}

// TestOperatorStopFromEveryState holds the runner in each state and stops it.
func TestOperatorStopFromEveryState(t *testing.T) {
	cases := []struct {
		state agent.StateKind
		setup func(h *harness)
		reach func(h *harness)
	}{
		{agent.Initializing, func(h *harness) { h.ws.block = true }, func(h *harness) { synctest.Wait() }},
		{agent.BuildingPrompt, func(h *harness) { h.pr.block = true }, func(h *harness) { h.waitState(agent.BuildingPrompt); synctest.Wait() }},
		{agent.Spawning, func(h *harness) { h.be.block = make(chan struct{}) }, func(h *harness) { h.waitState(agent.Spawning); synctest.Wait() }},
		{agent.Running, nil, func(h *harness) { h.waitState(agent.Running) }},
		{agent.Interrupting, func(h *harness) { h.be.plan = func(n int, s *fakeSession) { s.exitOnCancel = false } },
			func(h *harness) {
				h.waitState(agent.Running)
				h.r.Interrupt(1, time.Now())
				h.waitState(agent.Interrupting)
			}},
		{agent.CoolingDown, func(h *harness) { h.be.plan = func(n int, s *fakeSession) { s.finish(failure()) } },
			func(h *harness) { h.waitState(agent.CoolingDown) }},
		{agent.SessionComplete, func(h *harness) {
			h.be.plan = func(n int, s *fakeSession) { s.finish(success()) }
			h.ws.holdVerify = true
		}, func(h *harness) { h.waitState(agent.SessionComplete); synctest.Wait() }},
	}
	for _, c := range cases {
		t.Run(c.state.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, nil)
				if c.setup != nil {
					c.setup(h)
				}
				h.start()
				c.reach(h)
				if got := h.r.Snapshot().State.Kind; got != c.state {
					t.Fatalf("held in %v, want %v", got, c.state)
				}
				h.stop()
				s := h.r.Snapshot()
				if s.State.Kind != agent.Stopped {
					t.Fatalf("state = %v", s.State)
				}
				last := h.rec.transitions()[len(h.rec.transitions())-1]
				if last.Event.Kind != agent.OperatorStop || last.From.Kind != c.state || last.Actor != "operator" {
					t.Errorf("last transition %v from %v by %s", last.Event, last.From, last.Actor)
				}
				wantCancel := c.state == agent.Running || c.state == agent.Interrupting
				if got := last.Effect.Kind == agent.CancelSession; got != wantCancel {
					t.Errorf("effect %v, want cancel=%v", last.Effect, wantCancel)
				}
				// No session outlives the agent.
				for i := 0; i < h.be.starts(); i++ {
					select {
					case <-h.be.session(i).Done():
					default:
						t.Errorf("session %d still running after stop", i)
					}
				}
			})
		})
	}
}

func TestStopWaitsGraceThenForces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.GracePeriod = 3 * time.Second })
		h.be.plan = func(n int, s *fakeSession) { s.exitOnCancel = false }
		h.start()
		h.waitState(agent.Running)
		start := time.Now()
		h.stop()
		if got := time.Since(start); got != 3*time.Second {
			t.Errorf("stop took %v, want the 3s grace", got)
		}
		if c, f := h.be.session(0).counts(); c < 1 || f != 1 {
			t.Errorf("cancels/force = %d/%d", c, f)
		}
		if n := len(h.rec.sessions); n != 1 || !h.rec.sessions[0].Stopped {
			t.Errorf("session records = %+v", h.rec.sessions)
		}
	})
}

func TestForceStopSkipsGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.be.plan = func(n int, s *fakeSession) { s.exitOnCancel = false }
		h.start()
		h.waitState(agent.Running)
		start := time.Now()
		h.r.Stop("daemon")
		synctest.Wait()
		h.r.ForceStop()
		<-h.err
		if got := time.Since(start); got != 0 {
			t.Errorf("force stop took %v", got)
		}
	})
}

func TestFatalFromVerifyStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.ws.verifyErr = errBoom
		h.be.plan = func(n int, s *fakeSession) { s.finish(success()) }
		h.start()
		<-h.err
		s := h.r.Snapshot()
		if s.State.Kind != agent.Stopped || !strings.Contains(s.Reason, "boom") {
			t.Errorf("state %v reason %q", s.State, s.Reason)
		}
	})
}

func TestRestoredTotalErrorsCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.TotalErrors = 19; c.FirstSeq = 42 })
		h.be.startErr = func(int) error { return errBoom }
		h.start()
		<-h.err
		s := h.r.Snapshot()
		if s.State.Kind != agent.Stopped || s.TotalErrors != 20 || !strings.Contains(s.Reason, "20 total errors") {
			t.Fatalf("state %v total %d reason %q", s.State, s.TotalErrors, s.Reason)
		}
		if got := h.pr.requests()[0].Seq; got != 42 {
			t.Errorf("first seq after restart = %d, want 42", got)
		}
	})
}

func TestRestoredStoppedStaysStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.StoppedReason = "5 consecutive errors (max 5)"; c.TotalErrors = 7 })
		h.start()
		<-h.err
		s := h.r.Snapshot()
		if s.State.Kind != agent.Stopped || s.Reason != "5 consecutive errors (max 5)" || s.TotalErrors != 7 {
			t.Fatalf("snapshot %+v", s)
		}
		if h.be.starts() != 0 || len(h.pr.requests()) != 0 {
			t.Error("a restored Stopped agent ran")
		}
	})
}

func TestUpdateAppliesFromNextSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.be.plan = func(n int, s *fakeSession) {
			if n == 0 {
				s.exitOnCancel = true
			} else {
				s.finish(success())
			}
		}
		h.start()
		h.waitState(agent.Running)
		other := &fakeBackend{plan: func(n int, s *fakeSession) {}}
		h.r.Update(Settings{Role: "new role", Backend: other, Env: []string{"X=2"}})
		if got := h.pr.requests()[0].Role; got != "test role" {
			t.Errorf("running session's role changed to %q", got)
		}
		h.r.Interrupt(1, time.Now()) // end the first session
		h.waitFor("second session", func(s Snapshot) bool { return other.starts() == 1 })
		reqs := h.pr.requests()
		if got := reqs[len(reqs)-1].Role; got != "new role" {
			t.Errorf("next prompt role = %q", got)
		}
		if env := other.specs[0].Env; len(env) == 0 || env[0] != "X=2" {
			t.Errorf("next session env = %v", env)
		}
		if h.be.starts() != 1 {
			t.Errorf("old backend started %d sessions", h.be.starts())
		}
		h.stop()
	})
}

func TestFatalResultStopsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.be.plan = func(n int, s *fakeSession) {
			s.finish(backend.Result{Outcome: backend.OutcomeError, Reason: "fatal: authentication_failed", Fatal: "invalid API key (HTTP 401)"})
		}
		h.start()
		<-h.err
		s := h.r.Snapshot()
		if s.State.Kind != agent.Stopped || s.Reason != "invalid API key (HTTP 401)" || h.be.starts() != 1 {
			t.Fatalf("state %v reason %q after %d sessions", s.State, s.Reason, h.be.starts())
		}
	})
}

// TestRateLimitWaitsForTheResetAndCountsNoError: a session that ends on a
// 429 is the provider's trouble, not the agent's: no error is counted, its
// mail and task are shown again, and the next session waits for the
// provider's reset (45 s here), not the error backoff.
func TestRateLimitWaitsForTheResetAndCountsNoError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		start := time.Now()
		h.be.plan = func(n int, s *fakeSession) {
			if n == 0 {
				s.finish(backend.Result{Outcome: backend.OutcomeError, Reason: "429", RateLimited: true, RetryAfter: start.Add(45 * time.Second)})
			}
		}
		h.start()
		s := h.waitFor("second session", func(Snapshot) bool { return h.be.starts() == 2 })
		if got := time.Since(start); got != 45*time.Second {
			t.Errorf("retried after %v, want the 45s reset time", got)
		}
		if s.ConsecutiveErrors != 0 || s.TotalErrors != 0 {
			t.Errorf("errors %d/%d after a rate-limited session", s.ConsecutiveErrors, s.TotalErrors)
		}
		if strings.Contains(h.rec.path(), "CoolingDown") {
			t.Errorf("path %s: a provider's trouble is no error to back off from", h.rec.path())
		}
		if st := h.pr.settlements()[0]; st.Completed || !strings.Contains(st.Note, "provider") {
			t.Errorf("settlement %+v: want the mail shown again, the provider named", st)
		}
		h.rec.mu.Lock()
		label := h.rec.sessions[0].OutcomeLabel()
		h.rec.mu.Unlock()
		if label != OutcomeError {
			t.Errorf("recorded as %q: a session the provider cut off failed, whoever is to blame", label)
		}
		h.stop()
	})
}

// TestProviderErrorsNeverStopAnAgent: sessions that keep failing on the
// provider's server errors move no error counter, however many: an outage
// of any length leaves the agent ready (the provider gate, not the agent's
// thresholds, paces them).
func TestProviderErrorsNeverStopAnAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) {
			c.Thresholds.MaxTotalErrors = 2
			c.MinSessionInterval = time.Second
		})
		h.be.plan = func(n int, s *fakeSession) {
			if n < 10 {
				s.finish(backend.Result{Outcome: backend.OutcomeError, Reason: "exit 1", ProviderError: "API error 529 overloaded"})
			}
		}
		h.start()
		s := h.waitFor("the 11th session", func(Snapshot) bool { return h.be.starts() == 11 })
		if s.State.Kind == agent.Stopped || s.TotalErrors != 0 {
			t.Fatalf("after 10 provider failures: %v, %d errors", s.State, s.TotalErrors)
		}
		h.stop()
	})
}

func TestInterruptCancelsSessionTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Timeout = 5 * time.Second; c.GracePeriod = 10 * time.Second })
		h.be.plan = func(n int, s *fakeSession) { s.exitOnCancel = n != 0 }
		h.start()
		h.waitState(agent.Running)
		time.Sleep(4 * time.Second)
		h.r.Interrupt(1, time.Now())
		h.waitFor("second session", func(Snapshot) bool { return h.be.starts() == 2 })
		h.rec.mu.Lock()
		rec := h.rec.sessions[0]
		h.rec.mu.Unlock()
		if rec.Outcome.Kind == agent.Timeout {
			t.Errorf("an interrupted session was classified as a timeout: %+v", rec.Outcome)
		}
		if c, _ := h.be.session(0).counts(); c != 1 {
			t.Errorf("cancel signals = %d, want 1 (the timeout must not cancel again)", c)
		}
		h.stop()
	})
}

// TestSettleMail: the mail a prompt carried is acknowledged only by a session
// that completed; every other end says why it will be shown again.
func TestSettleMail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.start()
		h.waitState(agent.Running)
		h.r.Interrupt(7, time.Now()) // session 1: interrupted
		h.waitFor("second session", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == 2 })
		h.be.session(1).finish(backend.Result{Outcome: backend.OutcomeSuccess}) // session 2: completed
		h.waitFor("third session", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == 3 })
		h.be.session(2).finish(backend.Result{Outcome: backend.OutcomeError, Reason: "exit 1"}) // session 3: failed
		h.waitFor("fourth session", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == 4 })
		h.stop() // session 4: stopped with the agent
		got := h.pr.settlements()
		if len(got) != 4 {
			t.Fatalf("%d settlements, want 4: %+v", len(got), got)
		}
		wants := []struct {
			completed bool
			note      string
		}{
			{false, "that session was interrupted by urgent mail"},
			{true, ""},
			{false, "that session failed: Error(exit 1)"},
			{false, "that session was stopped with its agent"},
		}
		for i, w := range wants {
			g := got[i]
			if g.Completed != w.completed || !strings.HasPrefix(g.Note, w.note) || (w.note == "" && g.Note != "") {
				t.Errorf("settlement %d = %+v, want completed=%v note %q", i+1, g, w.completed, w.note)
			}
			if g.Session.SessionID == "" || g.Session.Result.Ended.IsZero() || (i > 0 && g.Session.SessionID == got[i-1].Session.SessionID) {
				t.Errorf("settlement %d = %+v: want its own session id and an end", i+1, g)
			}
		}
	})
}

// TestSessionEndedBeforeTheStopCompleted: a session that ended on its own
// before the stop reached it (here it ends as it starts, and the stop is
// asked for then too) was not cut short: it completed, so its mail is
// delivered and not shown again. Only a session the stop cancelled while
// it ran is "stopped with its agent".
func TestSessionEndedBeforeTheStopCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.be.plan = func(n int, s *fakeSession) {
			s.finish(backend.Result{Outcome: backend.OutcomeSuccess})
			h.r.Stop("daemon")
		}
		h.start()
		if err := <-h.err; err != nil {
			t.Fatal(err)
		}
		got := h.pr.settlements()
		if len(got) != 1 || !got[0].Completed || got[0].Note != "" {
			t.Fatalf("settlements %+v, want the one session completed, with no note", got)
		}
		if got[0].Session.OutcomeLabel() != OutcomeSuccess {
			t.Errorf("outcome %q, want %q", got[0].Session.OutcomeLabel(), OutcomeSuccess)
		}
	})
}

// TestSessionOverWhenTheStopCameCompleted: the stop's cancel is sent to a
// session whose process had already exited 0, its end not yet seen: it was
// not cut short. Its outcome is a success, so it completed, and its mail
// is acknowledged, not shown to the next session as well (the chaos test's
// "message shown to 2 completed sessions").
func TestSessionOverWhenTheStopCameCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.be.plan = func(n int, s *fakeSession) { s.exitedOnItsOwn = true }
		h.start()
		h.waitState(agent.Running)
		h.stop()
		got := h.pr.settlements()
		if len(got) != 1 || !got[0].Completed || got[0].Note != "" {
			t.Fatalf("settlements %+v, want the one session completed, with no note", got)
		}
		if got[0].Session.OutcomeLabel() != OutcomeSuccess {
			t.Errorf("outcome %q, want %q", got[0].Session.OutcomeLabel(), OutcomeSuccess)
		}
	})
}

// TestIdleAfterDoneUntilWoken: a session that said DONE, then nothing to do:
// no session starts however long it waits, until Wake finds work.
func TestIdleAfterDoneUntilWoken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.MinSessionInterval = 0 })
		h.pr.signalled, h.pr.idle = true, true
		h.start()
		h.waitState(agent.Running)
		h.be.session(0).finish(backend.Result{Outcome: backend.OutcomeSuccess})
		h.waitFor("idle", func(s Snapshot) bool { return s.Idle && s.State.Kind == agent.BuildingPrompt })
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := h.be.starts(); n != 1 {
			t.Fatalf("%d sessions while idle, want 1", n)
		}
		h.pr.setIdle(false)
		h.r.Wake()
		h.waitFor("second session", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == 2 })
		if s := h.r.Snapshot(); s.Idle {
			t.Error("still idle while running")
		}
		if got := h.rec.idleChanges(); len(got) != 2 || !got[0] || got[1] {
			t.Errorf("idle notifications %v, want [true false]", got)
		}
		h.stop()
	})
}

// TestMaxSessionsStops: the agent stops with reason max_sessions after N.
func TestMaxSessionsStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.MaxSessions = 2; c.MinSessionInterval = 0 })
		h.start()
		for i := range 2 {
			h.waitFor("session", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == i+1 })
			h.be.session(i).finish(backend.Result{Outcome: backend.OutcomeSuccess})
		}
		h.stoppedOnItsOwn()
		s := h.r.Snapshot()
		if s.State.Kind != agent.Stopped || !strings.HasPrefix(s.Reason, "max_sessions") || h.be.starts() != 2 {
			t.Fatalf("after 2 sessions: %v %q, %d starts", s.State, s.Reason, h.be.starts())
		}
		// Its own limit, not its tasks' failure: no retry.
		if got := h.pr.stopped; len(got) != 1 || got[0] != "alice not failed" {
			t.Errorf("tasks of the stopped agent returned as %v, want [alice not failed]", got)
		}
	})
}

// TestStopCauseDecidesTheTasksRetry: an agent the operator stops (or a
// reload, saying why) gives its tasks back as no failure of theirs; the
// daemon's stop gives nothing back (it holds them over). Thresholds and
// max_sessions: TestSpawnFailuresStopAtThreshold, TestMaxSessionsStops.
func TestStopCauseDecidesTheTasksRetry(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stop       func(r *Runner)
		want       []string
		wantReason string
	}{
		{"the operator", func(r *Runner) { r.Stop("operator") }, []string{"alice not failed"}, "stop requested by operator"},
		{"a reload", func(r *Runner) { r.StopFor("operator", "removed from the config by a reload") }, []string{"alice not failed"},
			"stop requested by operator: removed from the config by a reload"},
		{"the daemon", func(r *Runner) { r.Stop("daemon") }, nil, "stop requested by daemon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, nil)
				h.start()
				h.waitState(agent.Running)
				tc.stop(h.r)
				if err := <-h.err; err != nil {
					t.Fatal(err)
				}
				if got := h.pr.stopped; !slices.Equal(got, tc.want) {
					t.Errorf("tasks returned as %v, want %v", got, tc.want)
				}
				if got := h.r.Snapshot().Reason; got != tc.wantReason {
					t.Errorf("stop reason %q, want %q", got, tc.wantReason)
				}
			})
		})
	}
}
