package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/budget"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/provider"
	"github.com/swarmd/swarmd/internal/store"
)

// TestBudgetSpentAtStartAndSetByOperator: an agent whose budget its
// recorded sessions already spent is paused at start (by swarmd, reason
// budget_exhausted) and starts no session; its own session cannot raise
// its budget, even with allow_control; the operator can, and it goes on at
// once.
func TestBudgetSpentAtStartAndSetByOperator(t *testing.T) {
	repo := gitRepo(t)
	stateDir := filepath.Join(repo, ".swarm")
	// Spend recorded by an earlier run: alice $3 this window.
	ctx := context.Background()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := mailbox.Open(ctx, filepath.Join(stateDir, "swarm.db"), store.Options{}, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j := db.Store().NewJournal(store.JournalOptions{})
	now := time.Now()
	j.SessionEnded(store.SessionRecord{SessionID: "alice-1-000000000001", Agent: "alice", Seq: 1, Started: now.Add(-time.Second),
		Ended: &now, Outcome: store.OutcomeSuccess, CostUSD: 3, TokensIn: 10})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  grace_period: 1s
  budget: {usd: 2}
backends:
  sleeper:
    type: scripted
    steps: [{print: [working], sleep: 1h}]
agents:
  - {name: alice, role: x, backend: sleeper, allow_control: true}
  - {name: bob, role: x, backend: sleeper}
`)
	d := startDaemon(t, cfg)
	d.waitLine("bob Running", transitionTo("bob", "Running"))
	s := waitStatus(t, cfg, "alice", func(a control.AgentStatus) bool { return a.Paused })
	if s.PausedBy != "swarmd" || s.PauseReason != "budget_exhausted" || s.State != "BuildingPrompt" || s.Seq != 2 {
		t.Fatalf("alice at start: %+v", s)
	}
	out, stderr, code := runCLI(t, nil, "", "budget", "-c", cfg)
	if f := strings.Fields(grepLines(out, "alice ")); code != 0 || len(f) < 9 || f[1] != "$3.00" || f[2] != "$2.00" || f[4] != "150%" ||
		!strings.Contains(out, "exhausted (paused)") || !strings.Contains(grepLines(out, "bob "), " $0 ") {
		t.Fatalf("budget: %d %s\n%s", code, stderr, out)
	}
	// From inside bob's session (a process of its tree), no budget can be
	// set, nor can bob resume alice past her budget.
	asBob := []string{proc.MarkerEnv + "=" + sessionMarker(t, stateDir, "bob")}
	if _, stderr, code := runCLI(t, asBob, "", "budget", "set", "alice", "100", "-c", cfg); code == 0 || !strings.Contains(stderr, "only the operator may") {
		t.Fatalf("budget set from a session: exit %d %s", code, stderr)
	}
	for _, bad := range [][]string{{"set", "alice"}, {"set", "alice", "-3"}, {"set", "--swarm"}, {"set", "alice", "ten"}} {
		if _, stderr, code := runCLI(t, nil, "", append(append([]string{"budget"}, bad...), "-c", cfg)...); code != 2 {
			t.Errorf("budget %v: exit %d %s", bad, code, stderr)
		}
	}
	if _, stderr, code := runCLI(t, nil, "", "budget", "set", "dave", "1", "-c", cfg); code != 2 || !strings.Contains(stderr, "not an agent") {
		t.Errorf("budget set dave: exit %d %s", code, stderr)
	}
	out, stderr, code = runCLI(t, nil, "", "budget", "set", "alice", "10", "-c", cfg)
	if code != 0 || !strings.Contains(out, "$10.00") || !strings.Contains(out, "set by operator") {
		t.Fatalf("budget set: %d %s %s", code, out, stderr)
	}
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	// A swarm budget that is spent holds everyone; --clear goes back.
	if _, stderr, code := runCLI(t, nil, "", "budget", "set", "--swarm", "1", "-c", cfg); code != 0 {
		t.Fatal(stderr)
	}
	waitStatus(t, cfg, "bob", func(a control.AgentStatus) bool { return a.Paused && a.PauseReason == "budget_exhausted" })
	if _, stderr, code := runCLI(t, nil, "", "resume", "bob", "-c", cfg); code != 2 || !strings.Contains(stderr, "budget set --swarm") {
		t.Fatalf("resume under a spent swarm budget: exit %d %s", code, stderr)
	}
	if _, stderr, code := runCLI(t, nil, "", "budget", "set", "--swarm", "--clear", "-c", cfg); code != 0 {
		t.Fatal(stderr)
	}
	waitStatus(t, cfg, "bob", func(a control.AgentStatus) bool { return !a.Paused })
	out, _, _ = runCLI(t, nil, "", "budget", "--json", "-c", cfg)
	var bs []control.BudgetStatus
	if err := json.Unmarshal([]byte(out), &bs); err != nil || len(bs) != 3 || bs[2].Scope != "(swarm)" || bs[2].LimitUSD != 0 {
		t.Fatalf("budgets %v %s", err, out)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(10 * time.Second)
}

func TestProviderKey(t *testing.T) {
	claude := config.Backend{Name: "claude", Type: config.TypeClaude, Env: map[string]string{"ANTHROPIC_BASE_URL": "http://x"}}
	alice := config.Agent{Name: "alice"}
	daemonEnv := []string{"ANTHROPIC_API_KEY=sk-secret-1", "HOME=/home/a"}
	k1 := providerKey(claude, alice, daemonEnv)
	if !strings.HasPrefix(k1, "claude/") || len(k1) != len("claude/")+8 || strings.Contains(k1, "secret") {
		t.Fatalf("key %q", k1)
	}
	if k := providerKey(claude, config.Agent{Name: "bob"}, daemonEnv); k != k1 {
		t.Errorf("same credentials, different keys: %s %s", k, k1)
	}
	own := config.Agent{Name: "carol", AgentSettings: config.AgentSettings{Env: map[string]string{"ANTHROPIC_API_KEY": "sk-secret-2"}}}
	if k := providerKey(claude, own, daemonEnv); k == k1 {
		t.Error("an agent with its own key shares the provider")
	}
	// HOME matters only without a key (a login stored under it).
	if providerKey(claude, alice, []string{"ANTHROPIC_API_KEY=sk-secret-1", "HOME=/home/b"}) != k1 {
		t.Error("HOME changed the key of an API-key provider")
	}
	if providerKey(claude, alice, []string{"HOME=/a"}) == providerKey(claude, alice, []string{"HOME=/b"}) {
		t.Error("two logins share a provider")
	}
	if k := providerKey(config.Backend{Type: config.TypeCommand}, alice, daemonEnv); k != "" {
		t.Errorf("command backend key %q", k)
	}
	gem := config.Backend{Type: config.TypeGemini, Env: map[string]string{}}
	if k := providerKey(gem, alice, []string{"GEMINI_API_KEY=g"}); !strings.HasPrefix(k, "gemini/") {
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
		if got := providerOutcome(c.res, c.ran); got.Outcome != c.want {
			t.Errorf("%+v ran %v: %v, want %v", c.res, c.ran, got.Outcome, c.want)
		}
	}
}

// TestBudgetNote: the prompt's note appears at 80% of the tightest budget
// and says what is left, whose budget it is and when the window ends.
func TestBudgetNote(t *testing.T) {
	k := newBudgetKeeper(&daemon{})
	now := time.Now()
	k.ledger.SetLimit("alice", budget.Limit{USD: 10, Tokens: 1000}, budget.Spend{USD: 7}, now)
	if n := k.note("alice"); n != "" {
		t.Fatalf("note at 70%%: %q", n)
	}
	k.ledger.Live("alice", "s1", budget.Spend{USD: 1.5, Tokens: 100}, now)
	n := k.note("alice")
	if !strings.HasPrefix(n, "$1.50 of $10.00, 900 of 1.0k tokens left of your budget: 85% spent in the 24h window that ends ") {
		t.Fatalf("note %q", n)
	}
	k.ledger.SetLimit(budget.Swarm, budget.Limit{USD: 9}, budget.Spend{USD: 8.6}, now)
	// The swarm's budget began after s1's spend so far: 8.6 of 9 is tighter.
	if n := k.note("alice"); !strings.HasPrefix(n, "$0.4000 of $9.00 left of the swarm's budget (all agents together): 96% spent") {
		t.Fatalf("swarm note %q", n)
	}
	if n := k.note("bob"); !strings.Contains(n, "swarm's budget") {
		t.Fatalf("bob's note %q", n)
	}
}
