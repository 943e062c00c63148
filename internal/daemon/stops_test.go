package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// givenBack waits until the task holder held is taken back from it and
// another agent works on it, and checks that the stop cost it no retry:
// IN_PROGRESS -> OPEN by swarmd, no transition reason, the abort reason of
// the session the stop ended, a why naming the stop; no ORPHANED.
func givenBack(t *testing.T, r *running, id int64, holder, why string) {
	t.Helper()
	ctx := context.Background()
	var got taskboard.Task
	waitFor(t, "another agent working on the task", func() bool {
		var err error
		got, err = r.tasks.Get(ctx, id)
		return err == nil && got.State == task.InProgress && got.Claimant != holder
	})
	h, err := r.tasks.History(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Retries != 0 || !hasEvent(h, func(e taskboard.Event) bool {
		return e.From == "IN_PROGRESS" && e.To == "OPEN" && e.TransitionReason == "" && e.Actor == "swarmd" &&
			e.AbortReason != "" && strings.Contains(e.Reason, "agent "+holder+" stopped: "+why)
	}) || hasEvent(h, func(e taskboard.Event) bool { return e.To == "ORPHANED" || e.To == "FAILED" }) {
		t.Fatalf("task with %d retries, history %+v; want IN_PROGRESS -> OPEN (%s stopped: %s, its session's abort reason), "+
			"no retry, no ORPHANED", got.Retries, h, holder, why)
	}
}

// TestOperatorStopGivesTheTaskBack: swarmd stop AGENT (the control socket)
// on an agent working on a task is not the task's failure: it goes back to
// the board without a retry, and the other agent takes it up.
func TestOperatorStopGivesTheTaskBack(t *testing.T) {
	r, tk, holder := startWorking(t, repo(t, ""), "")
	cfg, _ := r.current()
	if err := control.NewClient(cfg.SocketPath()).Stop(context.Background(), holder); err != nil {
		t.Fatal(err)
	}
	givenBack(t, r, tk.ID, holder, "stop requested by operator")
}

// TestReloadRemovalGivesTheTaskBack: an agent a reload removes from the
// config while it works on a task gives the task back without a retry,
// saying so, and the agent that stays takes it up.
func TestReloadRemovalGivesTheTaskBack(t *testing.T) {
	cfgPath := repo(t, "")
	r, tk, holder := startWorking(t, cfgPath, "")
	other := "alice"
	if holder == "alice" {
		other = "bob"
	}
	writeFile(t, cfgPath, restartYAML("", beforeStop, other))
	if err := r.Reload(cfgPath); err != nil {
		t.Fatal(err)
	}
	givenBack(t, r, tk.ID, holder, "stop requested by operator: removed from the config by a reload")
}

// stoppedOnItsOwn runs alice alone on script with the defaults line given
// (her limit), adds a task, waits until she has stopped and returned her
// tasks (her Run has returned), and returns the task and its history.
func stoppedOnItsOwn(t *testing.T, script, limit string) (taskboard.Task, []taskboard.Event) {
	t.Helper()
	cfgPath := repo(t, "")
	writeFile(t, cfgPath, strings.Replace(restartYAML("", script, "alice"), "defaults:\n", "defaults:\n  "+limit+"\n", 1))
	r := start(t, cfgPath)
	ctx := context.Background()
	tk, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "the job"})
	if err != nil {
		t.Fatal(err)
	}
	rn, err := r.reg.Runner("alice")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alice stopped", func() bool {
		select {
		case <-rn.Done():
			return true
		default:
			return false
		}
	})
	got, err := r.tasks.Get(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	h, err := r.tasks.History(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got, h
}

// silentWorker works on the task its prompt carries and ends its session
// without reporting on it; with no task it says DONE and idles.
const silentWorker = `p=$(cat); if echo "$p" | grep -q "^## Tasks"; then echo partial >> partial.txt; echo working; exit 0; fi; echo idle; echo DONE`

// TestMaxSessionsGivesTheTaskBack: an agent that reached its max_sessions
// holding a task (its sessions ended without reporting) gives it back
// without a retry: its own limit, not the task's failure.
func TestMaxSessionsGivesTheTaskBack(t *testing.T) {
	got, h := stoppedOnItsOwn(t, silentWorker, "max_sessions: 2")
	if got.State != task.Open || got.Retries != 0 || !hasEvent(h, func(e taskboard.Event) bool {
		return e.From == "IN_PROGRESS" && e.To == "OPEN" && e.TransitionReason == "" && strings.Contains(e.Reason, "agent alice stopped: max_sessions")
	}) || hasEvent(h, func(e taskboard.Event) bool { return e.To == "ORPHANED" || e.To == "FAILED" }) {
		t.Fatalf("task %s with %d retries, history %+v; want IN_PROGRESS -> OPEN (max_sessions), no retry, no ORPHANED",
			got.StateName, got.Retries, h)
	}
}

// failingWorker fails every session on a task (exit 1: an error).
const failingWorker = `p=$(cat); if echo "$p" | grep -q "^## Tasks"; then echo crashed; exit 1; fi; echo idle; echo DONE`

// TestErrorStopStillCostsARetry: an agent its errors stopped
// (max_total_errors) while it held a task has failed the work: the task is
// orphaned and requeued with orphan_recovered, a retry, as before.
func TestErrorStopStillCostsARetry(t *testing.T) {
	got, h := stoppedOnItsOwn(t, failingWorker, "max_total_errors: 1")
	if got.State != task.Open || got.Retries != 1 || !hasEvent(h, func(e taskboard.Event) bool {
		return e.From == "ORPHANED" && e.To == "OPEN" && e.TransitionReason == "orphan_recovered"
	}) {
		t.Fatalf("task %s with %d retries, history %+v; want ORPHANED -> OPEN, orphan_recovered, a retry", got.StateName, got.Retries, h)
	}
}

// TestReloadWarnsOfTasksAssignedToARemovedAgent: a task assigned to an
// agent a reload removes waits for it, and nobody else claims it: the
// operator is told which tasks, and how to give them to another agent.
// A task the agent is not assigned, or one it can no longer be given,
// is not named.
func TestReloadWarnsOfTasksAssignedToARemovedAgent(t *testing.T) {
	cfgPath := repo(t, agentsYAML("alice", "bob"))
	core, logged := observer.New(zap.WarnLevel)
	d, err := Open(context.Background(), mustLoad(t, cfgPath), Options{Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- d.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	waitFor(t, "the daemon ready", func() bool { return d.run.ready.Load() })

	var ids []int64
	for _, n := range []taskboard.NewTask{
		{Title: "alice's, planned", Assignee: "alice", Plan: true},
		{Title: "bob's, planned", Assignee: "bob", Plan: true},
		{Title: "alice's, cancelled", Assignee: "alice", Plan: true},
	} {
		tk, err := r.tasks.Add(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
	}
	if _, err := r.tasks.Cancel(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfgPath, agentsYAML("bob"))
	if err := r.Reload(cfgPath); err != nil {
		t.Fatal(err)
	}
	const msg = "tasks wait for an agent a reload removed"
	waitFor(t, "the warning", func() bool { return logged.FilterMessageSnippet(msg).Len() > 0 })
	e := logged.FilterMessageSnippet(msg).All()
	if len(e) != 1 || e[0].ContextMap()["agent"] != "alice" || !strings.Contains(e[0].Message, "swarmd task assign ID AGENT") {
		t.Fatalf("warnings %+v; want one, for alice, naming task assign", e)
	}
	if got, want := fmt.Sprint(e[0].ContextMap()["tasks"]), fmt.Sprint([]int64{ids[0]}); got != want {
		t.Errorf("the warning names tasks %s, want %s (alice's assignable one alone)", got, want)
	}
}

// A parent that waits for its subtasks, split by an agent a reload
// removed, waits for that agent too, whoever it is assigned to: its
// review's FAIL sends the rework to it. The warning names it, with the
// tasks assigned to the agent, each once.
func TestReloadWarnsOfTheReworkOfARemovedWorker(t *testing.T) {
	ctx := context.Background()
	core, logged := observer.New(zap.WarnLevel)
	d, board, _ := mergeHooksDaemon(t)
	d.log = zap.New(core)
	split := func(title, assignee string) int64 {
		t.Helper()
		tk, err := board.Add(ctx, taskboard.NewTask{Title: title, Assignee: assignee, Reviewer: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		h := taskboard.Holder{Agent: "alice", Session: "alice-" + title}
		if _, err := board.Claim(ctx, tk.ID, h.Agent, h.Session); err != nil {
			t.Fatal(err)
		}
		if _, err := board.Split(ctx, tk.ID, h, []string{title + ", part one"}); err != nil {
			t.Fatal(err)
		}
		return tk.ID
	}
	mine, anyone := split("mine", "alice"), split("anyone's", "")
	other, err := board.Add(ctx, taskboard.NewTask{Title: "carol's", Assignee: "carol", Plan: true})
	if err != nil {
		t.Fatal(err)
	}
	d.warnAssigned(&config.Config{}, "alice")
	e := logged.FilterMessageSnippet("tasks wait for an agent a reload removed").All()
	if len(e) != 1 || e[0].ContextMap()["agent"] != "alice" {
		t.Fatalf("warnings %+v; want one, for alice", e)
	}
	if got, want := fmt.Sprint(e[0].ContextMap()["tasks"]), fmt.Sprint([]int64{mine, anyone}); got != want {
		t.Errorf("the warning names tasks %s, want %s (not carol's %d)", got, want, other.ID)
	}
}
