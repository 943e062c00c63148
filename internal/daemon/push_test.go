package daemon

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// taskWorker is a swarm of one agent, alice, whose sessions on a task
// each commit a line to w.txt, then say DONE.
const taskWorker = `
listen: ""
defaults:
  backend: worker
  grace_period: 1s
  min_session_interval: 0s
backends:
  worker:
    type: command
    command: sh
    args: [-c, "p=$(cat); case \"$p\" in *'Your task: #'*) echo w >> w.txt; git add w.txt; git -c user.name=t -c user.email=t@example.invalid commit -q -m work;; esac; printf 'did it\nDONE\n'"]
agents:
  - {name: alice, role: works}
`

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
		local := gitOut(t, "-C", dir, "rev-parse", "refs/heads/swarm/alice/work")
		remote := gitOut(t, "--git-dir", bare, "rev-parse", "refs/heads/swarm/alice/work")
		base := gitOut(t, "-C", dir, "rev-parse", "refs/heads/main")
		return remote != "" && remote == local && remote != base
	})
	waitFor(t, "the push counted", func() bool { return pushes(t, d.Daemon, "ok") >= 1 })
	d.stop(t)
	if got := gitOut(t, "--git-dir", bare, "log", "-1", "--format=%s", "refs/heads/swarm/alice/work"); !strings.HasPrefix(got, "work of alice") {
		t.Errorf("remote swarm/alice/work's commit = %q, want alice's work", got)
	}
	if n := pushes(t, d.Daemon, "failed"); n != 0 {
		t.Errorf("swarmd_pushes_total{result=failed} = %v, want 0", n)
	}
}

// pushes is swarmd_pushes_total{result}.
func pushes(t *testing.T, d *Daemon, result string) float64 {
	t.Helper()
	fams, err := d.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "swarmd_pushes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no swarmd_pushes_total{result=%q}", result)
	return 0
}

// TestNoRemoteNoPush: without a remote nothing is pushed.
func TestNoRemoteNoPush(t *testing.T) {
	cfg := repo(t, committer+"  - {name: alice, role: works}\n")
	d := start(t, cfg)
	dir := filepath.Dir(cfg)
	waitFor(t, "alice's commit", func() bool {
		return gitOut(t, "-C", dir, "rev-parse", "refs/heads/swarm/alice/work") != gitOut(t, "-C", dir, "rev-parse", "refs/heads/main")
	})
	d.stop(t) // the pusher is drained and joined
	if n := pushes(t, d.Daemon, "ok") + pushes(t, d.Daemon, "failed"); n != 0 {
		t.Errorf("%v pushes without a remote, want none", n)
	}
}

// TestPushAtStart: a daemon pushes its agents' branches as they are when
// it starts: one killed before its push leaves none behind.
func TestPushAtStart(t *testing.T) {
	bare := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
		t.Fatalf("git init --bare: %v: %s", err, out)
	}
	cfg := repo(t, "remote: "+bare+"\n"+agentsYAML("alice"))
	dir := filepath.Dir(cfg)
	for _, args := range [][]string{
		{"branch", "swarm/alice/work"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit-tree", "-p", "swarm/alice/work", "-m", "unpushed", "swarm/alice/work^{tree}"},
	} {
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		if c := strings.TrimSpace(string(out)); c != "" {
			if out, err := exec.Command("git", "-C", dir, "update-ref", "refs/heads/swarm/alice/work", c).CombinedOutput(); err != nil {
				t.Fatalf("update-ref: %v: %s", err, out)
			}
		}
	}
	head := gitOut(t, "-C", dir, "rev-parse", "refs/heads/swarm/alice/work")
	d := start(t, cfg)
	waitFor(t, "alice's branch on the remote", func() bool {
		return gitOut(t, "--git-dir", bare, "rev-parse", "refs/heads/swarm/alice/work") == head
	})
	d.stop(t)
}
