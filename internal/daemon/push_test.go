package daemon

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// committer is a swarm whose agents' sessions each make one commit, then
// say DONE (and idle: no mail, no task).
const committer = `
listen: ""
defaults:
  backend: worker
  grace_period: 1s
  min_session_interval: 0s
backends:
  worker:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; git commit -q --allow-empty -m \"work of $SWARM_AGENT_ID\"; printf 'did it\nDONE\n'"]
agents:
`

func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// TestPushAfterSession: with a remote, the branch of an agent whose session
// made a commit is pushed there, at the agent's head.
func TestPushAfterSession(t *testing.T) {
	bare := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
		t.Fatalf("git init --bare: %v: %s", err, out)
	}
	cfg := repo(t, "remote: "+bare+"\n"+committer+"  - {name: alice, role: works}\n")
	d := start(t, cfg)
	dir := filepath.Dir(cfg)
	waitFor(t, "alice's commit on the remote", func() bool {
		local := gitOut(t, "-C", dir, "rev-parse", "refs/heads/swarm/alice")
		remote := gitOut(t, "--git-dir", bare, "rev-parse", "refs/heads/swarm/alice")
		base := gitOut(t, "-C", dir, "rev-parse", "refs/heads/main")
		return remote != "" && remote == local && remote != base
	})
	d.stop(t)
	if got := gitOut(t, "--git-dir", bare, "log", "-1", "--format=%s", "refs/heads/swarm/alice"); !strings.HasPrefix(got, "work of alice") {
		t.Errorf("remote swarm/alice's commit = %q, want alice's work", got)
	}
}

// TestNoRemoteNoPush: without a remote nothing is pushed (and nothing fails).
func TestNoRemoteNoPush(t *testing.T) {
	cfg := repo(t, committer+"  - {name: alice, role: works}\n")
	d := start(t, cfg)
	dir := filepath.Dir(cfg)
	waitFor(t, "alice's commit", func() bool {
		return gitOut(t, "-C", dir, "rev-parse", "refs/heads/swarm/alice") != gitOut(t, "-C", dir, "rev-parse", "refs/heads/main")
	})
	d.stop(t)
}
