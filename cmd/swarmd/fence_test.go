package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// sleeperScript is agent x's session on either daemon: it counts its
// sessions in a file of its daemon's and sleeps.
const sleeperScript = `echo started >> "$OUT/$WHO"; exec sleep 3600`

// fenceCfg is a daemon of the fencing tests: agent x alone, on the shared
// store, its sessions running Script (sleeperScript's shape: OUT and WHO
// in their environment).
type fenceCfg struct {
	Isolation        string // "" : off
	Store, Lease     string
	Out, Who, Script string
	AgentExtra       string // more keys of agent x ("min_session_interval: 50ms")
	SandboxWritesOut bool   // the sandbox may write Out
	Agent            string // the agent's name ("": x)
	Top              string // more top-level keys, a line each ("merge: {into: main}")
}

// fenceConfig writes c's config in a new repository and returns its path.
func fenceConfig(t *testing.T, c fenceCfg) string {
	t.Helper()
	iso := cmp.Or(c.Isolation, "off")
	sandbox := ""
	if c.SandboxWritesOut {
		sandbox = fmt.Sprintf("sandbox: {writable: [%q]}\n", c.Out)
	}
	extra := ""
	if c.AgentExtra != "" {
		extra = ", " + c.AgentExtra
	}
	if c.Top != "" {
		sandbox += c.Top + "\n"
	}
	return writeConfig(t, gitRepo(t), fmt.Sprintf(`
listen: ""
isolation: %s
%sstore: %q
lease_timeout: %s
defaults:
  env: {OUT: %q, WHO: %s}
  grace_period: 1s
backends:
  sleeper: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: %s, role: works, backend: sleeper%s}
`, iso, sandbox, c.Store, c.Lease, c.Out, c.Who, c.Script, cmp.Or(c.Agent, "x"), extra))
}

// TestPausedDaemonNeverRunsAlongsideItsSuccessor: daemon A runs agent x on
// a shared PostgreSQL store and is stopped (SIGSTOP) past its lease. Its
// lease guard kills x's session before the lease runs out; daemon B then
// takes x and runs it. When A continues (SIGCONT) it finds the lease gone:
// it starts no session of x and its writes for x are refused. Two sessions
// of x never run at once, by the processes and by the sessions table.
// With cgroups the guard kills the daemon's cgroup (cgroup.kill); with
// isolation off, the processes marked as the daemon's.
func TestPausedDaemonNeverRunsAlongsideItsSuccessor(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	srv := pgtest.Shared(t)
	for _, iso := range []string{"auto", "off"} {
		t.Run("isolation="+iso, func(t *testing.T) {
			db := srv.NewDB(t, "fence")
			testPausedDaemon(t, srv.URL(db), iso)
		})
	}
}

func testPausedDaemon(t *testing.T, url, isolation string) {
	out := t.TempDir()
	config := func(who string) string {
		return fenceConfig(t, fenceCfg{Isolation: isolation, SandboxWritesOut: true, Store: url, Lease: "2s",
			Out: out, Who: who, Script: sleeperScript})
	}
	started := func(who string) int {
		b, _ := os.ReadFile(filepath.Join(out, who))
		return strings.Count(string(b), "started")
	}
	cfgA, cfgB := config("a"), config("b")
	// A daemon's session processes, by their marker (the host's view: a
	// session's own pid is its sandbox's).
	running := func(cfg string) bool { return len(treeProcesses(filepath.Join(filepath.Dir(cfg), ".swarm"))) > 0 }
	a := startDaemon(t, cfgA)
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		if t.Failed() {
			t.Logf("daemon A's log:\n%s", a.log())
		}
	})
	var pids []int
	waitUntil(t, "x's session on A", func() bool {
		pids = treePids(filepath.Join(filepath.Dir(cfgA), ".swarm"))
		return started("a") == 1 && len(pids) > 0
	})

	// A stops, as a paused VM would: its guard kills x's session before
	// the lease (2 s) runs out.
	stoppedAt := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "A's session killed by its lease guard", func() bool { return ended(pids) && !running(cfgA) })
	killed := time.Now()
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ls, err := db.Leases(context.Background())
	if err != nil || len(ls) != 1 {
		t.Fatalf("leases: %+v, %v", ls, err)
	}
	if !killed.Before(ls[0].Expires) {
		t.Errorf("A's session was seen dead at %s, after its lease expired at %s (stopped at %s)", killed, ls[0].Expires, stoppedAt)
	}

	// B takes x once the lease has expired.
	time.Sleep(time.Until(ls[0].Expires) + 100*time.Millisecond)
	b := startDaemon(t, cfgB)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon B's log:\n%s", b.log())
		}
	})
	waitUntil(t, "x's session on B", func() bool { return started("b") == 1 && running(cfgB) })

	// A continues: the lease is B's. A starts nothing and writes nothing
	// for x.
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a.waitNext("A sees its lease lost", func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "agent leases lost")
	})
	// Two renewals later the loss is still told once, as an error; the
	// renewals between say so at debug level.
	for range 2 {
		a.waitNext("a renewal of A that finds the lease still lost", func(m map[string]any) bool {
			return m["msg"] == "agent leases still lost"
		})
	}
	if n := strings.Count(a.log(), `"msg":"agent leases lost`); n != 1 {
		t.Errorf("A logged its lease lost %d times, want once", n)
	}
	// Long enough for A to try: a session start and its settlement.
	a.waitLine("A waits on the lease", func(m map[string]any) bool {
		return strings.Contains(fmt.Sprint(m["error"]), "no longer holds its lease")
	})
	if n := started("a"); n != 1 || running(cfgA) {
		t.Fatalf("A started another session of x after losing the lease (%d in all, running: %v)", n, running(cfgA))
	}
	if !running(cfgB) {
		t.Fatal("B's session of x is gone")
	}

	// x's row in the agents table is its holder's, B's: a session running.
	// A's runner holds x's settlement until the lease is its again, and
	// moves x nowhere meanwhile (a row written then would be what a
	// restart of B recovers x from).
	ags, err := db.Agents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ags["x"].State, "Running"; got != want {
		t.Errorf("x's agent row says %s (seq %d, updated %s), want %s: B's, the lease holder's", got, ags["x"].Seq, ags["x"].UpdatedAt, want)
	}

	// The sessions table: x's sessions never overlap.
	ss, err := db.Sessions(context.Background(), "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 {
		t.Fatalf("x's sessions: %+v; want A's and B's", ss)
	}
	first, second := ss[0], ss[1]
	if first.Started.After(second.Started) {
		first, second = second, first
	}
	if first.Ended == nil || first.Ended.After(second.Started) {
		t.Errorf("x's sessions overlap: %s ran %s–%v, %s started %s", first.SessionID, first.Started, first.Ended, second.SessionID, second.Started)
	}

	// One SIGTERM stops A (an operator's systemctl stop) while B runs x:
	// the outcome of A's session, refused for good since the lease is B's
	// (B closed that session as orphaned), is given up, not waited for.
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(10 * time.Second)
	a.waitLine("A gives up its session's outcome", func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "the session's outcome is not recorded: this daemon lost the agent's lease")
	})
	if !running(cfgB) {
		t.Error("B's session of x is gone after A stopped")
	}
	// A's stop moved its runner of x to Stopped: x's row stays B's.
	if ags, err = db.Agents(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ags["x"]; got.State != "Running" || got.Seq != second.Seq {
		t.Errorf("x's agent row says %s (seq %d, stop %q) after A stopped, want B's: Running, seq %d", got.State, got.Seq, got.StopReason, second.Seq)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.wait(30 * time.Second)
}

// TestLeaseGuardKillIsRecordedAsSuch: daemon A, alone on a shared store,
// is stopped (SIGSTOP) until its lease guard kills x's session, and
// continues before anyone takes x: its renewal succeeds and it records
// the session. The guard's SIGKILL is not swarmd's force stop, and it is
// not the OOM killer's either: the session's abort reason is
// parent_aborted (swarmd ended it: its daemon could not keep the lease),
// not oom.
func TestLeaseGuardKillIsRecordedAsSuch(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	srv := pgtest.Shared(t)
	for _, iso := range []string{"auto", "off"} {
		t.Run("isolation="+iso, func(t *testing.T) {
			db := srv.NewDB(t, "guardkill")
			testGuardKill(t, srv.URL(db), iso)
		})
	}
}

func testGuardKill(t *testing.T, url, isolation string) {
	out := t.TempDir()
	cfg := writeConfig(t, gitRepo(t), fmt.Sprintf(`
listen: ""
isolation: %s
sandbox: {writable: [%q]}
store: %q
lease_timeout: 2s
defaults:
  env: {OUT: %q, WHO: a}
  grace_period: 1s
backends:
  sleeper: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: x, role: works, backend: sleeper}
`, isolation, out, url, out, sleeperScript))
	stateDir := filepath.Join(filepath.Dir(cfg), ".swarm")
	a := startDaemon(t, cfg)
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		if t.Failed() {
			t.Logf("daemon A's log:\n%s", a.log())
		}
	})
	var pids []int
	waitUntil(t, "x's session on A", func() bool { pids = treePids(stateDir); return len(pids) > 0 })
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "A's session killed by its lease guard", func() bool { return ended(pids) && len(treePids(stateDir)) == 0 })
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var first store.SessionRecord
	waitUntil(t, "x's first session recorded", func() bool {
		ss, err := db.Sessions(context.Background(), "x", 0)
		for _, s := range ss {
			if s.Seq == 1 && s.Ended != nil {
				first = s
			}
		}
		return err == nil && first.Ended != nil
	})
	if first.AbortReason != "parent_aborted" || first.Signal != "SIGKILL" {
		t.Errorf("x's session killed by the lease guard: abort reason %q, signal %q, reason %q; want parent_aborted, SIGKILL",
			first.AbortReason, first.Signal, first.Reason)
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(30 * time.Second)
}
