// Package provider keeps the health of one LLM provider (one API and one
// set of credentials) as all the agents that use it see it: a rate limit
// with a known reset holds every one of them until the reset, and server
// errors, overloads and lost connections open a circuit breaker with its
// own exponential backoff, after which one probe session at a time tests
// whether the provider is back.
//
// It is kept beside each agent's state machine, which stays as it is: the
// runner asks Admit before it builds a prompt and waits while the answer
// is no, and reports how each session went. Health is a pure state
// machine: no I/O, no clock (time is passed in), no locking.
package provider

import (
	"strconv"
	"time"
)

// State is a provider's health.
type State uint8

// States.
const (
	Healthy     State = iota // sessions start as they will
	RateLimited              // a 429 with a known reset: every agent waits until it
	Down                     // the breaker is open: every agent waits out the backoff
	Probing                  // one probe session runs; the others wait for its end
)

func (s State) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case RateLimited:
		return "rate_limited"
	case Down:
		return "down"
	case Probing:
		return "probing"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Outcome is what a session (or a running session's stream) showed of the
// provider.
type Outcome uint8

// Outcomes.
const (
	// Neutral: the session showed nothing about the provider (it never
	// reached it, or was stopped before an answer).
	Neutral Outcome = iota
	// OK: the provider answered.
	OK
	// RateLimit: the provider refused for a rate limit; Report.Reset is
	// its reset when known.
	RateLimit
	// Failure: a server error (5xx), an overload or a lost connection.
	Failure
)

// Report is one piece of evidence about the provider.
type Report struct {
	Outcome Outcome
	Reset   time.Time // RateLimit: the provider's reset, zero when unknown
	Cause   string    // for people: "API error 500 Internal Server Error"
	Agent   string
	// Probe: the session was the probe that Admit granted; its end decides
	// whether the breaker closes.
	Probe bool
}

// Backoff is the breaker's: Base for the first opening, doubling at each
// failed probe up to Max.
type Backoff struct{ Base, Max time.Duration }

// DefaultBackoff is 2 s doubling to 5 min.
var DefaultBackoff = Backoff{Base: 2 * time.Second, Max: 5 * time.Minute}

// Admission is Admit's answer.
type Admission struct {
	OK    bool
	Probe bool // the session is the probe: report its end with Probe set
	// Until is when to ask again; zero means when the probe ends (a Report
	// comes).
	Until  time.Time
	Reason string // why not, for status: "rate limited until 12:00:05 (429 ...)"
}

// Change is a change of state, for the event log: one per change, however
// many agents use the provider.
type Change struct {
	From, To State
	Until    time.Time // RateLimited and Down: until when
	Cause    string
	Agent    string // whose session showed it, or the probing agent
}

// Health is one provider's health. The zero value is not ready: use New.
type Health struct {
	backoff Backoff
	state   State
	until   time.Time
	next    time.Duration // the length of the next opening of the breaker
	cause   string
	prober  string
}

// New returns a healthy provider whose breaker backs off by b (zero fields
// take DefaultBackoff's).
func New(b Backoff) *Health {
	if b.Base <= 0 {
		b.Base = DefaultBackoff.Base
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	b.Max = max(b.Max, b.Base)
	return &Health{backoff: b, next: b.Base}
}

// SetBackoff changes the breaker's backoff from its next opening.
func (h *Health) SetBackoff(b Backoff) {
	n := New(b)
	h.backoff = n.backoff
	h.next = min(max(h.next, h.backoff.Base), h.backoff.Max)
}

// State is the current state, as of the last Admit or Report.
func (h *Health) State() State { return h.state }

// Until is when a rate limit or the breaker's backoff ends (zero when
// neither holds), as of the last Admit or Report.
func (h *Health) Until() time.Time {
	if h.state == RateLimited || h.state == Down {
		return h.until
	}
	return time.Time{}
}

// Prober is the agent whose session tests the provider while it is
// Probing, else "".
func (h *Health) Prober() string {
	if h.state == Probing {
		return h.prober
	}
	return ""
}

// Admit says whether agent may start a session at now. A hold whose time
// is up ends here: a rate limit's reset makes the provider healthy, the
// end of a backoff makes agent the probe.
func (h *Health) Admit(agent string, now time.Time) (Admission, *Change) {
	switch h.state {
	case RateLimited:
		if now.Before(h.until) {
			return Admission{Until: h.until, Reason: "rate limited until " + clock(h.until) + " (" + h.cause + ")"}, nil
		}
		return Admission{OK: true}, h.set(Healthy, time.Time{}, "the rate limit's reset has passed", agent)
	case Down:
		if now.Before(h.until) {
			return Admission{Until: h.until, Reason: "provider down (" + h.cause + "); next probe at " + clock(h.until)}, nil
		}
		h.prober = agent
		return Admission{OK: true, Probe: true}, h.set(Probing, time.Time{}, h.cause, agent)
	case Probing:
		return Admission{Reason: "provider down (" + h.cause + "); " + h.prober + "'s probe session runs"}, nil
	}
	return Admission{OK: true}, nil
}

// Report takes a piece of evidence at now and returns the change it made,
// if any.
func (h *Health) Report(r Report, now time.Time) *Change {
	if r.Outcome == RateLimit && h.backoff.Max > 0 && r.Reset.After(now.Add(h.backoff.Max)) {
		// The reset comes from a session's stream, which code in the session
		// can write: one line held every agent of the provider until the
		// year 5138. No reset holds them longer than the longest backoff;
		// then they start again (each runner still waits out the reset its
		// own sessions saw), and a session that meets the limit reports it.
		r.Reset = now.Add(h.backoff.Max)
	}
	if r.Outcome == RateLimit && !r.Reset.After(now) {
		if !r.Reset.IsZero() {
			return nil // a reset already past holds no one
		}
		// No known reset: wait as for a server error rather than hammer it.
		r.Outcome = Failure
	}
	if r.Probe && h.state == Probing {
		return h.probeEnded(r, now)
	}
	switch r.Outcome {
	case OK:
		// A known reset is the provider's word: an answer to a request sent
		// before the limit does not lift it.
		if h.state != Healthy && h.state != RateLimited {
			h.next = h.backoff.Base
			return h.set(Healthy, time.Time{}, "the provider answered", r.Agent)
		}
	case RateLimit:
		if h.state == RateLimited {
			if r.Reset.After(h.until) {
				h.until = r.Reset // a later reset: the same hold, longer
			}
			return nil
		}
		if h.state != Probing {
			return h.set(RateLimited, r.Reset, r.Cause, r.Agent)
		}
	case Failure:
		if h.state == Healthy {
			return h.open(now, r.Cause, r.Agent)
		}
	}
	return nil // sessions that started before a hold say nothing new
}

// probeEnded decides on the probe: an answer closes the breaker, a
// failure opens it for twice as long, and a probe that never tested the
// provider gives the next agent the probe at once.
func (h *Health) probeEnded(r Report, now time.Time) *Change {
	h.prober = ""
	switch r.Outcome {
	case OK:
		h.next = h.backoff.Base
		return h.set(Healthy, time.Time{}, "the probe session got an answer", r.Agent)
	case RateLimit:
		return h.set(RateLimited, r.Reset, r.Cause, r.Agent)
	case Failure:
		return h.open(now, r.Cause, r.Agent)
	}
	h.state, h.until = Down, now // no event: the provider's health is as unknown as before
	return nil
}

func (h *Health) open(now time.Time, cause, agent string) *Change {
	d := h.next
	h.next = min(2*h.next, h.backoff.Max)
	return h.set(Down, now.Add(d), cause, agent)
}

func (h *Health) set(to State, until time.Time, cause, agent string) *Change {
	c := &Change{From: h.state, To: to, Until: until, Cause: cause, Agent: agent}
	h.state, h.until = to, until
	if to != Healthy && to != Probing {
		h.cause = cause
	}
	return c
}

// clock is a time as status shows it: to the second, UTC.
func clock(t time.Time) string { return t.UTC().Format("15:04:05Z") }
