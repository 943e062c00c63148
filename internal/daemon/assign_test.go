package daemon

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/router"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// assignWakesTheIdleAgent runs bob alone (anyTask) on the store line given
// until he idles, then, from a connection of its own as `swarmd task`
// makes, adds a task for carol, whom the swarm does not have, and assigns
// it to bob: bob, idle, claims it at once (well within the router's
// safety-net poll, which an idle agent would otherwise wait for, if
// anything woke it at all) and finishes it. Between the two, mail wakes
// bob, so that the router has seen carol's task before the assign and
// only the assign's own change can wake him for it.
func assignWakesTheIdleAgent(t *testing.T, storeLine string) {
	ctx := context.Background()
	cfgPath := repo(t, "")
	writeFile(t, cfgPath, restartYAML(storeLine, anyTask, "bob"))
	r := start(t, cfgPath)
	waitFor(t, "bob idle", func() bool { return slices.Contains(r.reg.IdleAgents(), "bob") })

	db, err := store.Open(ctx, mustLoad(t, cfgPath).StoreTarget(), store.Options{NoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	op := taskboard.New(db, taskboard.Options{})
	tk, err := op.Add(ctx, taskboard.NewTask{Title: "carol's rework", Assignee: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := mailbox.New(ctx, db, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mb.Send(ctx, mailbox.Draft{From: mailbox.Operator, To: "bob", Subject: "hello", Body: "nothing to do"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob idle again, his mail read", func() bool {
		pending, err := mb.PendingCounts(ctx)
		return err == nil && pending["bob"] == 0 && slices.Contains(r.reg.IdleAgents(), "bob")
	})
	if got, err := op.Get(ctx, tk.ID); err != nil || got.State != task.Open || got.Claimant != "" {
		t.Fatalf("carol's task before the assign: %+v, %v; want OPEN, unclaimed", got, err)
	}
	if _, err := op.Assign(ctx, tk.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	assigned := time.Now()
	waitFor(t, "bob claiming the task assigned to him", func() bool {
		got, err := op.Get(ctx, tk.ID)
		return err == nil && got.Claimant == "bob"
	})
	if took := time.Since(assigned); took >= router.WatchedInterval {
		t.Errorf("bob claimed the task %v after its assign, not before the router's safety-net poll (%v): the assign did not wake him",
			took, router.WatchedInterval)
	}
	got, h := ended(t, r, tk.ID)
	if got.State != task.Closed || got.Retries != 0 {
		t.Fatalf("task %s with %d retries, history %+v; want CLOSED by bob", got.StateName, got.Retries, h)
	}
	var path []string
	for _, e := range h {
		path = append(path, fmt.Sprintf("%s>%s %s %s", e.From, e.To, e.TransitionReason, e.Actor))
	}
	want := []string{">OPEN  operator", "OPEN>OPEN assigned operator", "OPEN>CLAIMED  agent:bob", "CLAIMED>IN_PROGRESS  agent:bob",
		"IN_PROGRESS>DONE completed agent:bob", "DONE>CLOSED completed swarmd"}
	if !slices.Equal(path, want) {
		t.Errorf("history %q, want %q", path, want)
	}
}

// TestAssignWakesTheIdleAgent: on swarm.db, the commit wakes the router
// through its WAL watch, and the open board's version tells it that bob
// has work now.
func TestAssignWakesTheIdleAgent(t *testing.T) {
	assignWakesTheIdleAgent(t, "")
}

// TestAssignWakesTheIdleAgentOnASharedStore: on PostgreSQL, the tasks'
// trigger notifies the daemons that the open board changed.
func TestAssignWakesTheIdleAgentOnASharedStore(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "assignwakes")
	assignWakesTheIdleAgent(t, fmt.Sprintf("store: %s\nlease_timeout: 2s\n", srv.URL(dbName)))
}
