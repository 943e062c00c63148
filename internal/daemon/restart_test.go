package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// The workers of the restart tests. beforeStop starts on a task it is given
// (an uncommitted file in its worktree, its partial work) and works until
// stopped; with nothing to do it says DONE and idles. afterStop finishes
// the task its previous session worked on where that work is (DONE), and
// fails one it is handed anew or without its partial work; anyTask
// finishes any task.
const (
	beforeStop = `p=$(cat); if echo "$p" | grep -q "Your task: #"; then echo partial > partial.txt; echo working; exec sleep 3600; fi; echo idle; echo DONE`
	afterStop  = `p=$(cat); if echo "$p" | grep -q "Continue your task #" && test -f partial.txt; then echo "finished what I started"; echo DONE; exit 0; fi; ` +
		`if echo "$p" | grep -q "^## Tasks"; then echo "FAIL: my work is not here"; exit 0; fi; echo idle; echo DONE`
	anyTask = `cat >/dev/null; echo done; echo DONE`
)

// restartYAML is a swarm of agents running script, on the store line
// given ("" : swarm.db).
func restartYAML(storeLine, script string, agents ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `%slisten: ""
defaults:
  backend: worker
  grace_period: 2s
  min_session_interval: 0s
backends:
  worker: {type: command, command: sh, args: [-c, %q]}
agents:
`, storeLine, script)
	for _, a := range agents {
		b.WriteString("  - {name: " + a + ", role: works}\n")
	}
	return b.String()
}

// workUntilStopped runs a daemon of alice and bob on cfgPath (beforeStop)
// until one of them works on a task, stops it in order, and returns the
// task and the agent that held it.
func workUntilStopped(t *testing.T, cfgPath, storeLine string) (taskboard.Task, string) {
	t.Helper()
	r, tk, holder := startWorking(t, cfgPath, storeLine)
	r.stop(t)
	return tk, holder
}

// startWorking runs a daemon of alice and bob on cfgPath (beforeStop) until
// one of them works on a task, and returns the daemon, the task and the
// agent that holds it.
func startWorking(t *testing.T, cfgPath, storeLine string) (*running, taskboard.Task, string) {
	t.Helper()
	writeFile(t, cfgPath, restartYAML(storeLine, beforeStop, "alice", "bob"))
	r := start(t, cfgPath)
	ctx := context.Background()
	tk, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "the long job"})
	if err != nil {
		t.Fatal(err)
	}
	var holder string
	waitFor(t, "an agent working on the task", func() bool {
		got, err := r.tasks.Get(ctx, tk.ID)
		if err != nil || got.State != task.InProgress {
			return false
		}
		_, err = os.Stat(filepath.Join(r.trees.Path(got.Claimant), "partial.txt"))
		holder = got.Claimant
		return err == nil
	})
	return r, tk, holder
}

// ended waits until task id is CLOSED or FAILED, and returns it and its
// events, oldest first.
func ended(t *testing.T, r *running, id int64) (taskboard.Task, []taskboard.Event) {
	t.Helper()
	ctx := context.Background()
	var got taskboard.Task
	waitFor(t, "the task finished", func() bool {
		var err error
		got, err = r.tasks.Get(ctx, id)
		return err == nil && (got.State == task.Closed || got.State == task.Failed)
	})
	h, err := r.tasks.History(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return got, h
}

func hasEvent(h []taskboard.Event, match func(taskboard.Event) bool) bool {
	return slices.ContainsFunc(h, match)
}

// keptOverRestart runs the test of an orderly restart on the store line
// given: the task the stop found an agent working on stays with that agent,
// whose first session after the restart continues it where its work is
// (an uncommitted file in its worktree) and finishes it: no retry, no
// ORPHANED, one kept_over_restart event; the other agent never has it.
func keptOverRestart(t *testing.T, storeLine string) {
	cfgPath := repo(t, "")
	tk, holder := workUntilStopped(t, cfgPath, storeLine)

	writeFile(t, cfgPath, restartYAML(storeLine, afterStop, "alice", "bob"))
	got, h := ended(t, start(t, cfgPath), tk.ID)
	if got.State != task.Closed || got.Retries != 0 {
		t.Fatalf("task %s with %d retries, history %+v; want CLOSED by %s, who kept it, no retry", got.StateName, got.Retries, h, holder)
	}
	kept := 0
	for _, e := range h {
		switch {
		case e.TransitionReason == taskboard.EventKeptOverRestart:
			kept++
			if e.From != "IN_PROGRESS" || e.To != "IN_PROGRESS" || !strings.Contains(e.Reason, "kept for "+holder) {
				t.Errorf("kept event %+v: want IN_PROGRESS, kept for %s", e, holder)
			}
		case e.To == "ORPHANED" || e.To == "OPEN" && e.From != "":
			t.Errorf("task taken back from its agent: %+v", e)
		case e.To == "DONE" && e.Actor != "agent:"+holder:
			t.Errorf("finished by %s, not %s, who held it: %+v", e.Actor, holder, e)
		}
	}
	if kept != 1 {
		t.Errorf("%d kept_over_restart events, want 1: %+v", kept, h)
	}
}

// TestOrderlyRestartKeepsTasksWithTheirAgents: SIGTERM and a start again
// (an operator's upgrade) costs the task the stop found in progress no
// retry, and the agent working on it continues it where its work is.
func TestOrderlyRestartKeepsTasksWithTheirAgents(t *testing.T) {
	keptOverRestart(t, "")
}

// TestOrderlyRestartKeepsTasksOnASharedStore: the same on PostgreSQL: the
// daemon gives its leases up at its stop and takes them again.
func TestOrderlyRestartKeepsTasksOnASharedStore(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "keptover")
	keptOverRestart(t, fmt.Sprintf("store: %s\nlease_timeout: 2s\n", srv.URL(dbName)))
}

// TestOrderlyRestartRequeuesTheTasksOfARemovedAgent: an agent removed from
// the config across an orderly restart has its task requeued for the
// others, without a retry (IN_PROGRESS -> OPEN, as task requeue), and
// another agent finishes it.
func TestOrderlyRestartRequeuesTheTasksOfARemovedAgent(t *testing.T) {
	cfgPath := repo(t, "")
	tk, holder := workUntilStopped(t, cfgPath, "")
	other := "alice"
	if holder == "alice" {
		other = "bob"
	}

	writeFile(t, cfgPath, restartYAML("", anyTask, other))
	got, h := ended(t, start(t, cfgPath), tk.ID)
	if got.State != task.Closed || got.Retries != 0 {
		t.Fatalf("task %s with %d retries, history %+v; want CLOSED by %s, no retry", got.StateName, got.Retries, h, other)
	}
	if !hasEvent(h, func(e taskboard.Event) bool {
		return e.From == "IN_PROGRESS" && e.To == "OPEN" && e.TransitionReason == "" && e.Actor == "swarmd" &&
			strings.Contains(e.Reason, holder+" is no longer configured")
	}) || hasEvent(h, func(e taskboard.Event) bool { return e.To == "ORPHANED" }) ||
		!hasEvent(h, func(e taskboard.Event) bool { return e.To == "DONE" && e.Actor == "agent:"+other }) {
		t.Fatalf("history %+v: want IN_PROGRESS -> OPEN (%s no longer configured, no retry), no ORPHANED, DONE by %s", h, holder, other)
	}
}

// TestTasksHeldOverByAnotherDaemonAreRequeued: on a shared store, an agent
// that a daemon held a task over its orderly stop for, and that another
// daemon's reload then adds, has the task requeued before it runs there
// (without a retry: the work is in the first daemon's worktree), and it is
// done once.
func TestTasksHeldOverByAnotherDaemonAreRequeued(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "heldelsewhere")
	storeLine := fmt.Sprintf("store: %s\nlease_timeout: 2s\n", srv.URL(dbName))
	tk, holder := workUntilStopped(t, repo(t, ""), storeLine)

	cfgPath := repo(t, restartYAML(storeLine, anyTask, "carol"))
	r := start(t, cfgPath)
	writeFile(t, cfgPath, restartYAML(storeLine, anyTask, "carol", "alice", "bob"))
	if err := r.Reload(cfgPath); err != nil {
		t.Fatal(err)
	}
	got, h := ended(t, r, tk.ID)
	if got.State != task.Closed || got.Retries != 0 {
		t.Fatalf("task %s with %d retries, history %+v; want CLOSED, no retry", got.StateName, got.Retries, h)
	}
	if !hasEvent(h, func(e taskboard.Event) bool {
		return e.From == "IN_PROGRESS" && e.To == "OPEN" && e.TransitionReason == "" && strings.Contains(e.Reason, "orderly stop of daemon") &&
			strings.Contains(e.Reason, "worktree of "+holder)
	}) || hasEvent(h, func(e taskboard.Event) bool {
		return e.To == "ORPHANED" || e.TransitionReason == taskboard.EventKeptOverRestart
	}) {
		t.Fatalf("history %+v: want IN_PROGRESS -> OPEN naming the other daemon, no retry, not kept", h)
	}
}

// TestOrderlyStopHoldsOverTheTaskOfAnAgentAReloadWasRemoving: a SIGHUP
// that removes an agent and a SIGTERM together, the config swapped but the
// daemon's stop reaching the agent's runner first: its task is held over
// all the same (it ran), and the next start, without the agent, requeues
// it without a retry, as for an agent removed across a restart. Before,
// the stop marked the tasks of the config in force only, and the next
// start orphaned this one (a retry).
func TestOrderlyStopHoldsOverTheTaskOfAnAgentAReloadWasRemoving(t *testing.T) {
	cfgPath := repo(t, "")
	r, tk, holder := startWorking(t, cfgPath, "")
	other := "alice"
	if holder == "alice" {
		other = "bob"
	}
	// The reload's config in force, its removal of holder not yet sent.
	writeFile(t, cfgPath, restartYAML("", anyTask, other))
	without, err := r.opts.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	r.live.mu.Lock()
	r.live.cfg = without
	r.live.mu.Unlock()
	r.stop(t)

	got, h := ended(t, start(t, cfgPath), tk.ID)
	if got.State != task.Closed || got.Retries != 0 || hasEvent(h, func(e taskboard.Event) bool { return e.To == "ORPHANED" }) {
		t.Fatalf("task %s with %d retries, history %+v; want CLOSED by %s with no retry and no ORPHANED", got.StateName, got.Retries, h, other)
	}
}
