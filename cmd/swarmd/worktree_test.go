package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWorktreeListAndPrune(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  grace_period: 1s
backends:
  committer:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; echo work > work.txt && git add work.txt && git -c user.name=a -c user.email=a@example.invalid commit -qm 'agent work'; echo dirty > scratch.txt; exec sleep 3600"]
  idle:
    type: scripted
    steps: [{sleep: 1h}]
agents:
  - {name: alice, role: commits, backend: committer}
  - {name: bob, role: idles, backend: idle}
`)
	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	d.waitLine("bob Running", transitionTo("bob", "Running"))
	scratch := filepath.Join(repo, ".swarm", "worktrees", "alice", "scratch.txt")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(scratch); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("alice's session never committed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, stderr, code := runCLI(t, nil, "", "worktree", "prune", "bob", "-c", cfg); code != 2 || !strings.Contains(stderr, "stop it first") {
		t.Errorf("prune of a running agent: %d %q", code, stderr)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}

	// The session record counts the commit alice's session made.
	sqldb, err := sql.Open("sqlite", "file:"+filepath.Join(repo, ".swarm", "swarm.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	var commits int
	var before, after string
	if err := sqldb.QueryRow(`SELECT commits, head_before, head_after FROM sessions WHERE agent = 'alice'`).Scan(&commits, &before, &after); err != nil || commits != 1 || before == after {
		t.Errorf("alice's session record: commits %d, head %s..%s, %v", commits, before, after, err)
	}

	out, stderr, code := runCLI(t, nil, "", "worktree", "list", "--json", "-c", cfg)
	if code != 0 {
		t.Fatalf("list: %s", stderr)
	}
	var sts []struct {
		Agent      string
		Ahead      int
		Dirty      bool
		DirtyFiles []string
	}
	if err := json.Unmarshal([]byte(out), &sts); err != nil || len(sts) != 2 {
		t.Fatalf("list --json: %v %s", err, out)
	}
	if sts[0].Agent != "alice" || sts[0].Ahead != 1 || !sts[0].Dirty || sts[1].Agent != "bob" || sts[1].Ahead != 0 || sts[1].Dirty {
		t.Errorf("list = %+v", sts)
	}
	out, _, _ = runCLI(t, nil, "", "worktree", "list", "-c", cfg)
	if !strings.Contains(out, "swarm/alice/work") || !strings.Contains(out, "1 files") {
		t.Errorf("list table:\n%s", out)
	}
	// alice has uncommitted and unmerged work: refused, nothing touched.
	_, stderr, code = runCLI(t, nil, "", "worktree", "prune", "alice", "-c", cfg)
	if code != 2 || !strings.Contains(stderr, "alice") {
		t.Errorf("prune alice: %d %q", code, stderr)
	}
	if _, err := os.Stat(scratch); err != nil {
		t.Errorf("refused prune touched alice's worktree: %v", err)
	}
	// bob's is clean and merged: removed.
	if out, stderr, code := runCLI(t, nil, "", "worktree", "prune", "bob", "-c", cfg); code != 0 {
		t.Fatalf("prune bob: %s %s", out, stderr)
	}
	if _, err := os.Stat(filepath.Join(repo, ".swarm", "worktrees", "bob")); !os.IsNotExist(err) {
		t.Errorf("bob's worktree still there: %v", err)
	}
}
