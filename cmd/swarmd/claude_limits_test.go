package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/cli"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/mockllm"
)

// claudeBackend is the yaml of a claude backend talking to mock, with an
// isolated HOME; extraEnv adds lines to its env.
func claudeBackend(t *testing.T, bin string, mock *mockllm.Server, extra string, extraEnv ...string) string {
	env := ""
	for _, e := range extraEnv {
		env += "\n      " + e
	}
	return fmt.Sprintf(`
  claude:
    command: %s%s
    env:
      ANTHROPIC_BASE_URL: %s
      ANTHROPIC_API_KEY: sk-ant-test
      DISABLE_TELEMETRY: "1"
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"
      DISABLE_AUTOUPDATER: "1"
      HOME: %s
      TMPDIR: %s%s`, bin, extra, mock.URL(), t.TempDir(), t.TempDir(), env)
}

// sessionsOf reads `swarmd sessions AGENT --json`, oldest first.
func sessionsOf(t *testing.T, cfg, agent string) []cli.SessionJSON {
	t.Helper()
	out, stderr, code := runCLI(t, nil, "", "sessions", agent, "--json", "-n", "0", "-c", cfg)
	if code != 0 {
		t.Fatalf("sessions %s: %d %s", agent, code, stderr)
	}
	var ss []cli.SessionJSON
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var s cli.SessionJSON
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	return ss
}

// eventsOf reads `swarmd events --json` (of agent, if set).
func eventsOf(t *testing.T, cfg, agent string) []control.Event {
	t.Helper()
	args := []string{"events", "--json", "-c", cfg}
	if agent != "" {
		args = append(args, "--agent", agent)
	}
	out, stderr, code := runCLI(t, nil, "", args...)
	if code != 0 {
		t.Fatalf("events: %d %s", code, stderr)
	}
	var evs []control.Event
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var e control.Event
		if err := dec.Decode(&e); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	return evs
}

func countEvents(evs []control.Event, name string) int {
	n := 0
	for _, e := range evs {
		if e.Event == name {
			n++
		}
	}
	return n
}

// stopDaemon sends SIGTERM and checks the clean exit.
func stopDaemon(t *testing.T, d *daemonProc, repo string) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d; log:\n%s", code, d.log())
	}
	waitNoTreeProcesses(t, filepath.Join(repo, ".swarm"), 2*time.Second)
}

// TestClaudeDeniedToolStopsSession: a real Claude Code session whose
// model calls a denied tool is cancelled there (the command never runs),
// recorded as permission_denied (not an error), with a ToolDenied event
// naming the call; the next prompt says which tool was refused.
func TestClaudeDeniedToolStopsSession(t *testing.T) {
	bin := realCLI(t, "claude")
	mock := mockllm.New(mockllm.Shell("touch ran.txt"), mockllm.Text("never"))
	defer mock.Close()
	mock.Script("tools policy does not allow", mockllm.Text("ok, without Bash"))
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  backend: claude
  max_sessions: 2
  min_session_interval: 0s
backends:`+claudeBackend(t, bin, mock, "\n    args: [--dangerously-skip-permissions]")+`
agents:
  - {name: alice, role: "You run commands.", tools: {deny: [Bash]}}
`)
	d := startDaemon(t, cfg)
	d.waitLine("alice Stopped after two sessions", transitionTo("alice", "Stopped"))
	stopDaemon(t, d, repo)
	if _, err := os.Stat(filepath.Join(repo, ".swarm", "worktrees", "alice", "ran.txt")); err == nil {
		t.Fatal("the denied command ran")
	}
	ss := sessionsOf(t, cfg, "alice")
	if len(ss) != 2 || ss[0].Outcome != "permission_denied" || ss[0].AbortReason != "permission_denied" ||
		!strings.Contains(ss[0].Reason, "tool Bash (touch ran.txt): tools.deny: Bash") || ss[1].Outcome != "success" {
		t.Fatalf("sessions %+v", ss)
	}
	if strings.Contains(d.log(), `"to":"CoolingDown"`) {
		t.Error("a refused tool was taken for an error")
	}
	evs := eventsOf(t, cfg, "alice")
	var denied []control.Event
	for _, e := range evs {
		if e.Event == "ToolDenied" {
			denied = append(denied, e)
		}
	}
	if len(denied) != 1 || !strings.Contains(denied[0].Reason, "tool Bash (touch ran.txt): tools.deny: Bash") || denied[0].SessionID != ss[0].SessionID {
		t.Fatalf("ToolDenied events %+v", denied)
	}
	// The second session's prompt named the refused call.
	var second *mockllm.Request
	for _, r := range mock.Scripted() {
		if r.BodyContains("does not allow: Bash (touch ran.txt)") {
			second = &r
		}
	}
	if second == nil {
		t.Fatal("no prompt told the agent which tool was refused")
	}
}

// TestClaudeBudgetExhaustedThenRaised: a real Claude Code session whose
// spend so far (its responses' tokens at the configured price) crosses the
// agent's budget is cancelled there; the agent is paused by swarmd with
// reason budget_exhausted, swarmd resume refuses, and swarmd budget set
// raises the limit: the agent goes on at once, and the limit is stored.
func TestClaudeBudgetExhaustedThenRaised(t *testing.T) {
	bin := realCLI(t, "claude")
	// Each response: 120 input, 7 cache-read and 5 cache-write tokens at
	// $1000 per million, so about $0.13; the fourth reaches $0.40.
	mock := mockllm.New(mockllm.Shell("echo one"), mockllm.Shell("echo two"), mockllm.Shell("echo three"),
		mockllm.Shell("echo four"), mockllm.Shell("echo five"), mockllm.Text("never"))
	defer mock.Close()
	mock.Script("your budget ran out", mockllm.Text("resumed"))
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  backend: claude
  max_sessions: 2
  min_session_interval: 0s
prices:
  claude-test: {input: 1000, output: 1000}
backends:`+claudeBackend(t, bin, mock, "\n    model: claude-test\n    allowed_tools: [Bash]")+`
agents:
  - {name: alice, role: "You run commands.", budget: {usd: 0.4}}
`)
	d := startDaemon(t, cfg)
	d.waitLine("alice paused", func(m map[string]any) bool {
		return m["msg"] == "session ended" && m["agent"] == "alice" && m["abort_reason"] == "budget_exhausted"
	})
	s := waitStatus(t, cfg, "alice", func(a control.AgentStatus) bool { return a.Paused && a.State == "BuildingPrompt" })
	if s.PausedBy != "swarmd" || s.PauseReason != "budget_exhausted" {
		t.Fatalf("status %+v", s)
	}
	if _, stderr, code := runCLI(t, nil, "", "resume", "alice", "-c", cfg); code != 2 || !strings.Contains(stderr, "held by its budget") {
		bo, _, _ := runCLI(t, nil, "", "budget", "-c", cfg)
		t.Fatalf("resume of a spent budget: exit %d %s\n%s\n%s", code, stderr, bo, grepLines(d.log(), "session ended"))
	}
	out, stderr, code := runCLI(t, nil, "", "budget", "--json", "-c", cfg)
	var bs []control.BudgetStatus
	if err := json.Unmarshal([]byte(out), &bs); code != 0 || err != nil || len(bs) != 2 {
		t.Fatalf("budget --json: %d %v %s\n%s", code, err, stderr, out)
	}
	if b := bs[0]; b.Scope != "alice" || b.LimitUSD != 0.4 || b.SpentUSD < 0.4 || b.Level != "exhausted" || !b.Paused || b.Source != "config" {
		t.Fatalf("alice's budget %+v", b)
	}
	out, stderr, code = runCLI(t, nil, "", "budget", "set", "alice", "25", "-c", cfg)
	if code != 0 || !strings.Contains(out, "$25.00") {
		t.Fatalf("budget set: %d %s %s", code, out, stderr)
	}
	d.waitLine("alice Stopped after her second session", transitionTo("alice", "Stopped"))
	stopDaemon(t, d, repo)

	ss := sessionsOf(t, cfg, "alice")
	if len(ss) != 2 || ss[0].Outcome != "budget_exhausted" || !strings.Contains(ss[0].Reason, "alice spent $0.") ||
		ss[0].CostUSD < 0.4 || ss[1].Outcome != "success" {
		t.Fatalf("sessions %+v", ss)
	}
	if n := len(mock.Scripted()); n > 5 {
		t.Errorf("the model was asked %d times: the session ran on past its budget", n)
	}
	evs := eventsOf(t, cfg, "alice")
	for name, want := range map[string]int{"BudgetWarning": 1, "BudgetExhausted": 1, "Paused": 1, "BudgetSet": 1, "Resumed": 1} {
		if got := countEvents(evs, name); got != want {
			t.Errorf("%d %s events, want %d", got, name, want)
		}
	}
	for _, e := range evs {
		if (e.Event == "Paused" || e.Event == "Resumed") && e.Actor != "swarmd" {
			t.Errorf("%s by %s, want swarmd", e.Event, e.Actor)
		}
	}
	if strings.Contains(d.log(), `"to":"CoolingDown"`) {
		t.Error("the budget stop was taken for an error")
	}
	// The raised limit is in swarm.db: it holds after a restart.
	d = startDaemon(t, cfg)
	out, stderr, code = runCLI(t, nil, "", "budget", "--json", "-c", cfg)
	for code == 2 && strings.Contains(stderr, "no swarmd") { // the socket is not up yet
		time.Sleep(50 * time.Millisecond)
		out, stderr, code = runCLI(t, nil, "", "budget", "--json", "-c", cfg)
	}
	bs = nil
	if err := json.Unmarshal([]byte(out), &bs); err != nil || len(bs) == 0 || bs[0].LimitUSD != 25 ||
		!strings.HasPrefix(bs[0].Source, "set by operator") {
		t.Fatalf("after a restart: %v %+v %s", err, bs, stderr)
	}
	stopDaemon(t, d, repo)
}

// waitStatus polls `swarmd status --json` until agent's row satisfies
// cond.
func waitStatus(t *testing.T, cfg, agent string, cond func(control.AgentStatus) bool) control.AgentStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, code := runCLI(t, nil, "", "status", "--json", "-c", cfg)
		var rows []cli.StatusRow
		if code == 0 && json.Unmarshal([]byte(out), &rows) == nil {
			for _, r := range rows {
				if r.Name == agent && cond(r.AgentStatus) {
					return r.AgentStatus
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of %s never matched:\n%s", agent, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClaudeRateLimitHoldsTheProvidersAgents: alice's Claude session gets
// a 429 with retry-after 4 s (which the CLI honours, retrying); bob, on the
// same provider and key, finishes a session meanwhile and waits for the
// reset before his next one, shown as rate limited until then; one event for
// the provider; both go on after the reset.
func TestClaudeRateLimitHoldsTheProvidersAgents(t *testing.T) {
	bin := realCLI(t, "claude")
	mock := mockllm.New()
	defer mock.Close()
	mock.Script("You are agent `alice`", mockllm.Status(429, "retry-after", "4"), mockllm.Text("alice done"))
	mock.Script("You are agent `bob`", mockllm.Turn{Text: "bob worked", Delay: 2 * time.Second})
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  backend: claude
  min_session_interval: 0s
backends:`+claudeBackend(t, bin, mock, "\n    allowed_tools: [Bash]", `CLAUDE_CODE_MAX_RETRIES: "1"`)+`
agents:
  - {name: alice, role: "You work.", max_sessions: 1}
  - {name: bob, role: "You work too.", max_sessions: 2}
`)
	d := startDaemon(t, cfg)
	held := waitStatus(t, cfg, "bob", func(a control.AgentStatus) bool {
		return strings.HasPrefix(a.Health, "rate limited until")
	})
	d.waitLine("bob Stopped after his second session", transitionTo("bob", "Stopped"))
	d.waitLine("alice Stopped", transitionTo("alice", "Stopped"))
	stopDaemon(t, d, repo)

	var limited []control.Event
	for _, e := range eventsOf(t, cfg, "") {
		if strings.HasPrefix(e.Event, "Provider") {
			limited = append(limited, e)
		}
	}
	if len(limited) != 2 || limited[0].Event != "ProviderRateLimited" || limited[1].Event != "ProviderHealthy" ||
		!strings.HasPrefix(limited[0].Agent, "claude/") || !strings.Contains(limited[0].Reason, "(alice, bob)") {
		t.Fatalf("provider events %+v", limited)
	}
	reset, err := time.Parse(time.RFC3339, limited[0].Reason[strings.LastIndex(limited[0].Reason, " ")+1:])
	if err != nil {
		t.Fatalf("no reset in %q: %v", limited[0].Reason, err)
	}
	var bobs []mockllm.Request
	var alices []mockllm.Request
	for _, r := range mock.Scripted() {
		switch {
		case r.BodyContains("You are agent `bob`"):
			bobs = append(bobs, r)
		case r.BodyContains("You are agent `alice`"):
			alices = append(alices, r)
		}
	}
	if len(bobs) != 2 || len(alices) != 2 {
		t.Fatalf("requests: bob %d, alice %d", len(bobs), len(alices))
	}
	// bob's second session asked the model only after the reset (reset is
	// stored to the second).
	if bobs[1].Time.Before(reset.Truncate(time.Second)) {
		t.Fatalf("bob's second request at %v, before the reset %v", bobs[1].Time, reset)
	}
	if ss := sessionsOf(t, cfg, "alice"); len(ss) != 1 || ss[0].Outcome != "success" {
		t.Errorf("alice's sessions %+v", ss)
	}
	t.Logf("bob held: %s; bob's second request %v after the 429", held.Health, bobs[1].Time.Sub(alices[0].Time).Round(time.Millisecond))
}

// TestClaudeProviderDownBreaker: while the provider answers 500 to every
// request, the provider's agents run one probe session at a time after a
// growing backoff (not a failed session each every 2 s), stay alive, and
// go on within one backoff step once it recovers; an agent on a command
// backend works throughout.
func TestClaudeProviderDownBreaker(t *testing.T) {
	bin := realCLI(t, "claude")
	down := make([]mockllm.Turn, 500)
	for i := range down {
		down[i] = mockllm.Status(500)
	}
	mock := mockllm.New(down...)
	defer mock.Close()
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  backend: claude
  min_session_interval: 0s
providers: {backoff: 300ms, max_backoff: 1200ms}
backends:`+claudeBackend(t, bin, mock, "\n    allowed_tools: [Bash]", `CLAUDE_CODE_MAX_RETRIES: "0"`)+`
  tests:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; sleep 0.2; echo ok"]
agents:
  - {name: alice, role: "You work."}
  - {name: bob, role: "You work too."}
  - {name: carol, role: "You test.", backend: tests, min_session_interval: 100ms}
`)
	d := startDaemon(t, cfg)
	d.waitLine("the provider is down", func(m map[string]any) bool { return m["msg"] == "provider down" })
	outage := 8 * time.Second
	time.Sleep(outage) // the outage lasts; nothing to wait for but time
	recovered := time.Now()
	mock.Script("", mockllm.Text("recovered"))
	for _, a := range []string{"alice", "bob"} {
		d.waitLine(a+" succeeds", func(m map[string]any) bool {
			// Not the transition: a session the provider cut off is
			// SessionExited(Success) to the machine (it counts no error).
			return m["msg"] == "session ended" && m["agent"] == a && m["outcome"] == "Success"
		})
	}
	resumed := time.Since(recovered)
	carolDuring := len(sessionsOf(t, cfg, "carol"))
	stopDaemon(t, d, repo)

	var claude []cli.SessionJSON // those that started during the outage
	for _, a := range []string{"alice", "bob"} {
		for _, s := range sessionsOf(t, cfg, a) {
			if s.Started.Before(recovered) {
				claude = append(claude, s)
			}
		}
		// Alive: Stopped only by the daemon's own stop at the end.
		for _, l := range strings.Split(d.log(), "\n") {
			if strings.Contains(l, `"agent":"`+a+`"`) && strings.Contains(l, `"to":"Stopped"`) && !strings.Contains(l, `"actor":"daemon"`) {
				t.Errorf("%s stopped during the outage: %s", a, l)
			}
		}
	}
	failed := 0
	for _, s := range claude {
		if s.Outcome == "error" {
			failed++
		}
	}
	// Two sessions start before anyone knows; then one probe per backoff
	// (0.3, 0.6, 1.2, 1.2 ... s) plus a session's own time.
	if failed < 2 || failed > 10 {
		t.Errorf("%d failed sessions of the provider's agents during an outage of %v (want a handful)", failed, outage)
	}
	// Of the sessions started after the first failure, no two overlap: one
	// probe at a time.
	slices.SortFunc(claude, func(a, b cli.SessionJSON) int { return a.Started.Compare(b.Started) })
	firstEnd := *claude[0].Ended
	for i := 1; i < len(claude); i++ {
		prev, cur := claude[i-1], claude[i]
		// Sessions that started before anyone knew of the outage run on
		// (their CLIs retry); those started after it are probes.
		if prev.Ended == nil || prev.Started.Before(firstEnd) || cur.Started.Before(firstEnd) {
			continue
		}
		if cur.Started.Before(*prev.Ended) && prev.Outcome == "error" {
			t.Errorf("sessions %s (%v-%v %s) and %s (%v-%v %s) overlap while the provider was down", prev.SessionID, prev.Started, prev.Ended, prev.Outcome,
				cur.SessionID, cur.Started, cur.Ended, cur.Outcome)
		}
	}
	if resumed > 1200*time.Millisecond+10*time.Second {
		t.Errorf("the agents went on %v after the recovery", resumed)
	}
	if carolDuring < 10 {
		t.Errorf("carol (command backend) ran only %d sessions", carolDuring)
	}
	evs := eventsOf(t, cfg, "")
	downs := countEvents(evs, "ProviderDown")
	if downs == 0 || countEvents(evs, "ProviderHealthy") != 1 || countEvents(evs, "ProviderProbing") < downs-1 {
		t.Errorf("provider events: %d down, %d probing, %d healthy", downs, countEvents(evs, "ProviderProbing"), countEvents(evs, "ProviderHealthy"))
	}
	t.Logf("outage %v: %d failed sessions of alice and bob (%d down events), carol %d sessions; resumed %v after the recovery",
		outage, failed, downs, carolDuring, resumed.Round(time.Millisecond))
}
