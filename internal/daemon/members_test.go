package daemon

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// sharedConfig is a config on the shared store url with agents (YAML flow
// maps, one per agent).
func sharedConfig(t *testing.T, url string, agents ...string) *config.Config {
	t.Helper()
	body := "store: " + url + "\nagents:\n"
	for _, a := range agents {
		body += "  - " + a + "\n"
	}
	cfg, err := config.Parse([]byte(body), repo(t, body))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// sharedStore is a fresh database of its own on the test's PostgreSQL
// server, open, and its URL.
func sharedStore(t *testing.T, name string) (*store.DB, string) {
	t.Helper()
	srv := pgtest.Shared(t)
	name = srv.NewDB(t, name)
	url := srv.URL(name)
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, url
}

// TestDaemonsSharingAStoreKeepTheirAgentsReviewers: a session's own `swarmd
// task claim` reads no config, so the review its claim starts is what the
// daemons recorded. Each daemon's agents keep their reviewers whichever
// daemon recorded last; an agent two configs name goes by the daemon that
// holds its lease.
func TestDaemonsSharingAStoreKeepTheirAgentsReviewers(t *testing.T) {
	db, url := sharedStore(t, "members_review")
	ctx := context.Background()

	a := sharedConfig(t, url, "{name: alice, role: works, reviewer: rita, max_iterations: 2}", "{name: rita, role: reviews, claims: false}")
	b := sharedConfig(t, url, "{name: bob, role: works}")
	c := sharedConfig(t, url, "{name: alice, role: works}") // a standby naming alice with no reviewer
	if _, _, err := db.AcquireLeases(ctx, store.Lease{Daemon: "host-a:/a", Host: "host-a", PID: 1}, []string{"alice", "rita"}, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name string
		cfg  *config.Config
	}{{"host-a:/a", a}, {"host-b:/b", b}, {"host-c:/c", c}} { // c records last
		if err := RecordMembers(ctx, db, d.name, d.cfg); err != nil {
			t.Fatal(err)
		}
	}
	p, err := RecordedReviewPolicy(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		agent, reviewer string
		max             int
		only            bool
	}{{"alice", "rita", 2, false}, {"rita", "", 3, true}, {"bob", "", 3, false}, {"zed", "", 0, false}} {
		r, max := p.ReviewerOf(tc.agent)
		if r != tc.reviewer || max != tc.max || p.ReviewOnly(tc.agent) != tc.only {
			t.Errorf("%s: reviewer %q, max %d, review only %v; want %q, %d, %v", tc.agent, r, max, p.ReviewOnly(tc.agent), tc.reviewer, tc.max, tc.only)
		}
	}

	// The claim a session of alice's makes starts rita's review.
	board, err := OpenTaskBoard(ctx, db, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := board.Add(ctx, taskboard.NewTask{Title: "the work"}); err != nil {
		t.Fatal(err)
	}
	tk, ok, err := board.ClaimNext(ctx, "alice", "alice-1")
	if err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	if tk.Reviewer != "rita" || tk.ReviewState == "" {
		t.Errorf("claimed task: reviewer %q, review state %q; want rita's review started", tk.Reviewer, tk.ReviewState)
	}
}

// TestSwarmAgentsOfASharedStore: on a store several daemons share, the
// agents a command may name are those the daemons' configs name as each
// last recorded them, and those whose lease a daemon holds; an agent a
// reload removed from its daemon's config is not one, so a task assigned
// to it waits for a person (the inbox's flag).
func TestSwarmAgentsOfASharedStore(t *testing.T) {
	db, url := sharedStore(t, "members_swarm")
	ctx := context.Background()

	if err := RecordMembers(ctx, db, "host-a:/a", sharedConfig(t, url, "{name: alice, role: works}")); err != nil {
		t.Fatal(err)
	}
	if err := RecordMembers(ctx, db, "host-b:/b", sharedConfig(t, url, "{name: bob, role: works}", "{name: bea, role: works}")); err != nil {
		t.Fatal(err)
	}
	// dave's daemon holds his lease and has recorded nothing (a daemon of
	// the release before, during a rolling upgrade).
	if _, _, err := db.AcquireLeases(ctx, store.Lease{Daemon: "host-d:/d", Host: "host-d", PID: 1}, []string{"dave"}, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	// An agent only the history knows.
	if err := db.ResetAgent(ctx, "old", time.Now(), ""); err != nil {
		t.Fatal(err)
	}
	operator := sharedConfig(t, url, "{name: carol, role: works}")
	want := func(names ...string) {
		t.Helper()
		got, err := SwarmAgents(ctx, db, operator)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, names) {
			t.Errorf("SwarmAgents = %v, want %v", got, names)
		}
	}
	want("alice", "bea", "bob", "carol", "dave")

	board, err := OpenTaskBoard(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "for bob", Assignee: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := mailbox.New(ctx, db, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	unknown := func() bool {
		swarm, err := SwarmAgents(ctx, db, operator)
		if err != nil {
			t.Fatal(err)
		}
		st, err := ReadNeeds(ctx, db, board, mb, []string{}, swarm)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range st.Tasks {
			if n.ID == tk.ID {
				return n.AssigneeUnknown
			}
		}
		return false
	}
	if unknown() {
		t.Fatalf("task %d flagged while bob's daemon names him", tk.ID)
	}
	// host-b's reload drops bob.
	if err := RecordMembers(ctx, db, "host-b:/b", sharedConfig(t, url, "{name: bea, role: works}")); err != nil {
		t.Fatal(err)
	}
	want("alice", "bea", "carol", "dave")
	if !unknown() {
		t.Errorf("task %d assigned to bob, whom no daemon runs any more: not flagged in the inbox", tk.ID)
	}
}
