package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// TestDaemonsListAndForget: the list names each daemon with its agents and
// leases; a retired daemon is forgotten with its agents, a running one (its
// lease unexpired) and an unknown one are refused in one line, and a
// session may do neither.
func TestDaemonsListAndForget(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	now := time.Now()
	db, err := store.Open(ctx, s.path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.SetMembers(ctx, "old:/srv/a/.swarm", []store.Member{{Agent: "zed"}, {Agent: "amy"}}, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := db.SetMembers(ctx, "new:/srv/b/.swarm", []store.Member{{Agent: "bob"}}, now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.AcquireLeases(ctx, store.Lease{Daemon: "new:/srv/b/.swarm", Host: "new", PID: 1}, []string{"bob"}, now, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := db.SetDaemonSetting(ctx, "new:/srv/b/.swarm", "merge.into", "main"); err != nil {
		t.Fatal(err)
	}
	o, out := s.as("operator", "")
	run := func(opts daemonsOptions) error {
		opts.IO, opts.Now = o.IO, time.Now
		return daemonsRun(ctx, &opts)
	}

	if err := run(daemonsOptions{JSON: true}); err != nil {
		t.Fatal(err)
	}
	var ds []DaemonJSON
	if err := json.Unmarshal(out.Bytes(), &ds); err != nil {
		t.Fatalf("daemons --json: %v\n%s", err, out)
	}
	if len(ds) != 2 || ds[0].Daemon != "new:/srv/b/.swarm" || ds[0].Live != 1 || strings.Join(ds[1].Agents, ",") != "amy,zed" || ds[1].Live != 0 ||
		ds[0].MergeInto == nil || *ds[0].MergeInto != "main" || ds[1].MergeInto != nil {
		t.Fatalf("daemons --json = %+v; want new (bob, 1 live lease, into main), then old (amy, zed, none, no target recorded)", ds)
	}
	out.Reset()
	if err := run(daemonsOptions{}); err != nil {
		t.Fatal(err)
	}
	// The target and the leases end each line: "main 1 live", "- 0 live".
	tail := func(line string) string { f := strings.Fields(line); return strings.Join(f[max(0, len(f)-3):], " ") }
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 3 || !strings.Contains(lines[1], "bob") ||
		tail(lines[1]) != "main 1 live" || !strings.Contains(lines[2], "amy,zed") || tail(lines[2]) != "- 0 live" {
		t.Errorf("daemons:\n%s", out)
	}

	wantUsage(t, run(daemonsOptions{Forget: "new:/srv/b/.swarm"}),
		"daemons forget: daemon new:/srv/b/.swarm holds 1 unexpired agent lease(s): it runs; stop it (or wait for its leases to expire) first")
	wantUsage(t, run(daemonsOptions{Forget: "gone:/x"}),
		`daemons forget: no daemon "gone:/x" in the swarm's list (daemons: new:/srv/b/.swarm, old:/srv/a/.swarm)`)
	alice, _ := s.as("alice", "")
	wantUsage(t, daemonsRun(ctx, &daemonsOptions{IO: alice.IO, Now: time.Now, Forget: "old:/srv/a/.swarm"}),
		"daemons forget: an operator command; agent alice's session may not run it")

	out.Reset()
	if err := run(daemonsOptions{Forget: "old:/srv/a/.swarm"}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "forgot daemon old:/srv/a/.swarm and its 2 agent(s)") {
		t.Errorf("daemons forget said %q", out)
	}
	ms, err := db.Members(ctx)
	if err != nil || len(ms) != 1 || ms[0].Agent != "bob" {
		t.Errorf("members after forgetting the old daemon: %+v, %v; want new's bob alone", ms, err)
	}
}
