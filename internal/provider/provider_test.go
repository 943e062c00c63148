package provider

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func mustChange(t *testing.T, c *Change, from, to State) {
	t.Helper()
	if c == nil || c.From != from || c.To != to {
		t.Fatalf("change %+v, want %v -> %v", c, from, to)
	}
}

// TestRateLimitHoldsEveryAgent: a 429 with a known reset holds every agent
// until it, with one change; a later reset extends the hold without
// another; at the reset the first agent to ask makes it healthy again.
func TestRateLimitHoldsEveryAgent(t *testing.T) {
	h := New(Backoff{})
	reset := t0.Add(20 * time.Second)
	mustChange(t, h.Report(Report{Outcome: RateLimit, Reset: reset, Cause: "429", Agent: "alice"}, t0), Healthy, RateLimited)
	for _, a := range []string{"alice", "bob"} {
		adm, c := h.Admit(a, t0.Add(time.Second))
		if adm.OK || !adm.Until.Equal(reset) || c != nil || adm.Reason != "rate limited until 10:00:20Z (429)" {
			t.Fatalf("%s: %+v %+v", a, adm, c)
		}
	}
	if c := h.Report(Report{Outcome: RateLimit, Reset: reset.Add(5 * time.Second), Agent: "bob"}, t0.Add(2*time.Second)); c != nil {
		t.Fatalf("extension reported %+v", c)
	}
	// Neither does an answer to a session that started before it.
	if c := h.Report(Report{Outcome: OK, Agent: "bob"}, t0.Add(2*time.Second)); c != nil || h.State() != RateLimited {
		t.Fatalf("an answer lifted the hold: %+v", c)
	}
	// Failures of sessions that ran into the limit change nothing.
	if c := h.Report(Report{Outcome: Failure, Agent: "bob"}, t0.Add(3*time.Second)); c != nil {
		t.Fatalf("%+v", c)
	}
	if adm, _ := h.Admit("bob", reset); adm.OK {
		t.Fatal("admitted before the extended reset")
	}
	adm, c := h.Admit("bob", reset.Add(5*time.Second))
	if !adm.OK || adm.Probe {
		t.Fatalf("%+v", adm)
	}
	mustChange(t, c, RateLimited, Healthy)
	if adm, c := h.Admit("alice", reset.Add(5*time.Second)); !adm.OK || c != nil {
		t.Fatalf("%+v %+v", adm, c)
	}
	// A reset already past holds no one.
	if c := h.Report(Report{Outcome: RateLimit, Reset: t0}, t0.Add(time.Minute)); c != nil {
		t.Fatalf("%+v", c)
	}
}

// TestBreaker: a server error opens the breaker for 2 s; then one agent
// probes while the others wait for its end; each failed probe doubles the
// backoff up to the maximum; an answer closes it and resets the backoff.
func TestBreaker(t *testing.T) {
	h := New(Backoff{Base: 2 * time.Second, Max: 10 * time.Second})
	now := t0
	mustChange(t, h.Report(Report{Outcome: Failure, Cause: "API error 500", Agent: "alice"}, now), Healthy, Down)
	// bob's session, started before, fails too: still one opening.
	if c := h.Report(Report{Outcome: Failure, Agent: "bob"}, now); c != nil {
		t.Fatalf("%+v", c)
	}
	var opened []time.Duration
	for i := range 5 {
		adm, _ := h.Admit("bob", now)
		if adm.OK || adm.Until.IsZero() {
			t.Fatalf("round %d: admitted while down: %+v", i, adm)
		}
		opened = append(opened, adm.Until.Sub(now))
		now = adm.Until
		adm, c := h.Admit("alice", now)
		if !adm.OK || !adm.Probe {
			t.Fatalf("round %d: alice not the probe: %+v", i, adm)
		}
		mustChange(t, c, Down, Probing)
		if adm, _ := h.Admit("bob", now); adm.OK || !adm.Until.IsZero() || adm.Reason != "provider down (API error 500); alice's probe session runs" {
			t.Fatalf("round %d: bob during the probe: %+v", i, adm)
		}
		now = now.Add(time.Second)
		mustChange(t, h.Report(Report{Outcome: Failure, Cause: "API error 500", Agent: "alice", Probe: true}, now), Probing, Down)
	}
	// Each measured from the failure that opened it.
	if want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}; !slices.Equal(opened, want) {
		t.Fatalf("openings %v, want %v", opened, want)
	}
	adm, _ := h.Admit("bob", now)
	if got := adm.Until.Sub(now); got != 10*time.Second {
		t.Fatalf("backoff after 5 failed probes %v, want the 10s cap", got)
	}
	// A probe that never reached the provider hands the probe on at once,
	// with no change to report.
	now = adm.Until
	if adm, _ := h.Admit("alice", now); !adm.Probe {
		t.Fatal(adm)
	}
	if c := h.Report(Report{Outcome: Neutral, Agent: "alice", Probe: true}, now); c != nil {
		t.Fatalf("%+v", c)
	}
	adm, c := h.Admit("bob", now)
	if !adm.Probe {
		t.Fatalf("bob did not get the probe: %+v", adm)
	}
	mustChange(t, c, Down, Probing)
	mustChange(t, h.Report(Report{Outcome: OK, Agent: "bob", Probe: true}, now.Add(time.Second)), Probing, Healthy)
	if adm, _ := h.Admit("alice", now); !adm.OK || adm.Probe {
		t.Fatalf("%+v", adm)
	}
	// Closed: the backoff starts over.
	h.Report(Report{Outcome: Failure, Agent: "alice"}, now)
	if adm, _ := h.Admit("bob", now); adm.Until.Sub(now) != 2*time.Second {
		t.Fatalf("backoff not reset: %+v", adm)
	}
}

// TestUnknownResetOpensBreaker: a 429 whose reset nobody knows is waited
// out like a server error; an answer from a session that started before
// closes the breaker; a known reset while down turns it into a hold.
func TestUnknownResetOpensBreaker(t *testing.T) {
	h := New(Backoff{})
	mustChange(t, h.Report(Report{Outcome: RateLimit, Cause: "429"}, t0), Healthy, Down)
	mustChange(t, h.Report(Report{Outcome: OK, Agent: "bob"}, t0.Add(time.Second)), Down, Healthy)
	h.Report(Report{Outcome: Failure}, t0)
	c := h.Report(Report{Outcome: RateLimit, Reset: t0.Add(time.Minute)}, t0.Add(time.Second))
	mustChange(t, c, Down, RateLimited)
	if !c.Until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("%+v", c)
	}
	if h.State() != RateLimited {
		t.Fatal(h.State())
	}
	h.SetBackoff(Backoff{Base: time.Second, Max: time.Second})
	if h.next != time.Second {
		t.Fatalf("next %v", h.next)
	}
}

// A reset further away than the longest backoff holds the agents until
// then, not until the reset: a session's stream says when the limit ends,
// and code in the session can write it (one line held every agent of the
// provider until the year 5138). A probe then asks the provider.
func TestAResetFarAwayHoldsNoLongerThanTheLongestBackoff(t *testing.T) {
	h := New(Backoff{Base: 2 * time.Second, Max: 5 * time.Minute})
	far := time.Date(5138, 11, 16, 9, 46, 39, 0, time.UTC)
	mustChange(t, h.Report(Report{Outcome: RateLimit, Reset: far, Cause: "429", Agent: "alice"}, t0), Healthy, RateLimited)
	if got, want := h.Until(), t0.Add(5*time.Minute); !got.Equal(want) {
		t.Errorf("held until %v, want %v (the longest backoff)", got, want)
	}
	if adm, _ := h.Admit("bob", t0.Add(5*time.Minute)); !adm.OK {
		t.Errorf("bob still held once the longest backoff passed: %+v", adm)
	}
}
