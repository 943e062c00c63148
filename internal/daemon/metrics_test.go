package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/providergate"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
)

// metricValue reads one series of the daemon's registry: the gauge's or
// counter's value of family name whose labels include kv (name, value
// pairs); ok false when there is no such series.
func metricValue(t *testing.T, d *Daemon, name string, kv ...string) (float64, bool) {
	t.Helper()
	mfs, err := d.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, kv) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// failingSwarm is one agent, alice, whose every session fails (exit 1)
// and who stops after two errors.
const failingSwarm = `
listen: ""
defaults:
  backend: worker
  grace_period: 1s
  min_session_interval: 0s
  max_total_errors: 2
backends:
  worker: {type: command, command: sh, args: [-c, "cat >/dev/null; exit 1"]}
agents:
  - {name: alice, role: works}
`

// TestMetricsOfAnAgentRestoredStopped: an agent its errors stopped stays
// Stopped over a restart, and its runner starts there without a
// transition. The metrics show it as swarmd status does from the start:
// Stopped, its total errors and its seq, not Initializing with none
// (which kept SwarmdAgentStopped from ever firing after a restart).
func TestMetricsOfAnAgentRestoredStopped(t *testing.T) {
	cfg := repo(t, failingSwarm)
	r := start(t, cfg)
	waitFor(t, "alice stopped by her errors", func() bool {
		rn, err := r.reg.Runner("alice")
		return err == nil && rn.Snapshot().State.Kind == agent.Stopped
	})
	r.stop(t)

	r = start(t, cfg)
	rn, err := r.reg.Runner("alice")
	if err != nil {
		t.Fatal(err)
	}
	s := rn.Snapshot()
	if s.State.Kind != agent.Stopped || s.TotalErrors != 2 || s.Seq < 2 {
		t.Fatalf("alice restored as %+v, want Stopped with 2 errors and her seq continued", s)
	}
	for _, k := range agent.AllStates {
		want := 0.0
		if k == agent.Stopped {
			want = 1
		}
		if got, ok := metricValue(t, r.Daemon, "swarmd_agent_state", "agent", "alice", "state", k.String()); !ok || got != want {
			t.Errorf("swarmd_agent_state{state=%q} = %v (%v), want %v", k, got, ok, want)
		}
	}
	for name, want := range map[string]float64{
		"swarmd_agent_total_errors":       2,
		"swarmd_agent_session_seq":        float64(s.Seq),
		"swarmd_agent_consecutive_errors": float64(s.ConsecutiveErrors),
	} {
		if got, ok := metricValue(t, r.Daemon, name, "agent", "alice"); !ok || got != want {
			t.Errorf("%s = %v (%v), want %v as the runner's snapshot", name, got, ok, want)
		}
	}
}

// providerSwarm is alice and, when withBob, bob on a claude backend whose
// program sleeps until cancelled, each with the API key given: one
// provider per key.
func providerSwarm(t *testing.T, prog, aliceKey, bobKey string, withBob bool) string {
	t.Helper()
	body := fmt.Sprintf(`
listen: ""
defaults:
  backend: cl
  grace_period: 1s
backends:
  cl: {type: claude, command: %s}
agents:
  - {name: alice, role: works, env: {ANTHROPIC_API_KEY: %s}}
`, prog, aliceKey)
	if withBob {
		body += fmt.Sprintf("  - {name: bob, role: works, env: {ANTHROPIC_API_KEY: %s}}\n", bobKey)
	}
	return body
}

// providerSeries are the provider names swarmd_provider_up has a series
// for, sorted.
func providerSeries(t *testing.T, d *Daemon) []string {
	t.Helper()
	mfs, err := d.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "swarmd_provider_up" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "provider" {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestProviderMetricsFollowTheAgents: swarmd_provider_up has a series for
// each provider some agent uses: a reload that removes the only agent of a
// provider, or gives an agent another API key, takes the provider's series
// away (they stayed for as long as the daemon ran, and a provider last
// seen down kept SwarmdProviderDown firing).
func TestProviderMetricsFollowTheAgents(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "fake-claude")
	writeFile(t, prog, "#!/bin/sh\nexec sleep 3600\n")
	if err := os.Chmod(prog, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgPath := repo(t, providerSwarm(t, prog, "sk-a", "sk-b", true))
	d := start(t, cfgPath)
	key := func(name string) string {
		t.Helper()
		cfg, _ := d.current()
		a, ok := cfg.Agent(name)
		if !ok {
			t.Fatalf("no agent %s", name)
		}
		return providergate.AgentKey(cfg, a)
	}
	keyA, keyB := key("alice"), key("bob")
	if want := sorted(keyA, keyB); !slices.Equal(providerSeries(t, d.Daemon), want) {
		t.Fatalf("provider series %v, want %v", providerSeries(t, d.Daemon), want)
	}

	writeFile(t, cfgPath, providerSwarm(t, prog, "sk-a", "", false))
	if err := d.Reload(cfgPath); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob dropped", func() bool { return !slices.Contains(d.reg.Names(), "bob") })
	if got := providerSeries(t, d.Daemon); !slices.Equal(got, []string{keyA}) {
		t.Fatalf("after bob's removal: provider series %v, want alice's alone %v", got, keyA)
	}

	writeFile(t, cfgPath, providerSwarm(t, prog, "sk-c", "", false))
	if err := d.Reload(cfgPath); err != nil {
		t.Fatal(err)
	}
	keyC := key("alice")
	if got := providerSeries(t, d.Daemon); keyC == keyA || !slices.Equal(got, []string{keyC}) {
		t.Fatalf("after alice's new key: provider series %v, want %v alone (not the old %v)", got, keyC, keyA)
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// TestSessionsThatNeverStartedAreCounted: a session whose program cannot
// be started (it does not exist) has its row, an error, in swarmd
// sessions; swarmd_sessions_total counts each such session once, as an
// error (it counted none).
func TestSessionsThatNeverStartedAreCounted(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-agent-cli")
	r := start(t, repo(t, fmt.Sprintf(`
listen: ""
defaults:
  backend: worker
  grace_period: 1s
  min_session_interval: 0s
  max_consecutive_errors: 2
backends:
  worker: {type: command, command: %s}
agents:
  - {name: alice, role: works}
`, missing)))
	waitFor(t, "alice stopped by her failed starts", func() bool {
		rn, err := r.reg.Runner("alice")
		return err == nil && rn.Snapshot().State.Kind == agent.Stopped
	})
	rows, err := r.db.Sessions(context.Background(), "alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	errs := 0
	for _, s := range rows {
		if s.Outcome != store.OutcomeError || !strings.Contains(s.Reason, "never started") {
			t.Errorf("session row %+v, want an error that never started", s)
		}
		errs++
	}
	if errs != 2 {
		t.Fatalf("%d session rows, want the 2 failed starts", errs)
	}
	for outcome, want := range map[string]float64{"error": float64(errs), "success": 0} {
		if got, ok := metricValue(t, r.Daemon, "swarmd_sessions_total", "agent", "alice", "outcome", outcome); !ok || got != want {
			t.Errorf("swarmd_sessions_total{outcome=%q} = %v (%v), want %v as swarmd sessions lists", outcome, got, ok, want)
		}
	}
}

// TestMailCountedFromTheStartEvenWhenTheStoreFailedThen: the mail metrics
// count from the newest message at their start; when the store does not
// answer then, the first answer is that baseline (the messages sent before
// are not counted, as if the store had answered), and only mail sent after
// it counts. It counted every message ever sent at its first answer.
func TestMailCountedFromTheStartEvenWhenTheStoreFailedThen(t *testing.T) {
	core, logged := observer.New(zap.WarnLevel)
	d, err := Open(context.Background(), mustLoad(t, repo(t, agentsYAML("alice"))), Options{Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	send := func(subject string) {
		t.Helper()
		if _, err := d.mail.Send(ctx, mailbox.Draft{From: "operator", To: "alice", Subject: subject, Body: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"one", "two", "three"} {
		send(s) // before the daemon counts: not counted
	}
	rename := func(from, to string) {
		t.Helper()
		if err := d.db.Write(ctx, func(w *sql.DB) error {
			_, err := w.ExecContext(ctx, "ALTER TABLE "+from+" RENAME TO "+to)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	rename("messages", "messages_away") // the store does not answer the baseline's query
	d.metrics.AddAgent(runner.Snapshot{Agent: "alice"})
	stats := d.mailStats(0)
	if err := stats.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer stats.Stop()
	waitFor(t, "the baseline's query failed", func() bool { return logged.FilterMessage("mail metrics").Len() > 0 })
	rename("messages_away", "messages")

	pending := func() float64 { v, _ := metricValue(t, d, "swarmd_mailbox_pending", "agent", "alice"); return v }
	waitFor(t, "the store answered", func() bool {
		signal(d.mailChanged) // as the router does at a commit
		return pending() == 3
	})
	send("four")
	normal := func() float64 {
		v, _ := metricValue(t, d, "swarmd_mailbox_messages_total", "urgency", "normal")
		return v
	}
	waitFor(t, "the fourth message seen", func() bool {
		signal(d.mailChanged)
		return pending() == 4
	})
	if got := normal(); got != 1 {
		t.Fatalf("swarmd_mailbox_messages_total{urgency=normal} = %v, want 1: the message sent since the start", got)
	}
}
