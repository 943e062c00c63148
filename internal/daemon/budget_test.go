package daemon

import (
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/runner"
)

// budgetLeft reads swarmd_budget_remaining_usd of agent from the daemon's
// registry (ok false: no such series).
func budgetLeft(t *testing.T, d *Daemon, agent string) (float64, bool) {
	t.Helper()
	mfs, err := d.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "swarmd_budget_remaining_usd" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "agent" && l.GetValue() == agent {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestBudgetGaugesAfterASession: a session's spend moves what is left of
// its own agent's budget; with a swarm budget, which every agent shares,
// everybody's too.
func TestBudgetGaugesAfterASession(t *testing.T) {
	for _, swarm := range []bool{false, true} {
		body := strings.Replace(agentsYAML("alice", "bob"), "  grace_period: 1s\n", "  grace_period: 1s\n  budget: {usd: 10}\n", 1)
		if swarm {
			body = strings.Replace(body, "agents:\n", "swarm_budget: {usd: 5}\nagents:\n", 1)
		}
		r := start(t, repo(t, body))
		r.waitRunning(t, "alice", "bob")
		r.budget.OnSessionEnd(runner.SessionRecord{Agent: "alice", SessionID: "alice-9-000000000009", Seq: 9,
			Result: backend.Result{Usage: backend.Usage{CostUSD: 2}}})
		wantAlice, wantBob := 8.0, 10.0
		if swarm {
			wantAlice, wantBob = 3, 3 // the swarm's 5 less alice's 2 is the tighter for both
		}
		if got, ok := budgetLeft(t, r.Daemon, "alice"); !ok || got != wantAlice {
			t.Errorf("swarm budget %v: alice has %v left (%v), want %v", swarm, got, ok, wantAlice)
		}
		if got, ok := budgetLeft(t, r.Daemon, "bob"); !ok || got != wantBob {
			t.Errorf("swarm budget %v: bob has %v left (%v), want %v", swarm, got, ok, wantBob)
		}
		r.stop(t)
	}
}
