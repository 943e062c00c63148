package providergate

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/metrics"
	"github.com/swarmd/swarmd/internal/provider"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
)

func TestProviderKey(t *testing.T) {
	claude := config.Backend{Name: "claude", Type: config.TypeClaude, Env: map[string]string{"ANTHROPIC_BASE_URL": "http://x"}}
	alice := config.Agent{Name: "alice"}
	daemonEnv := []string{"ANTHROPIC_API_KEY=sk-secret-1", "HOME=/home/a"}
	k1 := Key(claude, alice, daemonEnv)
	if !strings.HasPrefix(k1, "claude/") || len(k1) != len("claude/")+8 || strings.Contains(k1, "secret") {
		t.Fatalf("key %q", k1)
	}
	if k := Key(claude, config.Agent{Name: "bob"}, daemonEnv); k != k1 {
		t.Errorf("same credentials, different keys: %s %s", k, k1)
	}
	own := config.Agent{Name: "carol", AgentSettings: config.AgentSettings{Env: map[string]string{"ANTHROPIC_API_KEY": "sk-secret-2"}}}
	if k := Key(claude, own, daemonEnv); k == k1 {
		t.Error("an agent with its own key shares the provider")
	}
	// HOME matters only without a key (a login stored under it).
	if Key(claude, alice, []string{"ANTHROPIC_API_KEY=sk-secret-1", "HOME=/home/b"}) != k1 {
		t.Error("HOME changed the key of an API-key provider")
	}
	if Key(claude, alice, []string{"HOME=/a"}) == Key(claude, alice, []string{"HOME=/b"}) {
		t.Error("two logins share a provider")
	}
	if k := Key(config.Backend{Type: config.TypeCommand}, alice, daemonEnv); k != "" {
		t.Errorf("command backend key %q", k)
	}
	gem := config.Backend{Type: config.TypeGemini, Env: map[string]string{}}
	if k := Key(gem, alice, []string{"GEMINI_API_KEY=g"}); !strings.HasPrefix(k, "gemini/") {
		t.Errorf("gemini key %q", k)
	}
}

func TestProviderOutcome(t *testing.T) {
	reset := time.Now().Add(time.Minute)
	for _, c := range []struct {
		res  backend.Result
		ran  bool
		want provider.Outcome
	}{
		{backend.Result{Outcome: backend.OutcomeSuccess}, false, provider.Neutral},
		{backend.Result{Outcome: backend.OutcomeSuccess, ProviderError: "500"}, true, provider.OK},
		{backend.Result{Outcome: backend.OutcomeError, RateLimited: true, RetryAfter: reset}, true, provider.RateLimit},
		{backend.Result{Outcome: backend.OutcomeError, ProviderError: "API error 500", Turns: 1}, true, provider.Failure},
		{backend.Result{Outcome: backend.OutcomeError, Fatal: "authentication failed", Turns: 1}, true, provider.Neutral},
		{backend.Result{Outcome: backend.OutcomeError, Turns: 2}, true, provider.OK},
		{backend.Result{Outcome: backend.OutcomeError}, true, provider.Neutral},
	} {
		if got := outcome(c.res, c.ran); got.Outcome != c.want {
			t.Errorf("%+v ran %v: %v, want %v", c.res, c.ran, got.Outcome, c.want)
		}
	}
}

// TestProviderMetrics: swarmd_provider_up is 0 while a provider is rate
// limited or down and 1 once it answers; retry_after counts down the hold.
func TestProviderMetrics(t *testing.T) {
	cfg := &config.Config{Providers: config.Providers{Backoff: time.Second, MaxBackoff: time.Minute}}
	g := testGates(t, cfg)
	m := metrics.New(metrics.BuildInfo{})
	m.Providers(g.States)
	gate := g.ForAgent("alice", "claude/abc").(*Gate)
	scrape := func() (up, retry float64) { return scrapeOf(scrapeAll(t, m), "claude/abc") }
	if up, retry := scrape(); up != 1 || retry != 0 {
		t.Fatalf("healthy: up %v, retry_after %v", up, retry)
	}
	gate.report(provider.Report{Outcome: provider.RateLimit, Reset: time.Now().Add(20 * time.Second), Cause: "429", Agent: "alice"})
	if up, retry := scrape(); up != 0 || retry < 15 || retry > 20 {
		t.Fatalf("rate limited for 20 s: up %v, retry_after %v", up, retry)
	}
	// A server error opens the breaker of a healthy provider; an answer
	// closes it.
	other := g.ForAgent("bob", "claude/def").(*Gate)
	other.report(provider.Report{Outcome: provider.Failure, Cause: "500", Agent: "bob"})
	if up, retry := scrapeOf(scrapeAll(t, m), "claude/def"); up != 0 || retry <= 0 || retry > 1 {
		t.Fatalf("down: up %v, retry_after %v (backoff 1 s)", up, retry)
	}
	other.report(provider.Report{Outcome: provider.OK, Agent: "bob"})
	if up, retry := scrapeOf(scrapeAll(t, m), "claude/def"); up != 1 || retry != 0 {
		t.Fatalf("after an answer: up %v, retry_after %v", up, retry)
	}
}

// TestProviderMetricsOnlyForUsedProviders: a provider is reported while
// some agent uses it. One left down by its last agent (removed, or given
// another key) is no longer reported nor told of as an outage; a gate
// got for settings a reload may yet refuse (ForKey) reports nothing and
// moves no agent. An agent that takes the key again finds its health.
func TestProviderMetricsOnlyForUsedProviders(t *testing.T) {
	cfg := &config.Config{Providers: config.Providers{Backoff: time.Hour, MaxBackoff: time.Hour}}
	g := testGates(t, cfg)
	m := metrics.New(metrics.BuildInfo{})
	m.Providers(g.States)
	g.ForAgent("alice", "claude/a")
	down := g.ForAgent("bob", "claude/b").(*Gate)
	down.report(provider.Report{Outcome: provider.Failure, Cause: "500", Agent: "bob"})
	if up, _ := scrapeOf(scrapeAll(t, m), "claude/b"); up != 0 {
		t.Fatalf("bob's provider down: up %v", up)
	}

	g.Remove("bob")
	if up, retry := scrapeOf(scrapeAll(t, m), "claude/b"); up != -1 || retry != -1 {
		t.Errorf("bob removed: his provider still reported (up %v, retry_after %v)", up, retry)
	}
	if o := g.Overdue(time.Now().Add(time.Hour), time.Minute); len(o) != 0 {
		t.Errorf("an outage of a provider no agent uses told: %+v", o)
	}
	if g.ForKey("claude/c") == nil {
		t.Fatal("ForKey made no gate")
	}
	if up, _ := scrapeOf(scrapeAll(t, m), "claude/c"); up != -1 || g.Condition("alice") != "" {
		t.Errorf("a gate for settings not applied is reported (up %v) or moved alice", up)
	}
	g.ForAgent("alice", "claude/c")
	if up, _ := scrapeOf(scrapeAll(t, m), "claude/a"); up != -1 {
		t.Errorf("alice's old provider still reported after she took another key (up %v)", up)
	}
	if up, _ := scrapeOf(scrapeAll(t, m), "claude/c"); up != 1 {
		t.Errorf("alice's new provider: up %v, want 1", up)
	}
	g.ForAgent("carol", "claude/b")
	if up, _ := scrapeOf(scrapeAll(t, m), "claude/b"); up != 0 || !strings.HasPrefix(g.Condition("carol"), "provider down") {
		t.Errorf("carol took bob's key: up %v, condition %q; want it still down", up, g.Condition("carol"))
	}
}

// scrapeAll gathers m's registry.
func scrapeAll(t *testing.T, m *metrics.Metrics) []*dto.MetricFamily {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// scrapeOf reads provider's two series (-1: missing).
func scrapeOf(mfs []*dto.MetricFamily, provider string) (up, retry float64) {
	up, retry = -1, -1
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			if l := mt.GetLabel(); len(l) != 1 || l[0].GetValue() != provider {
				continue
			}
			switch mf.GetName() {
			case "swarmd_provider_up":
				up = mt.GetGauge().GetValue()
			case "swarmd_provider_retry_after_seconds":
				retry = mt.GetGauge().GetValue()
			}
		}
	}
	return up, retry
}

// TestProbeAnswerClosesTheBreaker: the breaker closes on the probe
// session's first answer in its stream, not at its end: the other agents
// are admitted at once; another agent's answer (not the probe's) changes
// nothing.
func TestProbeAnswerClosesTheBreaker(t *testing.T) {
	cfg := &config.Config{Providers: config.Providers{Backoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	g := testGates(t, cfg)
	alice := g.ForAgent("alice", "claude/abc").(*Gate)
	g.ForAgent("bob", "claude/abc")
	alice.report(provider.Report{Outcome: provider.Failure, Cause: "529", Agent: "alice"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Acquire waits out the 1 ms backoff; then alice is the probe.
	ticket, err := alice.Acquire(ctx, "alice", func(string) {})
	if err != nil || !ticket.(*Ticket).probe {
		t.Fatalf("alice's ticket: %v, probe %v", err, err == nil && ticket.(*Ticket).probe)
	}
	answered := backend.Progress{Usage: backend.Usage{InputTokens: 10, OutputTokens: 2}}
	g.Progress(runner.ProgressRecord{Agent: "bob", SessionID: "bob-1", Progress: answered})
	if st := alice.h.State(); st != provider.Probing {
		t.Fatalf("after a non-probe's answer: %v, want probing", st)
	}
	g.Progress(runner.ProgressRecord{Agent: "alice", SessionID: "alice-2", Progress: answered})
	if st := alice.h.State(); st != provider.Healthy {
		t.Fatalf("after the probe's first answer: %v, want healthy", st)
	}
	if _, err := alice.Acquire(ctx, "bob", func(r string) { t.Errorf("bob waits: %s", r) }); err != nil {
		t.Fatal(err)
	}
	ticket.Done(backend.Result{Outcome: backend.OutcomeSuccess}, true)
}

// TestProviderOutageToldOnce: a provider out for longer than the threshold
// is reported once per outage; an answer ends the outage, and the next one
// is reported again.
func TestProviderOutageToldOnce(t *testing.T) {
	cfg := &config.Config{Providers: config.Providers{Backoff: time.Minute, MaxBackoff: time.Hour}}
	g := testGates(t, cfg)
	pg := g.ForAgent("alice", "claude/abc").(*Gate)
	g.ForAgent("bob", "claude/abc")
	start := time.Now()
	pg.report(provider.Report{Outcome: provider.Failure, Cause: "API error 529", Agent: "alice"})
	if o := g.Overdue(start.Add(14*time.Minute), 15*time.Minute); len(o) != 0 {
		t.Fatalf("told after 14 minutes: %+v", o)
	}
	o := g.Overdue(start.Add(16*time.Minute), 15*time.Minute)
	if len(o) != 1 || o[0].Key != "claude/abc" || o[0].Cause != "API error 529" || len(o[0].Agents) != 2 {
		t.Fatalf("after 16 minutes: %+v", o)
	}
	if o := g.Overdue(start.Add(30*time.Minute), 15*time.Minute); len(o) != 0 {
		t.Fatalf("told twice: %+v", o)
	}
	pg.report(provider.Report{Outcome: provider.OK, Agent: "alice"})
	pg.report(provider.Report{Outcome: provider.Failure, Cause: "API error 500", Agent: "bob"})
	if o := g.Overdue(time.Now().Add(16*time.Minute), 15*time.Minute); len(o) != 1 || o[0].Cause != "API error 500" {
		t.Fatalf("the next outage: %+v", o)
	}
}

// testGates are provider gates with cfg's backoff, whose events go to a
// real swarm.db in a temporary directory.
func testGates(t *testing.T, cfg *config.Config) *Gates {
	t.Helper()
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "swarm.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j := db.NewJournal(store.JournalOptions{})
	t.Cleanup(func() {
		j.Close()
		db.Close()
	})
	return New(cfg, j, zap.NewNop())
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestProbeAnsweredAfterItsOwnRetries: a probe whose CLI retried on its own
// (its stream showed a server error first) closes the breaker when the
// provider then answers it (its tokens grow), not at its end.
func TestProbeAnsweredAfterItsOwnRetries(t *testing.T) {
	cfg := &config.Config{Providers: config.Providers{Backoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	g := testGates(t, cfg)
	alice := g.ForAgent("alice", "codex/abc").(*Gate)
	alice.report(provider.Report{Outcome: provider.Failure, Cause: "API error 500", Agent: "alice"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ticket, err := alice.Acquire(ctx, "alice", func(string) {})
	if err != nil || !ticket.(*Ticket).probe {
		t.Fatalf("alice's ticket: %v", err)
	}
	retrying := backend.Progress{ProviderError: "API error 500"}
	g.Progress(runner.ProgressRecord{Agent: "alice", SessionID: "alice-2", Progress: retrying})
	if st := alice.h.State(); st == provider.Healthy {
		t.Fatal("healthy while the probe's CLI still retries")
	}
	retrying.Usage = backend.Usage{InputTokens: 10, OutputTokens: 2}
	g.Progress(runner.ProgressRecord{Agent: "alice", SessionID: "alice-2", Progress: retrying})
	if st := alice.h.State(); st != provider.Healthy {
		t.Fatalf("after the probe's answer that followed its retries: %v, want healthy", st)
	}
	ticket.Done(backend.Result{Outcome: backend.OutcomeSuccess}, true)
}

// TestStuckSessionsOfADownProvider: once the breaker has been open for the
// given time, the sessions still retrying against it are named, each once;
// not one the provider answered since its error, not one that ended,
// nothing while the provider is up.
func TestStuckSessionsOfADownProvider(t *testing.T) {
	cfg := &config.Config{Providers: config.Providers{Backoff: time.Hour, MaxBackoff: time.Hour}}
	trouble := backend.Progress{ProviderError: "API error 529"}
	g := testGates(t, cfg)
	if got := g.Stuck(time.Now().Add(time.Hour), 15*time.Second); len(got) != 0 {
		t.Fatalf("stuck with the provider up: %v", got)
	}
	for _, a := range []string{"alice", "bob", "carol", "dave"} {
		g.ForAgent(a, "claude/abc")
	}
	start := time.Now()
	for _, a := range []string{"alice", "bob", "carol"} {
		g.Progress(runner.ProgressRecord{Agent: a, SessionID: a + "-1", Progress: trouble})
	}
	if got := g.Stuck(start.Add(10*time.Second), 15*time.Second); len(got) != 0 {
		t.Fatalf("stuck 10 s into the outage: %v", got)
	}
	// bob's provider answered him since; carol's session ended.
	answered := trouble
	answered.Usage = backend.Usage{InputTokens: 5}
	g.Progress(runner.ProgressRecord{Agent: "bob", SessionID: "bob-1", Progress: answered})
	(&Ticket{pg: g.byAgent["carol"], agent: "carol"}).Done(backend.Result{Outcome: backend.OutcomeError, ProviderError: "API error 529"}, true)
	if got := g.Stuck(start.Add(20*time.Second), 15*time.Second); strings.Join(got, ",") != "alice" {
		t.Fatalf("stuck 20 s into the outage: %v, want [alice]", got)
	}
	if got := g.Stuck(start.Add(30*time.Second), 15*time.Second); len(got) != 0 {
		t.Fatalf("alice named twice: %v", got)
	}
}

// TestConditionSaysWhatTheProviderIs: every agent of a provider that is
// down or rate limited is told so, with since when or until when; agents
// of a healthy provider, and those without one, are told nothing.
func TestConditionSaysWhatTheProviderIs(t *testing.T) {
	cfg := &config.Config{Providers: config.Providers{Backoff: time.Hour, MaxBackoff: time.Hour}}
	g := testGates(t, cfg)
	pg := g.ForAgent("alice", "claude/abc").(*Gate)
	g.ForAgent("bob", "claude/abc")
	g.ForAgent("carol", "codex/def")
	if c := g.Condition("alice"); c != "" {
		t.Fatalf("healthy: %q", c)
	}
	pg.report(provider.Report{Outcome: provider.Failure, Cause: "API error 529", Agent: "alice"})
	for _, a := range []string{"alice", "bob"} {
		if c := g.Condition(a); !strings.HasPrefix(c, "provider down since ") || !strings.Contains(c, "(API error 529); next probe at ") {
			t.Errorf("%s, provider down: %q", a, c)
		}
	}
	if c := g.Condition("carol") + g.Condition("dave"); c != "" {
		t.Errorf("other provider, no provider: %q", c)
	}
	cpg := g.byAgent["carol"]
	reset := time.Now().Add(time.Minute)
	cpg.report(provider.Report{Outcome: provider.RateLimit, Reset: reset, Cause: "rate limited (429)", Agent: "carol"})
	if c, want := g.Condition("carol"), "rate limited until "+reset.UTC().Format("15:04:05Z")+" (rate limited (429))"; c != want {
		t.Errorf("rate limited: %q, want %q", c, want)
	}
}
