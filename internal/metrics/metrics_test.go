package metrics

import (
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/runner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// families is one parsed scrape.
type families map[string]*dto.MetricFamily

// server serves m's handler over real HTTP for the duration of the test.
func server(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func fetch(tb testing.TB, client *http.Client, url string) []byte {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("read scrape: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("scrape: status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		tb.Fatalf("scrape: content type %q, want text/plain", ct)
	}
	return body
}

func scrape(t *testing.T, url string) families {
	t.Helper()
	body := fetch(t, http.DefaultClient, url)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, body)
	}
	return fams
}

// matches reports whether m carries every name=value pair in kv.
func matches(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == kv[i] && lp.GetValue() == kv[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// all returns the series of family name carrying the label pairs kv.
func (f families) all(name string, kv ...string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range f[name].GetMetric() {
		if matches(m, kv) {
			out = append(out, m)
		}
	}
	return out
}

// one returns the single series of family name carrying kv.
func (f families) one(t *testing.T, name string, kv ...string) *dto.Metric {
	t.Helper()
	ms := f.all(name, kv...)
	if len(ms) != 1 {
		t.Fatalf("%s%v: %d series, want 1", name, kv, len(ms))
	}
	return ms[0]
}

// value is the value of a gauge or counter series.
func (f families) value(t *testing.T, name string, kv ...string) float64 {
	t.Helper()
	m := f.one(t, name, kv...)
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	t.Fatalf("%s%v: not a gauge or counter", name, kv)
	return 0
}

func (f families) want(t *testing.T, want float64, name string, kv ...string) {
	t.Helper()
	if got := f.value(t, name, kv...); got != want {
		t.Errorf("%s%v = %v, want %v", name, kv, got, want)
	}
}

// state checks that the agent has exactly the eight state series, one-hot,
// and returns the one at 1.
func (f families) state(t *testing.T, agentName string) string {
	t.Helper()
	ms := f.all("swarmd_agent_state", "agent", agentName)
	if len(ms) != len(agent.AllStates) {
		t.Fatalf("agent %s: %d state series, want %d", agentName, len(ms), len(agent.AllStates))
	}
	cur := ""
	seen := map[string]bool{}
	for _, m := range ms {
		var name string
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "state" {
				name = lp.GetValue()
			}
		}
		if _, err := agent.ParseStateKind(name); err != nil {
			t.Fatalf("agent %s: state label: %v", agentName, err)
		}
		seen[name] = true
		switch v := m.GetGauge().GetValue(); v {
		case 0:
		case 1:
			if cur != "" {
				t.Fatalf("agent %s: both %s and %s are 1", agentName, cur, name)
			}
			cur = name
		default:
			t.Fatalf("agent %s: state %s = %v", agentName, name, v)
		}
	}
	if len(seen) != len(agent.AllStates) || cur == "" {
		t.Fatalf("agent %s: states %v, current %q: want all eight, one at 1", agentName, seen, cur)
	}
	return cur
}

// hasAgent reports whether any series of any family carries agent=name.
func (f families) hasAgent(name string) []string {
	var where []string
	for fam, mf := range f {
		for _, m := range mf.GetMetric() {
			if matches(m, []string{"agent", name}) {
				where = append(where, fam)
				break
			}
		}
	}
	return where
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// tr builds a transition of agent a by hand.
func tr(a string, from agent.StateKind, ev agent.Event, to agent.StateKind, eff agent.EffectKind, seq, cons, total uint32) runner.Transition {
	return runner.Transition{
		Agent: a, At: t0, From: agent.State{Kind: from}, Event: ev, To: agent.State{Kind: to},
		Effect: agent.SideEffect{Kind: eff}, Actor: "runner", Seq: seq,
		ConsecutiveErrors: cons, TotalErrors: total,
	}
}

// machineTransitions feeds evs to a real state machine and returns the
// transitions it made, failing on one the machine refuses.
func machineTransitions(t *testing.T, a string, evs ...agent.Event) []runner.Transition {
	t.Helper()
	mc := agent.New(agent.Thresholds{})
	out := make([]runner.Transition, 0, len(evs))
	for _, ev := range evs {
		from := mc.State()
		eff, err := mc.Handle(ev, t0)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		out = append(out, runner.Transition{Agent: a, At: t0, From: from, Event: ev, To: mc.State(), Effect: eff, Actor: "runner",
			ConsecutiveErrors: mc.ConsecutiveErrors(), TotalErrors: mc.TotalErrors()})
	}
	return out
}

func TestAddAgentShowsEveryAgentAtStart(t *testing.T) {
	m := New(BuildInfo{Version: "v1.2.3", Commit: "abc123", GoVersion: "go1.26.8"})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	m.AddAgent(runner.Snapshot{Agent: "bob"})

	f := scrape(t, url)
	for _, a := range []string{"alice", "bob"} {
		if got := f.state(t, a); got != "Initializing" {
			t.Errorf("agent %s state %s, want Initializing", a, got)
		}
		f.want(t, 0, "swarmd_agent_session_seq", "agent", a)
		f.want(t, 0, "swarmd_agent_consecutive_errors", "agent", a)
		f.want(t, 0, "swarmd_agent_total_errors", "agent", a)
		f.want(t, 0, "swarmd_mailbox_pending", "agent", a)
		f.want(t, 0, "swarmd_interrupts_total", "agent", a)
		f.want(t, 0, "swarmd_force_stops_total", "agent", a)
		f.want(t, 0, "swarmd_agent_paused", "agent", a)
		for _, o := range []string{"success", "error", "timeout", "interrupted", "max_turns", "permission_denied", "budget_exhausted"} {
			f.want(t, 0, "swarmd_sessions_total", "agent", a, "outcome", o)
		}
	}
	f.want(t, 1, "swarmd_build_info", "version", "v1.2.3", "commit", "abc123", "goversion", "go1.26.8")
	f.want(t, 0, "swarmd_mailbox_messages_total", "urgency", "normal")
	f.want(t, 0, "swarmd_mailbox_messages_total", "urgency", "urgent")
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if f[name] == nil {
			t.Errorf("collector metric %s missing", name)
		}
	}
}

func TestStateFollowsTransitions(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	m.AddAgent(runner.Snapshot{Agent: "bob"})

	steps := []struct {
		t    runner.Transition
		want string
	}{
		{tr("alice", agent.Initializing, agent.EvWorktreeReady(), agent.BuildingPrompt, agent.NoEffect, 1, 0, 0), "BuildingPrompt"},
		{tr("alice", agent.BuildingPrompt, agent.EvPromptReady("p"), agent.Spawning, agent.StorePrompt, 1, 0, 0), "Spawning"},
		{tr("alice", agent.Spawning, agent.EvSessionStarted(1), agent.Running, agent.NoEffect, 1, 0, 0), "Running"},
		{tr("alice", agent.Running, agent.EvSessionExited(agent.ExitOutcome{Kind: agent.Error, Msg: "x"}), agent.SessionComplete, agent.IncrementSession, 2, 1, 1), "SessionComplete"},
		{tr("alice", agent.SessionComplete, agent.EvWorktreeReady(), agent.CoolingDown, agent.NoEffect, 2, 1, 1), "CoolingDown"},
	}
	for _, s := range steps {
		m.OnTransition(s.t)
		f := scrape(t, url)
		if got := f.state(t, "alice"); got != s.want {
			t.Fatalf("after %v: state %s, want %s", s.t.Event, got, s.want)
		}
		if got := f.state(t, "bob"); got != "Initializing" {
			t.Fatalf("after alice's %v: bob is %s", s.t.Event, got)
		}
	}
	f := scrape(t, url)
	f.want(t, 2, "swarmd_agent_session_seq", "agent", "alice")
	f.want(t, 1, "swarmd_agent_consecutive_errors", "agent", "alice")
	f.want(t, 1, "swarmd_agent_total_errors", "agent", "alice")

	// A success resets consecutive errors; total stays.
	m.OnTransition(tr("alice", agent.CoolingDown, agent.EvBackoffElapsed(), agent.BuildingPrompt, agent.NoEffect, 2, 1, 1))
	m.OnTransition(tr("alice", agent.Running, agent.EvSessionExited(agent.ExitOutcome{}), agent.SessionComplete, agent.IncrementSession, 3, 0, 1))
	m.OnTransition(tr("alice", agent.SessionComplete, agent.EvOperatorStop(), agent.Stopped, agent.NoEffect, 3, 0, 1))
	f = scrape(t, url)
	if got := f.state(t, "alice"); got != "Stopped" {
		t.Errorf("state %s, want Stopped", got)
	}
	f.want(t, 3, "swarmd_agent_session_seq", "agent", "alice")
	f.want(t, 0, "swarmd_agent_consecutive_errors", "agent", "alice")
	f.want(t, 1, "swarmd_agent_total_errors", "agent", "alice")
	f.want(t, 0, "swarmd_agent_session_seq", "agent", "bob")

	// A new runner for a known agent (swarmd start) starts where its
	// snapshot says: Initializing, its seq continued, its errors reset;
	// the counts of its sessions stay.
	m.OnSessionEnd(runner.SessionRecord{Agent: "alice", Outcome: agent.ExitOutcome{Kind: agent.Error}})
	m.AddAgent(runner.Snapshot{Agent: "alice", Seq: 4})
	f = scrape(t, url)
	if got := f.state(t, "alice"); got != "Initializing" {
		t.Errorf("after re-add: state %s, want Initializing", got)
	}
	f.want(t, 4, "swarmd_agent_session_seq", "agent", "alice")
	f.want(t, 0, "swarmd_agent_total_errors", "agent", "alice")
	f.want(t, 1, "swarmd_sessions_total", "agent", "alice", "outcome", "error")
}

// TestAddAgentRestoredStopped: an agent a restart restored Stopped (its
// errors stopped it before) makes no transition; its series show the
// runner's snapshot from the start, as swarmd status does, not
// Initializing with no errors.
func TestAddAgentRestoredStopped(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice", State: agent.State{Kind: agent.Stopped}, Seq: 21, TotalErrors: 20})
	f := scrape(t, url)
	if got := f.state(t, "alice"); got != "Stopped" {
		t.Errorf("state %s, want Stopped", got)
	}
	f.want(t, 21, "swarmd_agent_session_seq", "agent", "alice")
	f.want(t, 20, "swarmd_agent_total_errors", "agent", "alice")
	f.want(t, 0, "swarmd_agent_consecutive_errors", "agent", "alice")
}

func TestEventForUnknownAgentCreatesItsSeries(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.OnTransition(tr("carol", agent.Initializing, agent.EvWorktreeReady(), agent.BuildingPrompt, agent.NoEffect, 1, 0, 0))
	f := scrape(t, url)
	if got := f.state(t, "carol"); got != "BuildingPrompt" {
		t.Errorf("state %s, want BuildingPrompt", got)
	}
	f.want(t, 1, "swarmd_agent_session_seq", "agent", "carol")
}

func TestSessionsByOutcome(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	m.AddAgent(runner.Snapshot{Agent: "bob"})

	rec := func(a string, k agent.OutcomeKind, d time.Duration, stopped bool) runner.SessionRecord {
		return runner.SessionRecord{
			Agent: a, Outcome: agent.ExitOutcome{Kind: k},
			Result:  backend.Result{Started: t0, Ended: t0.Add(d)},
			Stopped: stopped,
		}
	}
	m.OnSessionEnd(rec("alice", agent.Success, 90*time.Second, false))
	m.OnSessionEnd(rec("alice", agent.Success, 30*time.Second, false))
	m.OnSessionEnd(rec("alice", agent.Error, 2*time.Second, false))
	m.OnSessionEnd(rec("alice", agent.Error, 4*time.Second, true)) // ended by the stop: still an error
	m.OnSessionEnd(rec("alice", agent.Timeout, 2*time.Hour, false))
	m.OnSessionEnd(runner.SessionRecord{Agent: "alice", Outcome: agent.ExitOutcome{Kind: agent.Error}}) // no times: counted, not timed
	// Interrupted by urgent mail: its own outcome, not an error.
	m.OnSessionEnd(runner.SessionRecord{Agent: "alice", Outcome: agent.ExitOutcome{Kind: agent.Error}, Interrupted: true})
	m.OnSessionEnd(runner.SessionRecord{Agent: "alice", Outcome: agent.ExitOutcome{Kind: agent.Timeout}, Interrupted: true})

	f := scrape(t, url)
	f.want(t, 2, "swarmd_sessions_total", "agent", "alice", "outcome", "success")
	f.want(t, 3, "swarmd_sessions_total", "agent", "alice", "outcome", "error")
	f.want(t, 1, "swarmd_sessions_total", "agent", "alice", "outcome", "timeout")
	f.want(t, 2, "swarmd_sessions_total", "agent", "alice", "outcome", "interrupted")
	f.want(t, 0, "swarmd_sessions_total", "agent", "bob", "outcome", "success")

	h := f.one(t, "swarmd_session_duration_seconds", "agent", "alice").GetHistogram()
	if h.GetSampleCount() != 5 || h.GetSampleSum() != 90+30+2+4+7200 {
		t.Errorf("duration count %d sum %v, want 5 and 7326", h.GetSampleCount(), h.GetSampleSum())
	}
	wantLE := map[float64]uint64{1: 0, 5: 2, 30: 3, 60: 3, 120: 4, 3600: 4, 7200: 5}
	for _, b := range h.GetBucket() {
		if want, ok := wantLE[b.GetUpperBound()]; ok && b.GetCumulativeCount() != want {
			t.Errorf("duration bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if got := f.one(t, "swarmd_session_duration_seconds", "agent", "bob").GetHistogram().GetSampleCount(); got != 0 {
		t.Errorf("bob duration count %d, want 0", got)
	}
}

func TestInterruptsAndLatency(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice"})

	urgent := tr("alice", agent.Running, agent.EvUrgentMessage(), agent.Interrupting, agent.CancelSession, 1, 0, 0)
	urgent.UrgentCommitted = t0.Add(-250 * time.Millisecond)
	m.OnTransition(urgent)
	// Without a commit time there is an interrupt but no latency sample.
	m.OnTransition(tr("alice", agent.Running, agent.EvUrgentMessage(), agent.Interrupting, agent.CancelSession, 2, 0, 0))
	// A commit time after the signal (another clock) is clamped to zero.
	skewed := tr("alice", agent.Running, agent.EvUrgentMessage(), agent.Interrupting, agent.CancelSession, 3, 0, 0)
	skewed.UrgentCommitted = t0.Add(time.Second)
	m.OnTransition(skewed)
	m.ObserveInterruptLatency(2 * time.Millisecond)
	// Other events are not interrupts.
	m.OnTransition(tr("alice", agent.Interrupting, agent.EvSessionExited(agent.ExitOutcome{}), agent.SessionComplete, agent.IncrementSession, 4, 0, 0))

	f := scrape(t, url)
	f.want(t, 3, "swarmd_interrupts_total", "agent", "alice")
	h := f.one(t, "swarmd_interrupt_latency_seconds").GetHistogram()
	if h.GetSampleCount() != 3 || math.Abs(h.GetSampleSum()-0.252) > 1e-12 {
		t.Errorf("latency count %d sum %v, want 3 and 0.252", h.GetSampleCount(), h.GetSampleSum())
	}
	wantLE := map[float64]uint64{0.0001: 1, 0.001: 1, 0.0025: 2, 0.1: 2, 0.25: 3, 10: 3}
	seen := 0
	for _, b := range h.GetBucket() {
		if want, ok := wantLE[b.GetUpperBound()]; ok {
			seen++
			if b.GetCumulativeCount() != want {
				t.Errorf("latency bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
			}
		}
	}
	if seen != len(wantLE) {
		t.Errorf("latency buckets: found %d of %v", seen, wantLE)
	}
}

func TestForceStops(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	m.AddAgent(runner.Snapshot{Agent: "bob"})

	// The transitions a real machine makes: an interrupted session that
	// outlives its grace period (GraceExceeded, ForceStopSession), then an
	// operator stop of the next one (a cancel, no force stop).
	for _, x := range machineTransitions(t, "alice", agent.EvWorktreeReady(), agent.EvPromptReady("p"), agent.EvSessionStarted(1),
		agent.EvUrgentMessage(), agent.EvGraceExceeded(), agent.EvPromptReady("p"), agent.EvSessionStarted(1), agent.EvOperatorStop()) {
		m.OnTransition(x)
	}
	// The SIGKILLed session's record is not a second count.
	m.OnSessionEnd(runner.SessionRecord{Agent: "alice", Outcome: agent.ExitOutcome{Kind: agent.Error},
		Result: backend.Result{Signal: "SIGKILL"}, Stopped: true})
	// A session the runner killed after its timeout's grace period counts.
	m.OnSessionEnd(runner.SessionRecord{Agent: "alice", Outcome: agent.ExitOutcome{Kind: agent.Timeout},
		Result: backend.Result{Signal: "SIGKILL"}, ForceStopped: true})

	f := scrape(t, url)
	f.want(t, 2, "swarmd_force_stops_total", "agent", "alice")
	f.want(t, 0, "swarmd_force_stops_total", "agent", "bob")
}

func TestMailbox(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	m.AddAgent(runner.Snapshot{Agent: "bob"})
	m.AddAgent(runner.Snapshot{Agent: "carol"})

	m.MailSent(false, 3)
	m.MailSent(true, 1)
	m.MailSent(true, 2)
	m.MailSent(false, 0)
	m.MailSent(true, -1)

	m.SetPending(map[string]int{"alice": 4, "bob": 2, "mallory": 9})
	f := scrape(t, url)
	f.want(t, 3, "swarmd_mailbox_messages_total", "urgency", "normal")
	f.want(t, 3, "swarmd_mailbox_messages_total", "urgency", "urgent")
	f.want(t, 4, "swarmd_mailbox_pending", "agent", "alice")
	f.want(t, 2, "swarmd_mailbox_pending", "agent", "bob")
	f.want(t, 0, "swarmd_mailbox_pending", "agent", "carol")
	if ms := f.all("swarmd_mailbox_pending", "agent", "mallory"); len(ms) != 0 {
		t.Errorf("pending for an unknown recipient is exported")
	}

	m.SetPending(map[string]int{"alice": 1})
	f = scrape(t, url)
	f.want(t, 1, "swarmd_mailbox_pending", "agent", "alice")
	f.want(t, 0, "swarmd_mailbox_pending", "agent", "bob")
	f.want(t, 0, "swarmd_mailbox_pending", "agent", "carol")

	m.SetPending(nil)
	f = scrape(t, url)
	f.want(t, 0, "swarmd_mailbox_pending", "agent", "alice")
}

func TestHookRuns(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.HookRun("session_end", "ok")
	m.HookRun("session_end", "ok")
	m.HookRun("session_end", "error")
	m.HookRun("agent_start", "timeout")
	f := scrape(t, url)
	f.want(t, 2, "swarmd_hook_runs_total", "event", "session_end", "result", "ok")
	f.want(t, 1, "swarmd_hook_runs_total", "event", "session_end", "result", "error")
	f.want(t, 1, "swarmd_hook_runs_total", "event", "agent_start", "result", "timeout")
	if n := len(f.all("swarmd_hook_runs_total")); n != 3 {
		t.Errorf("%d hook series, want 3", n)
	}
}

func TestUsage(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddTokens("alice", "input", 1000)
	m.AddTokens("alice", "input", 500)
	m.AddTokens("alice", "output", 70)
	m.AddTokens("alice", "output", -5) // a counter would panic
	m.AddCost("alice", "claude", 0.25)
	m.AddCost("alice", "claude", 0.5)
	m.AddCost("alice", "claude", -1)
	m.AddToolCalls("alice", 4)
	m.AddToolCalls("alice", -4)
	f := scrape(t, url)
	f.want(t, 1500, "swarmd_tokens_total", "agent", "alice", "kind", "input")
	f.want(t, 70, "swarmd_tokens_total", "agent", "alice", "kind", "output")
	f.want(t, 0.75, "swarmd_cost_usd_total", "agent", "alice", "backend", "claude")
	f.want(t, 4, "swarmd_tool_calls_total", "agent", "alice")
}

func TestRemoveAgentDeletesItsSeries(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	for _, a := range []string{"alice", "bob"} {
		m.AddAgent(runner.Snapshot{Agent: a})
		m.OnTransition(tr(a, agent.Interrupting, agent.EvGraceExceeded(), agent.SessionComplete, agent.ForceStopSession, 1, 1, 1))
		m.OnSessionEnd(runner.SessionRecord{Agent: a, Result: backend.Result{Started: t0, Ended: t0.Add(time.Minute)}})
		m.AddTokens(a, "input", 10)
		m.AddCost(a, "claude", 1)
		m.AddToolCalls(a, 1)
	}
	m.SetPending(map[string]int{"alice": 1, "bob": 1})

	before := scrape(t, url).hasAgent("alice")
	if len(before) != 14 {
		t.Fatalf("alice appears in %d families before removal, want all 14: %v", len(before), before)
	}
	m.RemoveAgent("alice")
	f := scrape(t, url)
	if where := f.hasAgent("alice"); len(where) != 0 {
		t.Errorf("alice still in %v after RemoveAgent", where)
	}
	if where := f.hasAgent("bob"); len(where) != 14 {
		t.Errorf("bob in %d families after alice's removal, want 14: %v", len(where), where)
	}
	if got := f.state(t, "bob"); got != "SessionComplete" {
		t.Errorf("bob state %s", got)
	}

	// SetPending after removal does not bring the agent back.
	m.SetPending(map[string]int{"alice": 3})
	if where := scrape(t, url).hasAgent("alice"); len(where) != 0 {
		t.Errorf("alice back in %v after SetPending", where)
	}
}

// TestConcurrentAgents drives many agents at once while scraping, adding and
// removing others: the race detector checks the locking, and each agent must
// end one-hot in its last state.
func TestConcurrentAgents(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	const agents, rounds = 8, 200
	cycle := []agent.StateKind{agent.BuildingPrompt, agent.Spawning, agent.Running, agent.Interrupting, agent.SessionComplete, agent.CoolingDown}

	var wg sync.WaitGroup
	for i := range agents {
		name := fmt.Sprintf("agent-%d", i)
		m.AddAgent(runner.Snapshot{Agent: name})
		wg.Go(func() {
			from := agent.Initializing
			for r := range rounds {
				for _, to := range cycle {
					ev := agent.EvWorktreeReady()
					if to == agent.Interrupting {
						ev = agent.EvUrgentMessage()
					}
					m.OnTransition(tr(name, from, ev, to, agent.NoEffect, uint32(r), 0, 0))
					from = to
				}
				m.OnSessionEnd(runner.SessionRecord{Agent: name})
			}
			m.OnTransition(tr(name, from, agent.EvOperatorStop(), agent.Stopped, agent.NoEffect, rounds, 0, 0))
		})
	}
	done := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			m.AddAgent(runner.Snapshot{Agent: "churn"})
			m.SetPending(map[string]int{"agent-0": i})
			m.RemoveAgent("churn")
		}
	})
	for range 5 {
		fetch(t, http.DefaultClient, url)
	}
	close(done)
	wg.Wait()

	f := scrape(t, url)
	for i := range agents {
		name := fmt.Sprintf("agent-%d", i)
		if got := f.state(t, name); got != "Stopped" {
			t.Errorf("%s state %s, want Stopped", name, got)
		}
		f.want(t, rounds, "swarmd_interrupts_total", "agent", name)
		f.want(t, rounds, "swarmd_sessions_total", "agent", name, "outcome", "success")
		f.want(t, rounds, "swarmd_agent_session_seq", "agent", name)
	}
	if where := f.hasAgent("churn"); len(where) != 0 {
		t.Errorf("removed agent still in %v", where)
	}
}

func TestIdleGauge(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	m.OnIdle("alice", true, t0)
	scrape(t, url).want(t, 1, "swarmd_agent_idle", "agent", "alice")
	m.OnIdle("alice", false, t0)
	scrape(t, url).want(t, 0, "swarmd_agent_idle", "agent", "alice")
}

// The store's writer counters are read at each scrape, in seconds.
func TestStoreWriter(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	var turns atomic.Int64
	m.StoreWriter(func() (int64, time.Duration, time.Duration) {
		n := turns.Load()
		return n, time.Duration(n) * 250 * time.Millisecond, time.Duration(n) * 2 * time.Second
	})
	turns.Store(4)
	f := scrape(t, url)
	f.want(t, 4, "swarmd_store_writes_total")
	f.want(t, 1, "swarmd_store_writer_busy_seconds_total")
	f.want(t, 8, "swarmd_store_writer_wait_seconds_total")
	turns.Store(6)
	scrape(t, url).want(t, 1.5, "swarmd_store_writer_busy_seconds_total")
}

func TestPausedGauge(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	scrape(t, url).want(t, 0, "swarmd_agent_paused", "agent", "alice")
	m.SetPaused("alice", true)
	scrape(t, url).want(t, 1, "swarmd_agent_paused", "agent", "alice")
	m.SetPaused("alice", false)
	scrape(t, url).want(t, 0, "swarmd_agent_paused", "agent", "alice")
}

// TestMaxTurnsOutcome: a session that reached max_turns counts under its
// own outcome, not as an error.
func TestMaxTurnsOutcome(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	m.OnSessionEnd(runner.SessionRecord{Agent: "alice", TurnLimit: true,
		Outcome: agent.ExitOutcome{Kind: agent.Success}, Result: backend.Result{AbortReason: backend.AbortMaxTurns}})
	s := scrape(t, url)
	s.want(t, 1, "swarmd_sessions_total", "agent", "alice", "outcome", "max_turns")
	s.want(t, 0, "swarmd_sessions_total", "agent", "alice", "outcome", "error")
}

// The merge queue reports through its Metrics interface, which these
// methods satisfy.
var _ merge.Metrics = (*Metrics)(nil)

func TestMergeQueue(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	f := scrape(t, url)
	f.want(t, 0, "swarmd_merge_queue_depth")
	for _, r := range []string{"merged", "conflict", "gate_failed", "timeout", "corrupt", "carried", "history", "stale"} {
		f.want(t, 0, "swarmd_merges_total", "result", r) // every result is there from the start
	}

	m.MergeQueueDepth(3)
	m.MergeResult("merged")
	m.MergeResult("merged")
	m.MergeResult("conflict")
	m.MergeResult("timeout")
	m.GateDuration(90 * time.Second)
	m.GateDuration(2 * time.Second)
	m.RunAhead("passed")
	m.RunAhead("dropped")
	m.RunAhead("dropped")
	f = scrape(t, url)
	f.want(t, 1, "swarmd_merge_runs_ahead_total", "result", "passed")
	f.want(t, 0, "swarmd_merge_runs_ahead_total", "result", "failed")
	f.want(t, 2, "swarmd_merge_runs_ahead_total", "result", "dropped")
	f.want(t, 3, "swarmd_merge_queue_depth")
	f.want(t, 2, "swarmd_merges_total", "result", "merged")
	f.want(t, 1, "swarmd_merges_total", "result", "conflict")
	f.want(t, 0, "swarmd_merges_total", "result", "gate_failed")
	f.want(t, 1, "swarmd_merges_total", "result", "timeout")
	h := f.one(t, "swarmd_gate_duration_seconds").GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 92 {
		t.Errorf("gate duration: %d samples, sum %v; want 2, 92", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 60 && b.GetCumulativeCount() != 1 {
			t.Errorf("gate duration bucket le=60: %d, want 1", b.GetCumulativeCount())
		}
	}

	m.MergeQueueDepth(0)
	f = scrape(t, url)
	f.want(t, 0, "swarmd_merge_queue_depth")
}

// TestLimitsOutcomesAndBudget: sessions stopped for a refused tool or an
// exhausted budget count under their own outcomes; the cost is counted by
// backend; the remaining budget is read at each scrape, and goes away with
// the budget.
func TestLimitsOutcomesAndBudget(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	var mu sync.Mutex
	left := map[string]float64{"alice": -0.25, "bob": math.NaN()}
	m.BudgetLeft(func() map[string]float64 { mu.Lock(); defer mu.Unlock(); return maps.Clone(left) })
	m.AddAgent(runner.Snapshot{Agent: "alice"})
	for _, stop := range []string{runner.OutcomePermissionDenied, runner.OutcomeBudgetExhausted} {
		m.OnSessionEnd(runner.SessionRecord{Agent: "alice", StoppedFor: stop, Backend: "gem",
			Outcome: agent.ExitOutcome{Kind: agent.Success}, Result: backend.Result{Usage: backend.Usage{CostUSD: 0.5}}})
	}
	s := scrape(t, url)
	s.want(t, 1, "swarmd_sessions_total", "agent", "alice", "outcome", "permission_denied")
	s.want(t, 1, "swarmd_sessions_total", "agent", "alice", "outcome", "budget_exhausted")
	s.want(t, 0, "swarmd_sessions_total", "agent", "alice", "outcome", "success")
	s.want(t, 1, "swarmd_cost_usd_total", "agent", "alice", "backend", "gem")
	s.want(t, -0.25, "swarmd_budget_remaining_usd", "agent", "alice")
	if n := len(s.all("swarmd_budget_remaining_usd")); n != 1 {
		t.Errorf("%d budget series, want alice's alone (bob's NaN is no value)", n)
	}
	mu.Lock()
	left["alice"] = 0.75 // read again: a window rolled over
	mu.Unlock()
	scrape(t, url).want(t, 0.75, "swarmd_budget_remaining_usd", "agent", "alice")
	mu.Lock()
	delete(left, "alice")
	mu.Unlock()
	if where := scrape(t, url).hasAgent("alice"); slices.Contains(where, "swarmd_budget_remaining_usd") {
		t.Errorf("budget gauge left after its budget went: %v", where)
	}
}

func TestQuarantined(t *testing.T) {
	m := New(BuildInfo{})
	url := server(t, m)
	f := scrape(t, url)
	for _, r := range []string{"moved", "refused"} {
		f.want(t, 0, "swarmd_quarantine_objects_total", "result", r) // there from the start: alert on any refused
	}
	m.Quarantined(3, 0)
	m.Quarantined(2, 1)
	f = scrape(t, url)
	f.want(t, 5, "swarmd_quarantine_objects_total", "result", "moved")
	f.want(t, 1, "swarmd_quarantine_objects_total", "result", "refused")
}

// TestMergeHelpNamesEveryLabelValue: the Help of the merge queue's
// counters names every value their label takes (the operator reads the
// scrape, not the code): each result of swarmd_merges_total, and each
// kind of move the daemon counts in swarmd_merge_target_moves_total.
func TestMergeHelpNamesEveryLabelValue(t *testing.T) {
	m := New(BuildInfo{})
	m.TargetMoved("advanced")
	f := scrape(t, server(t, m))
	help := func(name string) string {
		t.Helper()
		mf := f[name]
		if mf == nil {
			t.Fatalf("no %s", name)
		}
		return mf.GetHelp()
	}
	for _, r := range mergeResults {
		if h := help("swarmd_merges_total"); !strings.Contains(h, r) {
			t.Errorf("swarmd_merges_total's help %q does not name result %s", h, r)
		}
	}
	for _, k := range []string{"advanced", "rewound", "moved", "remote"} {
		if h := help("swarmd_merge_target_moves_total"); !strings.Contains(h, k) {
			t.Errorf("swarmd_merge_target_moves_total's help %q does not name kind %s", h, k)
		}
	}
}
