package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/mockllm"
)

// TestProviderOutageAcrossCLIs: two agents on each of Claude Code, Codex
// and Gemini CLI, each CLI on its own mock provider, with the CLIs' own
// retry settings left as they ship. Every request fails (529 for
// Anthropic, 500 for the others) for 30 s (and until each provider has
// been seen down for 5 s), then every request succeeds.
//
//   - during the outage swarmd_provider_up is 0 for each provider, from
//     the moment it is seen down to the recovery, and status shows
//     "provider down since …" on every agent;
//   - the requests a provider gets during it stay bounded (the two
//     sessions that found it down, then one probe at a time);
//   - after it, every agent's next successful request comes within 10 s of
//     the first success its provider gave a probe;
//   - no agent's error counters moved, and nobody was Stopped.
func TestProviderOutageAcrossCLIs(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 s outage")
	}
	claude, codex, gemini := cliPath(t, "claude"), cliPath(t, "codex"), cliPath(t, "gemini")
	const outage = 30 * time.Second
	down := func(status int) []mockllm.Turn {
		turns := make([]mockllm.Turn, 5000)
		for i := range turns {
			turns[i] = mockllm.Status(status)
		}
		return turns
	}
	mocks := map[string]*mockllm.Server{
		"claude": mockllm.New(down(529)...),
		"codex":  mockllm.New(down(500)...),
		"gemini": mockllm.New(down(500)...),
	}
	for _, m := range mocks {
		defer m.Close()
	}
	agents := map[string][]string{"claude": {"c1", "c2"}, "codex": {"x1", "x2"}, "gemini": {"g1", "g2"}}
	repo := gitRepo(t)
	home := t.TempDir()
	geminiSettings(t, home)
	// Codex's provider as it ships: its own request and stream retries.
	codexHome := codexConfig(t, mocks["codex"].URL())
	conf, err := os.ReadFile(codexHome + "/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	conf = regexp.MustCompile(`(?m)^(request|stream)_max_retries = 1\n`).ReplaceAll(conf, nil)
	if err := os.WriteFile(codexHome+"/config.toml", conf, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: %[8]q
providers: {backoff: 1s, max_backoff: 4s}
defaults:
  min_session_interval: 0s
  grace_period: 2s
  env: {HOME: %[4]q, TMPDIR: %[5]q, DISABLE_TELEMETRY: "1", DISABLE_AUTOUPDATER: "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"}
backends:
  claude:
    command: %[1]s
    env: {ANTHROPIC_BASE_URL: %[6]q, ANTHROPIC_API_KEY: sk-ant-test}
  codex:
    command: %[2]s
    args: [--dangerously-bypass-approvals-and-sandbox]
    env: {CODEX_HOME: %[7]q, MOCK_API_KEY: test-key}
  gemini:
    command: %[3]s
    args: [--yolo]
    env: {GEMINI_API_KEY: test-key, GOOGLE_GEMINI_BASE_URL: %[9]q}
agents:
  - {name: c1, role: works, backend: claude}
  - {name: c2, role: works, backend: claude}
  - {name: x1, role: works, backend: codex}
  - {name: x2, role: works, backend: codex}
  - {name: g1, role: works, backend: gemini}
  - {name: g2, role: works, backend: gemini}
`, claude, codex, gemini, home, t.TempDir(), mocks["claude"].URL(), codexHome, addr, mocks["gemini"].URL()))
	d := startDaemon(t, cfg)
	started := time.Now()
	d.waitLine("swarmd running", func(m map[string]any) bool { return m["msg"] == "swarmd running" })

	// swarmd_provider_up{provider="claude/…"} and so on, read once.
	upRe := regexp.MustCompile(`(?m)^swarmd_provider_up\{provider="([a-z]+)/[^"]*"\} ([01])$`)
	readUp := func() map[string]string {
		got := map[string]string{}
		for _, m := range upRe.FindAllStringSubmatch(scrape(t, "http://"+addr+"/metrics"), -1) {
			got[m[1]] = m[2]
		}
		return got
	}
	// The outage lasts 30 s, and until every provider has been seen down
	// for 5 s: on a loaded machine a CLI may take a while to send its first
	// request.
	seenDown := map[string]time.Time{}
	allDown := func() bool {
		for p := range mocks {
			if seenDown[p].IsZero() || time.Since(seenDown[p]) < 5*time.Second {
				return false
			}
		}
		return true
	}
	for time.Since(started) < outage || !allDown() {
		if time.Since(started) > time.Duration(envInt("OUTAGE_LIMIT_S", 180))*time.Second {
			for p, m := range mocks {
				t.Logf("%s: %d requests", p, len(m.Requests()))
			}
			logs, _ := filepath.Glob(filepath.Join(repo, ".swarm", "logs", "g1", "*"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, b[max(0, len(b)-3000):])
			}
			t.Fatalf("not every provider seen down 3 minutes into the outage: %v", seenDown)
		}
		for p, v := range readUp() {
			switch {
			case v == "0" && seenDown[p].IsZero():
				seenDown[p] = time.Now()
			case v == "1" && !seenDown[p].IsZero():
				t.Errorf("swarmd_provider_up{%s} went back to 1 %v into the outage", p, time.Since(started).Round(time.Millisecond))
			}
		}
		time.Sleep(250 * time.Millisecond) // sampling the gauge through the outage
	}
	for p := range mocks {
		t.Logf("%s seen down %v after the start", p, seenDown[p].Sub(started).Round(time.Millisecond))
	}
	// status says it of every agent of each provider, running or not.
	out, stderr, code := runCLI(t, nil, "", "status", "--json", "-c", cfg)
	var rows []control.AgentStatus
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("status: %d %s %s", code, out, stderr)
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.Health, "provider down since ") {
			t.Errorf("%s's HEALTH during the outage: %q, want provider down since …", r.Name, r.Health)
		}
	}
	recovered := time.Now()
	during := map[string]int{}
	for p, m := range mocks {
		for _, r := range m.Requests() {
			if !r.Side {
				during[p]++
			}
		}
		m.Script("", mockllm.Text("back at work\nDONE"))
	}

	// Each provider's first success (a probe's), then each agent's.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	success := func(p, agent string) time.Time {
		r, err := mocks[p].WaitRequest(ctx, func(r mockllm.Request) bool {
			return !r.Side && r.Turn >= 0 && !r.Time.Before(recovered) && (agent == "" || r.BodyContains("agent `"+agent+"`"))
		})
		if err != nil {
			t.Fatalf("no successful request of %s %s after the recovery: %v", p, agent, err)
		}
		return r.Time
	}
	for _, p := range []string{"claude", "codex", "gemini"} {
		probe := success(p, "")
		var lastAt, lastStart time.Duration // after the probe's first success
		for _, a := range agents[p] {
			at := success(p, a)
			lastAt = max(lastAt, at.Sub(probe))
			// The session that made it: the last one started before it.
			var began time.Time
			for _, s := range sessionsOf(t, cfg, a) {
				if !s.Started.After(at) && s.Started.After(began) {
					began = s.Started
				}
			}
			lastStart = max(lastStart, began.Sub(probe))
		}
		t.Logf("%s: %d requests during the outage (%v from the start, seen down for %v); first success %v after the recovery; "+
			"every agent's session started %v after it, its first success %v after it",
			p, during[p], recovered.Sub(started).Round(time.Second), recovered.Sub(seenDown[p]).Round(time.Second),
			probe.Sub(recovered).Round(time.Millisecond), lastStart.Round(time.Millisecond), lastAt.Round(time.Millisecond))
		// swarmd's part: each agent's session is under way within 10 s of
		// the probe's success (its CLI's start, a few seconds of Node on a
		// busy machine, comes on top of it before its first request).
		if lastStart > 10*time.Second {
			t.Errorf("%s: an agent's next session started %v after the probe's first success (want ≤ 10s)", p, lastStart.Round(time.Millisecond))
		}
		// Two sessions find the provider down, each with its CLI's own
		// retries; then one probe at a time, at most one per backoff step
		// (1, 2, 4, 4, … s), each with its CLI's retries.
		probes := 3 + int(recovered.Sub(seenDown[p])/(4*time.Second))
		if bound := (2 + probes) * cliAttempts[p]; during[p] > bound {
			t.Errorf("%s got %d requests during the outage, %v of it seen down (want ≤ %d)", p, during[p], recovered.Sub(seenDown[p]).Round(time.Second), bound)
		}
	}

	out, stderr, code = runCLI(t, nil, "", "status", "--json", "-c", cfg)
	rows = nil
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("status: %d %s %s", code, out, stderr)
	}
	for _, r := range rows {
		if r.ConsecutiveErrors != 0 || r.TotalErrors != 0 || r.State == "Stopped" {
			t.Errorf("%s after the outage: %s, errors %d/%d (%s)", r.Name, r.State, r.ConsecutiveErrors, r.TotalErrors, r.Reason)
		}
	}
	stopDaemon(t, d, repo)
	for _, l := range strings.Split(d.log(), "\n") {
		if strings.Contains(l, `"to":"Stopped"`) && !strings.Contains(l, `"actor":"daemon"`) {
			t.Errorf("an agent stopped during the outage: %s", l)
		}
	}
}

// cliAttempts is how many requests one session of each CLI makes for one
// turn against a provider that keeps failing, as the CLIs ship (their own
// retries included); a probe session's are capped where the CLI lets
// swarmd (Claude Code: one).
var cliAttempts = map[string]int{"claude": 11, "codex": 6, "gemini": 10}

func envInt(k string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(k), &n); err != nil {
		return def
	}
	return n
}
