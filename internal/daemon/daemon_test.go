package daemon

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/fence"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/store"
)

func TestMain(m *testing.M) {
	// The daemon starts its own executable as the lease guard on a shared
	// store: this test binary is that executable here.
	if len(os.Args) > 1 && os.Args[1] == fence.Command {
		os.Exit(fence.Main(os.Args[2:], os.Stdin, os.Stderr, func(owner, instance string) (int, error) {
			return proc.KillInstance(owner, instance, nil)
		}))
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(pgtest.Share()))
}

// base is a swarm of agents whose sessions run until cancelled, with a
// short grace, on no port.
const base = `
listen: ""
defaults:
  backend: worker
  grace_period: 1s
backends:
  worker:
    type: scripted
    steps: [{print: [busy], sleep: 1h}]
agents:
`

func agentsYAML(names ...string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, n := range names {
		b.WriteString("  - {name: " + n + ", role: works}\n")
	}
	return b.String()
}

// repo is a git repository with one commit and a swarmd.yaml of body;
// it returns the config's path.
func repo(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "init"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	path := filepath.Join(dir, "swarmd.yaml")
	writeFile(t, path, body)
	return path
}

func writeFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustLoad(t *testing.T, cfgPath string) *config.Config {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func open(t *testing.T, cfgPath string) *Daemon {
	t.Helper()
	d, err := Open(context.Background(), mustLoad(t, cfgPath), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// running is a daemon whose Run goroutine the test ends with stop.
type running struct {
	*Daemon
	cancel context.CancelFunc
	errc   chan error
}

func start(t *testing.T, cfgPath string) *running {
	t.Helper()
	d := open(t, cfgPath)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- d.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	waitFor(t, "the daemon ready", func() bool { return d.run.ready.Load() })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.errc:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *running) names() []string {
	n := r.reg.Names()
	slices.Sort(n)
	return n
}

func (r *running) isRunning(name string) bool {
	rn, err := r.reg.Runner(name)
	return err == nil && rn.Snapshot().State.Kind == agent.Running
}

func (r *running) waitRunning(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		waitFor(t, n+" Running", func() bool { return r.isRunning(n) })
	}
}

// TestReloadAddRemoveReAdd: a reload starts added agents, stops and drops
// removed ones, and an agent removed and put back while still stopping
// runs again once stopped, with one runner and its seq continuing.
func TestReloadAddRemoveReAdd(t *testing.T) {
	cfg := repo(t, agentsYAML("alice", "bob"))
	d := start(t, cfg)
	d.waitRunning(t, "alice", "bob")

	writeFile(t, cfg, agentsYAML("alice", "bob", "carol"))
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	d.waitRunning(t, "carol")

	// Remove bob, then put him back before his session has ended.
	writeFile(t, cfg, agentsYAML("alice", "carol"))
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	old, err := d.reg.Runner("bob")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg, agentsYAML("alice", "bob", "carol"))
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	<-old.Done()
	waitFor(t, "bob's new runner", func() bool {
		r, err := d.reg.Runner("bob")
		return err == nil && r != old && r.Snapshot().State.Kind == agent.Running
	})
	if got, want := d.names(), []string{"alice", "bob", "carol"}; !slices.Equal(got, want) {
		t.Fatalf("agents = %v, want %v", got, want)
	}
	bob, _ := d.reg.Runner("bob")
	if seq := bob.Snapshot().Seq; seq < 2 {
		t.Errorf("bob's new runner at seq %d: it should continue after his first session", seq)
	}

	// Remove carol for good: her runner goes once stopped.
	writeFile(t, cfg, agentsYAML("alice", "bob"))
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "carol dropped", func() bool { return !slices.Contains(d.reg.Names(), "carol") })
}

// TestReloadRefusedKeepsRunning: a config that fails any check changes
// nothing: the running config, agents and backends stay.
func TestReloadRefusedKeepsRunning(t *testing.T) {
	cfg := repo(t, agentsYAML("alice"))
	d := start(t, cfg)
	d.waitRunning(t, "alice")
	before, _ := d.current()
	for name, body := range map[string]string{
		"unknown backend": agentsYAML("alice") + "  - {name: bob, role: works, backend: nope}\n",
		"not yaml":        "agents: [",
	} {
		writeFile(t, cfg, body)
		if err := d.Reload(cfg); err == nil {
			t.Errorf("%s: reload accepted", name)
		}
		if now, _ := d.current(); now != before {
			t.Errorf("%s: the running config was replaced", name)
		}
		if got := d.names(); !slices.Equal(got, []string{"alice"}) {
			t.Errorf("%s: agents = %v", name, got)
		}
	}
}

// TestRecoveryAtOpen: Open closes the sessions a killed daemon left open,
// continues each agent's seq after its last session and keeps a fatal stop.
func TestRecoveryAtOpen(t *testing.T) {
	cfg := repo(t, agentsYAML("alice", "bob"))
	c, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), c.DBPath(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j := db.NewJournal(store.JournalOptions{})
	j.Start()
	t0 := time.Now().Add(-time.Hour)
	j.SessionStarted(store.SessionRecord{SessionID: "alice-4-x", Agent: "alice", Seq: 4, Started: t0})
	j.Agent(store.AgentRecord{Name: "bob", State: "Stopped", Seq: 2, TotalErrors: 5, StopKind: store.StopFatal, StopReason: "auth failed", UpdatedAt: t0})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()

	d := open(t, cfg)
	defer d.Close()
	if rc := d.run.recovered["alice"]; rc.seq != 5 || rc.stoppedReason != "" {
		t.Errorf("alice recovered as %+v, want seq 5, resumable", rc)
	}
	if rc := d.run.recovered["bob"]; rc.seq != 1 || rc.totalErrors != 5 || rc.stoppedReason != "auth failed" {
		t.Errorf("bob recovered as %+v, want seq 1, 5 errors, stopped for auth", rc)
	}
	ss, err := d.db.Sessions(context.Background(), "alice", 0)
	if err != nil || len(ss) != 1 || ss[0].Outcome != store.OutcomeOrphaned {
		t.Fatalf("alice's sessions = %+v, %v; want the open one orphaned", ss, err)
	}
}

// TestRunFailureStopsAgents: when Run fails after agents started (here the
// control socket cannot be made), it stops them before returning.
func TestRunFailureStopsAgents(t *testing.T) {
	cfg := repo(t, agentsYAML("alice", "bob"))
	d := open(t, cfg)
	defer d.Close()
	c, _ := d.current()
	// A non-empty directory where the socket goes: Listen cannot remove it.
	if err := os.MkdirAll(filepath.Join(c.SocketPath(), "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Run succeeded with no control socket")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	for _, r := range d.reg.Runners() {
		select {
		case <-r.Done():
		default:
			t.Errorf("agent %s still running after Run failed", r.Name())
		}
	}
}

// TestSetupErrors: what the operator must fix is a *SetupError.
func TestSetupErrors(t *testing.T) {
	cfg := repo(t, agentsYAML("alice"))
	d := open(t, cfg)
	defer d.Close()
	c, _ := d.current()
	_, err := Open(context.Background(), c, Options{})
	var se *SetupError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), strings.TrimSuffix(c.StateDir, "/")) {
		t.Fatalf("second Open on the same state dir = %v, want a SetupError naming it", err)
	}
}

// TestReloadKeepsWhatOnlyARestartApplies: a reload that changes a key only
// a restart applies (remote, lease_timeout) leaves the daemon on the
// running value, which the pushes and renewals read, while what a reload
// applies (stall_after) takes.
func TestReloadKeepsWhatOnlyARestartApplies(t *testing.T) {
	cfg := repo(t, agentsYAML("alice"))
	d := start(t, cfg)
	d.waitRunning(t, "alice")
	before, _ := d.current()
	writeFile(t, cfg, agentsYAML("alice")+"remote: elsewhere\nlease_timeout: 9s\nstall_after: 7m\n")
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	now, _ := d.current()
	if now.Remote != before.Remote || now.LeaseTimeout != before.LeaseTimeout {
		t.Errorf("after the reload: remote %q, lease_timeout %s; want the running %q, %s",
			now.Remote, now.LeaseTimeout, before.Remote, before.LeaseTimeout)
	}
	if now.StallAfter != 7*time.Minute {
		t.Errorf("stall_after = %s, want the reload's 7m", now.StallAfter)
	}
}

// TestReloadUpdatesTheMailRecipients: the daemon's own mail (the merge
// queue's word to a worker, the dashboard's messages) reaches an agent a
// reload added, and a broadcast goes to the agents of the config in force,
// not to the ones the daemon started with.
func TestReloadUpdatesTheMailRecipients(t *testing.T) {
	cfg := repo(t, agentsYAML("alice", "bob"))
	d := start(t, cfg)
	d.waitRunning(t, "alice", "bob")
	writeFile(t, cfg, agentsYAML("alice", "carol"))
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := d.mail.Send(ctx, mailbox.Draft{From: mailbox.Operator, To: "carol", Subject: "merge of task #1", Body: "it conflicts"}); err != nil {
		t.Errorf("mail to carol, whom the reload added: %v", err)
	}
	msgs, err := d.mail.Broadcast(ctx, mailbox.Draft{From: mailbox.Operator, Subject: "all", Body: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	var to []string
	for _, m := range msgs {
		to = append(to, m.To)
	}
	slices.Sort(to)
	if !slices.Equal(to, []string{"alice", "carol"}) {
		t.Errorf("broadcast to %v, want the agents of the config in force: alice and carol", to)
	}
}
