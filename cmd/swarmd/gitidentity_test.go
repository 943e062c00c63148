package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/cli"
)

// TestSessionsCommitWithTheirOwnIdentity: a session whose git sees no
// config at all (GIT_CONFIG_GLOBAL=/dev/null, as Gemini CLI runs its shell
// commands, and user.useConfigOnly so that git guesses nothing) still
// commits, as "AGENT (swarmd)" <AGENT@git_email_domain>, and a GIT_*
// variable in an agent's env wins. An agent whose sessions succeed but
// never commit shows "no commits" in status.
func TestSessionsCommitWithTheirOwnIdentity(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
git_email_domain: agents.example.com
defaults:
  backend: committer
  min_session_interval: 0s
  max_sessions: 5
backends:
  committer:
    type: command
    command: /bin/sh
    args: [-c, 'HOME=/nonexistent GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 git -c user.useConfigOnly=true commit -q --allow-empty -m "work of $SWARM_AGENT_ID"']
  talker:
    type: command
    command: "true"
agents:
  - {name: alice, role: commits}
  - {name: bob, role: commits, env: {GIT_AUTHOR_EMAIL: bob@corp.example}}
  - {name: carol, role: talks, backend: talker}
`)
	d := startDaemon(t, cfg)
	for _, a := range []string{"alice", "bob", "carol"} {
		d.waitLine(a+" stopped after 5 sessions", func(m map[string]any) bool {
			return transitionTo(a, "Stopped")(m) && strings.HasPrefix(m["reason"].(string), "max_sessions")
		})
	}
	for branch, want := range map[string]string{
		"swarm/alice/work": "alice (swarmd) <alice@agents.example.com> alice (swarmd) <alice@agents.example.com>",
		"swarm/bob/work":   "bob (swarmd) <bob@corp.example> bob (swarmd) <bob@agents.example.com>",
	} {
		out, err := exec.Command("git", "-C", repo, "log", "-1", "--format=%an <%ae> %cn <%ce>", branch).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("%s: last commit by %q (%v), want %q", branch, got, err, want)
		}
	}
	if strings.Contains(d.log(), `"SessionExited(Error)"`) {
		t.Errorf("a session failed; log:\n%s", d.log())
	}

	// The journal writes sessions in batches: poll status until carol's
	// five sessions are counted.
	health := map[string]string{}
	deadline := time.Now().Add(10 * time.Second)
	for health["carol"] != "no commits" && time.Now().Before(deadline) {
		out, stderr, code := runCLI(t, nil, "", "status", "--json", "-c", cfg)
		var rows []cli.StatusRow
		if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil {
			t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, stderr)
		}
		for _, r := range rows {
			health[r.Name] = r.Health
		}
		time.Sleep(50 * time.Millisecond)
	}
	if health["carol"] != "no commits" || health["alice"] != "" || health["bob"] != "" {
		t.Errorf("status health = %v, want \"no commits\" for carol alone", health)
	}
	out, _, _ := runCLI(t, nil, "", "status", "-c", cfg)
	if !strings.Contains(grepLines(out, "carol"), "no commits") {
		t.Errorf("status table lacks carol's \"no commits\":\n%s", out)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
