package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func parseLimits(t *testing.T, yaml string) (*Config, error) {
	t.Helper()
	return Parse([]byte(yaml), filepath.Join(t.TempDir(), "swarmd.yaml"))
}

// TestLimitsMerge: an agent's tools lists and budget keys override the
// defaults' one by one; prices are found by model, configured model, "*".
func TestLimitsMerge(t *testing.T) {
	cfg, err := parseLimits(t, `
defaults:
  tools: {allow: [Read, "Bash(git:*)"], deny: [WebFetch]}
  budget: {usd: 10, window: 1h}
swarm_budget: {usd: 50}
prices:
  m1: {input: 1, output: 2}
  "*": {input: 3, output: 4}
agents:
  - {name: alice, role: r, tools: {allow: []}, budget: {tokens: 1000}}
  - {name: bob, role: r}
`)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := cfg.Agent("alice")
	if a.Tools.Allow == nil || len(a.Tools.Allow) != 0 || len(a.Tools.Deny) != 1 {
		t.Errorf("alice's tools %+v", a.Tools)
	}
	if a.Budget.USD != 10 || a.Budget.Tokens != 1000 || a.Budget.Window != time.Hour || !a.Budget.Limited() {
		t.Errorf("alice's budget %+v", a.Budget)
	}
	if b, _ := cfg.Agent("bob"); len(b.Tools.Allow) != 2 || b.Budget.Tokens != 0 || b.Budget.USD != 10 {
		t.Errorf("bob %+v %+v", b.Tools, b.Budget)
	}
	if cfg.SwarmBudget.USD != 50 || cfg.SwarmBudget.Window != 24*time.Hour {
		t.Errorf("swarm budget %+v", cfg.SwarmBudget)
	}
	for _, c := range []struct {
		model, configured string
		want              float64
		named             bool
	}{{"m1", "", 1, true}, {"other", "m1", 1, true}, {"other", "", 3, false}, {"", "", 3, false}} {
		p, named, ok := cfg.PriceFor(c.model, c.configured)
		if !ok || p.Input != c.want || named != c.named {
			t.Errorf("PriceFor(%q, %q) = %+v, %v, %v", c.model, c.configured, p, named, ok)
		}
	}
	// 1M input at 3 + 1M output at 4 + cache at the input price.
	p, _, _ := cfg.PriceFor("x", "")
	if got := p.Cost(1e6, 1e6, 1e6, 0); got != 10 {
		t.Errorf("cost %v", got)
	}
	if got := (Price{Input: 2, Output: 8, CacheRead: 0.5, CacheWrite: 1}).Cost(1e6, 0, 2e6, 1e6); got != 4 {
		t.Errorf("cost with cache prices %v", got)
	}
}

// TestLimitsErrors: each mistake in the limits' keys is one error naming
// the key and line.
func TestLimitsErrors(t *testing.T) {
	for _, c := range []struct {
		yaml, key, msg string
	}{
		{"defaults: {tools: {deny: [\"Bash(rm:*\"]}}", "defaults.tools.deny[0]", `"Bash(rm:*" does not end with ')'`},
		{"defaults: {tools: {deny: [\"(rm)\"]}}", "defaults.tools.deny[0]", "has no tool name"},
		{"defaults: {tools: {allow: [\"git status\"]}}", "defaults.tools.allow[0]", "has a space in the tool name"},
		{"defaults: {tools: {allow: [Bash], deny: [Bash]}}", "defaults.tools", `"Bash" is in both allow and deny`},
		{"defaults: {budget: {usd: -1}}", "defaults.budget.usd", "must be a number, 0 or more"},
		{"defaults: {budget: {usd: ten}}", "defaults.budget.usd", "want a number"},
		{"defaults: {budget: {window: 10s}}", "defaults.budget.window", "must be at least 1m"},
		{"swarm_budget: {tokens: -5}", "swarm_budget.tokens", "must be at least 0"},
		{"prices: {m1: {input: 1}}", "prices.m1.output", "is required"},
		{"prices: {m1: 3}", "prices.m1", "want a mapping with input and output"},
		{"providers: {backoff: 10s, max_backoff: 5s}", "providers.max_backoff", "is shorter than providers.backoff"},
		{"limits: {session_nice: 20}", "limits.session_nice", "must be between 0 and 19, got 20"},
		{"limits: {session_nice: -1}", "limits.session_nice", "must be between 0 and 19, got -1"},
		{"limits: {daemon_cpus: -1}", "limits.daemon_cpus", "must be between 0 and 1024, got -1"},
		{"limits: {daemon_cpus: 2000}", "limits.daemon_cpus", "must be between 0 and 1024, got 2000"},
		{"limits: {daemon_timer_slack: 11ms}", "limits.daemon_timer_slack", "at most 10ms, got 11ms"},
		{"limits: {daemon_timer_slack: -1ms}", "limits.daemon_timer_slack", "must not be negative"},
		{"limits: {daemon_timer_slack: 1}", "limits.daemon_timer_slack", "is not a duration"},
	} {
		_, err := parseLimits(t, c.yaml+"\nagents: [{name: alice, role: r}]\n")
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Key != c.key || !strings.Contains(errs[0].Msg, c.msg) {
			t.Errorf("%s: %v, want one error at %s: %s", c.yaml, err, c.key, c.msg)
		}
	}
	_, err := parseLimits(t, "agents: [{name: alice, role: r, tools: {allow: [X], deny: [X]}}]\n")
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Key != "agents[0].tools" || errs[0].Line != 1 {
		t.Errorf("agent tools in both lists: %v", err)
	}
}
