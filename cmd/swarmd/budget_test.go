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

	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/proc"
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
