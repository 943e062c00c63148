package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// TestSwarmHasOneMergeTarget: on a shared store, a daemon whose config
// has no merge queue, or another target, than a daemon that runs is
// refused at start, in one line naming both, and changes nothing the
// swarm's commands follow; one with the same target starts. Once every
// daemon has stopped, the target can change.
func TestSwarmHasOneMergeTarget(t *testing.T) {
	t.Parallel() // its own repositories, daemons and database; mostly waiting on sessions
	srv := pgtest.Shared(t)
	url := srv.URL(srv.NewDB(t, "onetarget"))
	out := t.TempDir()
	config := func(agent, top string) string {
		cfg := fenceConfig(t, fenceCfg{Store: url, Lease: "3s", Out: out, Who: agent, Script: sleeperScript, Agent: agent, Top: top})
		if b, err := exec.Command("git", "-C", filepath.Dir(cfg), "branch", "trunk").CombinedOutput(); err != nil {
			t.Fatalf("git branch trunk: %v\n%s", err, b)
		}
		return cfg
	}
	const toMain = `merge: {into: main, gate: ["true"]}`
	a := startDaemon(t, config("x", toMain))
	a.waitLine("x Running", transitionTo("x", "Running"))

	for _, c := range []struct{ top, says string }{
		{"", `merge.into: this config has no merge queue, but daemon `},
		{`merge: {into: trunk, gate: ["true"]}`, `merge.into: this config merges into "trunk", but daemon `},
	} {
		b := startDaemon(t, config("y", c.top))
		if code := b.wait(30 * time.Second); code != 2 {
			t.Fatalf("a daemon with %q beside one merging into main exited %d, want 2 (refused); log:\n%s", c.top, code, b.log())
		}
		if log := b.log(); !strings.Contains(log, c.says) || !strings.Contains(log, `which runs on this store, merges into "main": a swarm has one merge target`) {
			t.Errorf("the refusal of %q does not say %q and why:\n%s", c.top, c.says, log)
		}
	}
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if into, _, err := db.Setting(context.Background(), "merge.into"); err != nil || into != "main" {
		t.Fatalf("the swarm's merge.into after the refusals = %q, %v; want main, as the running daemon set it", into, err)
	}

	same := startDaemon(t, config("y", toMain))
	same.waitLine("y Running", transitionTo("y", "Running"))
	for _, d := range []*daemonProc{a, same} {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		if code := d.wait(30 * time.Second); code != 0 {
			t.Fatalf("a daemon's stop exited %d", code)
		}
	}
	// None runs: a new target is the swarm's.
	moved := startDaemon(t, config("x", `merge: {into: trunk, gate: ["true"]}`))
	moved.waitLine("x Running", transitionTo("x", "Running"))
	if into, _, err := db.Setting(context.Background(), "merge.into"); err != nil || into != "trunk" {
		t.Errorf("the swarm's merge.into once every daemon stopped and one started with trunk = %q, %v", into, err)
	}
	_ = moved.cmd.Process.Signal(syscall.SIGTERM)
	moved.wait(30 * time.Second)

	// Two daemons with different targets started together: one is
	// refused and gives its agent's lease up, the other runs. (That a
	// claim racing another's is refused, however close, is the store
	// contract's ClaimDaemonSettingRaced: processes rarely meet so close.)
	x := startDaemon(t, config("x", toMain))
	y := startDaemon(t, config("y", `merge: {into: trunk, gate: ["true"]}`))
	refused, runs, agent := x, y, "y"
	select {
	case <-x.done:
	case <-y.done:
		refused, runs, agent = y, x, "x"
	case <-time.After(30 * time.Second):
		t.Fatalf("two daemons with different targets both run; logs:\n%s\n%s", x.log(), y.log())
	}
	if code := refused.wait(time.Second); code != 2 || !strings.Contains(refused.log(), "a swarm has one merge target") {
		t.Fatalf("of two daemons started together with different targets, one exited %d; want 2, refused for its target:\n%s", code, refused.log())
	}
	runs.waitLine(agent+" Running", transitionTo(agent, "Running"))
	leases, err := db.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 1 || leases[0].Agent != agent {
		t.Errorf("leases after the refusal = %+v; want the running daemon's %s alone (the refused one gives its up)", leases, agent)
	}
	_ = runs.cmd.Process.Signal(syscall.SIGTERM)
	runs.wait(30 * time.Second)
}
