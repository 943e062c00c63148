package runner

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// TestPauseLetsSessionFinishThenHolds: without Now the running session runs
// on and ends by itself; then no session starts, in BuildingPrompt, until
// Resume.
func TestPauseLetsSessionFinishThenHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.MinSessionInterval = 0 })
		h.start()
		h.waitState(agent.Running)
		h.r.Pause(Pause{Actor: "operator", Reason: "lunch"})
		s := h.waitFor("paused", func(s Snapshot) bool { return s.Paused })
		if s.PausedBy != "operator" || s.PauseReason != "lunch" || s.PausedSince.IsZero() || s.Frozen {
			t.Fatalf("snapshot %+v", s)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if c, _ := h.be.session(0).counts(); c != 0 || h.r.Snapshot().State.Kind != agent.Running {
			t.Fatalf("the running session was cancelled (%d) or left Running: %v", c, h.r.Snapshot().State)
		}
		h.be.session(0).finish(success())
		h.waitState(agent.BuildingPrompt)
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := h.be.starts(); n != 1 || h.r.Snapshot().State.Kind != agent.BuildingPrompt {
			t.Fatalf("%d sessions while paused (state %v), want 1", n, h.r.Snapshot().State)
		}
		if !h.r.Resume() {
			t.Fatal("Resume reported no pause")
		}
		h.waitFor("second session", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == 2 })
		if s := h.r.Snapshot(); s.Paused || s.PauseReason != "" {
			t.Errorf("still paused after Resume: %+v", s)
		}
		if h.r.Resume() {
			t.Error("a second Resume reported a pause")
		}
		// The eight states stay the seed's: no transition for the pause.
		for _, tr := range h.rec.transitions() {
			if tr.From.Kind == agent.BuildingPrompt && tr.To.Kind == agent.BuildingPrompt {
				t.Errorf("the pause made a transition: %+v", tr)
			}
		}
		h.stop()
	})
}

// TestPauseNowFreezesAndStopsTheClock: the session is frozen at once and its
// timeout stops counting; Resume thaws it and the timeout fires after the
// time it had left.
func TestPauseNowFreezesAndStopsTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Timeout = 10 * time.Minute })
		h.start()
		h.waitState(agent.Running)
		started := time.Now()
		time.Sleep(4 * time.Minute)
		h.r.Pause(Pause{Actor: "operator", Now: true})
		h.waitFor("frozen", func(s Snapshot) bool { return s.Frozen })
		sess := h.be.session(0)
		if f, th := sess.frozenCounts(); f != 1 || th != 0 {
			t.Fatalf("freezes %d thaws %d", f, th)
		}
		time.Sleep(3 * time.Hour) // far past the timeout
		synctest.Wait()
		if c, _ := sess.counts(); c != 0 || h.r.Snapshot().State.Kind != agent.Running {
			t.Fatalf("a frozen session was cancelled (%d cancels, state %v)", c, h.r.Snapshot().State)
		}
		h.r.Pause(Pause{Actor: "operator", Reason: "again"}) // no second freeze
		synctest.Wait()
		resumed := time.Now()
		h.r.Resume()
		h.waitFor("thawed", func(s Snapshot) bool { return !s.Frozen && !s.Paused })
		if f, th := sess.frozenCounts(); f != 1 || th != 1 {
			t.Fatalf("freezes %d thaws %d after Resume", f, th)
		}
		h.waitState(agent.CoolingDown) // the timeout, with the 6 minutes it had left
		if got := time.Since(resumed); got != 6*time.Minute {
			t.Errorf("timeout %v after the resume, want 6m (session started %v before)", got, time.Since(started))
		}
		h.stop()
	})
}

// TestUrgentMailWaitsForResume: urgent mail does not interrupt a paused
// agent's session; the resume lets it.
func TestUrgentMailWaitsForResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.start()
		h.waitState(agent.Running)
		h.r.Pause(Pause{Actor: "operator", Now: true})
		h.waitFor("frozen", func(s Snapshot) bool { return s.Frozen })
		h.r.Interrupt(99, time.Now())
		time.Sleep(time.Minute)
		synctest.Wait()
		if c, _ := h.be.session(0).counts(); c != 0 {
			t.Fatalf("urgent mail cancelled a frozen session")
		}
		h.r.Resume()
		h.waitFor("the interrupt", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == 2 })
		if c, _ := h.be.session(0).counts(); c != 1 {
			t.Fatalf("cancels %d, want the interrupt's", c)
		}
		if f, th := h.be.session(0).frozenCounts(); f != 1 || th != 1 {
			t.Errorf("freezes %d thaws %d: want the session thawed before it was interrupted", f, th)
		}
		h.stop()
	})
}

// TestRestoredPauseHolds: a pause that survived a restart starts no session.
func TestRestoredPauseHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		since := time.Now().Add(-time.Hour)
		h := newHarness(t, func(c *Config) {
			c.Paused = &Pause{Actor: "operator", Reason: "deploy", Since: since, Now: true}
		})
		if s := h.r.Snapshot(); !s.Paused || s.PauseReason != "deploy" || !s.PausedSince.Equal(since) {
			t.Fatalf("snapshot before Run: %+v", s)
		}
		if p, _ := h.r.Paused(); p.Now {
			t.Error("a restored pause keeps Now: the session it froze is gone")
		}
		h.start()
		h.waitState(agent.BuildingPrompt)
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := h.be.starts(); n != 0 {
			t.Fatalf("%d sessions started while paused", n)
		}
		h.r.Resume()
		h.waitState(agent.Running)
		h.stop()
	})
}

// TestStopWhilePaused: a stop ends a frozen session (the backend thaws it
// to deliver the cancel) and a held agent.
func TestStopWhilePaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.start()
		h.waitState(agent.Running)
		h.r.Pause(Pause{Actor: "operator", Now: true})
		h.waitFor("frozen", func(s Snapshot) bool { return s.Frozen })
		h.stop()
		if s := h.r.Snapshot(); s.State.Kind != agent.Stopped || s.Frozen || !s.Paused {
			t.Fatalf("after the stop: %+v (the pause stays; the session is gone)", s)
		}
	})
}

// TestMaxTurnsIsNotAnError: a session that reached max_turns is recorded as
// max_turns, moves no error counter, shows its mail again and tells the next
// prompt why.
func TestMaxTurnsIsNotAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.MaxTurns = 3; c.MinSessionInterval = 0 })
		h.start()
		h.waitState(agent.Running)
		if got := h.be.specs[0].MaxTurns; got != 3 {
			t.Fatalf("Spec.MaxTurns = %d", got)
		}
		h.be.session(0).finish(backend.Result{Outcome: backend.OutcomeError, AbortReason: backend.AbortMaxTurns,
			Reason: "max_turns: stopped after 3 turns (limit 3)", Turns: 3})
		s := h.waitFor("second session", func(s Snapshot) bool { return s.State.Kind == agent.Running && h.be.starts() == 2 })
		if s.ConsecutiveErrors != 0 || s.TotalErrors != 0 {
			t.Errorf("errors %d/%d after a max_turns session", s.ConsecutiveErrors, s.TotalErrors)
		}
		if !strings.Contains(h.rec.path(), "Running>SessionComplete>BuildingPrompt") {
			t.Errorf("path %s", h.rec.path())
		}
		h.rec.mu.Lock()
		rec := h.rec.sessions[0]
		h.rec.mu.Unlock()
		if !rec.TurnLimit || rec.OutcomeLabel() != OutcomeMaxTurns || rec.Result.AbortReason != backend.AbortMaxTurns {
			t.Errorf("record %+v, label %s", rec, rec.OutcomeLabel())
		}
		st := h.pr.settlements()[0]
		if st.Completed || !strings.Contains(st.Note, "turn limit") {
			t.Errorf("settlement %+v: want the mail shown again", st)
		}
		if why := h.pr.requests()[1].Why; why.Kind != WhyAfterTurnLimit {
			t.Errorf("next prompt's why %+v", why)
		}
		h.stop()
	})
}

// auditSink collects tool records.
type auditSink struct{ recs chan ToolRecord }

func (a auditSink) ToolCall(r ToolRecord) { a.recs <- r }

// TestAuditGetsEveryCall: a session's OnTool hands each call to the
// Auditor with the agent, session and seq.
func TestAuditGetsEveryCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := auditSink{recs: make(chan ToolRecord, 4)}
		h := newHarness(t, func(c *Config) { c.Audit = sink })
		h.start()
		h.waitState(agent.Running)
		sp := h.be.specs[0]
		if sp.OnTool == nil {
			t.Fatal("no OnTool with an Auditor")
		}
		sp.OnTool(backend.ToolCall{Name: "Bash", Input: "make test"})
		r := <-sink.recs
		if r.Agent != "alice" || r.SessionID != sp.SessionID || r.Seq != sp.Seq || r.Call.Input != "make test" {
			t.Fatalf("record %+v", r)
		}
		h.stop()
	})
}

// A pause that survived a restart froze nothing; pausing again keeps the
// first Since, takes the new actor and reason, and keeps Now until lifted;
// lifting reports the pause once.
func TestPauserSetAndLift(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var pz pauser
	pz.init(&Pause{Actor: "operator", Reason: "lunch", Since: t0, Now: true})
	if p, ok := pz.get(); !ok || p.Now || !p.Since.Equal(t0) {
		t.Fatalf("restored pause %+v, %v; want paused since %v without Now", p, ok, t0)
	}
	pz.set(Pause{Actor: "daemon", Reason: "budget", Now: true}, t0.Add(time.Hour))
	pz.set(Pause{Actor: "agent:bob", Reason: "again"}, t0.Add(2*time.Hour))
	if got := len(pz.ch); got != 1 {
		t.Errorf("%d pause signals queued, want 1", got)
	}
	p, _ := pz.get()
	if want := (Pause{Actor: "agent:bob", Reason: "again", Since: t0, Now: true}); p != want {
		t.Fatalf("pause %+v, want %+v", p, want)
	}
	var s Snapshot
	pz.fill(&s)
	if !s.Paused || s.PausedBy != "agent:bob" || s.PauseReason != "again" || !s.PausedSince.Equal(t0) {
		t.Fatalf("snapshot %+v", s)
	}
	if !pz.lift() || pz.lift() {
		t.Fatal("lift did not report the pause exactly once")
	}
	pz.fill(&s)
	if s.Paused || s.PausedBy != "" || s.PauseReason != "" || !s.PausedSince.IsZero() {
		t.Fatalf("snapshot after lift %+v", s)
	}
	pz.set(Pause{Actor: "operator"}, t0.Add(3*time.Hour))
	if p, _ := pz.get(); !p.Since.Equal(t0.Add(3*time.Hour)) || p.Now {
		t.Fatalf("a new pause %+v, want since its time, without Now", p)
	}
}

// The freeze clock adds up a session's freezes, starts afresh for another
// session, and the session timeout left does not count them.
func TestFreezeClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var f freeze
	f.froze("s1", 3, t0)
	if !f.frozen || f.procs != 3 {
		t.Fatalf("frozen %v procs %d", f.frozen, f.procs)
	}
	if got := f.thawed(t0.Add(time.Minute)); got != time.Minute || f.frozen || f.procs != 0 {
		t.Fatalf("thawed: total %v, frozen %v, procs %d", got, f.frozen, f.procs)
	}
	f.froze("s1", 2, t0.Add(2*time.Minute))
	if got := f.thawed(t0.Add(4 * time.Minute)); got != 3*time.Minute {
		t.Fatalf("second freeze: total %v, want 3m", got)
	}
	// Started at t0 with a 10m timeout, frozen 3m in all: at t0+5m, 8m left.
	if got := f.timeoutLeft(t0, 10*time.Minute, t0.Add(5*time.Minute)); got != 8*time.Minute {
		t.Errorf("timeout left %v, want 8m", got)
	}
	if got := f.timeoutLeft(t0, 10*time.Minute, t0.Add(time.Hour)); got != 0 {
		t.Errorf("timeout left long after %v, want 0", got)
	}
	f.froze("s2", 1, t0.Add(10*time.Minute))
	if got := f.thawed(t0.Add(11 * time.Minute)); got != time.Minute {
		t.Errorf("another session's freeze: total %v, want 1m", got)
	}
}
