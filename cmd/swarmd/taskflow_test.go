package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// sessionLogs counts an agent's session log files: one per session started.
func sessionLogs(t *testing.T, stateDir, agent string) int {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(stateDir, "logs", agent, "*.log"))
	return len(logs)
}

func openBoardAt(t *testing.T, stateDir string) (*taskboard.Board, *mailbox.Mailbox) {
	t.Helper()
	db, err := mailbox.Open(context.Background(), filepath.Join(stateDir, "swarm.db"), store.Options{NoCreate: true}, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b, err := daemon.OpenTaskBoard(context.Background(), db.Store(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, db
}

// waitTask polls the board until task id is in state want (20 s at most).
func waitTask(t *testing.T, b *taskboard.Board, id int64, want task.State, d *daemonProc) taskboard.Task {
	t.Helper()
	return waitTaskLong(t, b, id, want, d, 20*time.Second)
}

func idleLine(agent string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		return m["agent"] == agent && strings.HasPrefix(m["msg"].(string), "idle:")
	}
}

// TestTasksIdleAndWake: agents that say DONE with nothing to do go idle and
// start no session; a new task, a dependency closing, subtasks finishing and
// new mail wake them within the same watch as urgent mail.
func TestTasksIdleAndWake(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  backend: finisher
  min_session_interval: 0s
backends:
  finisher:
    type: scripted
    steps: [{print: [working, "DONE: finished"], sleep: 100ms}]
agents:
  - {name: alice, role: works}
  - {name: bob, role: works}
`)
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("alice idle", idleLine("alice"))
	d.waitLine("bob idle", idleLine("bob"))
	bobIdleSince, bobSessions := time.Now(), sessionLogs(t, stateDir, "bob")
	b, db := openBoardAt(t, stateDir)
	ctx := context.Background()

	// A task for alice: she wakes, works on it, reports DONE, idles again.
	added := time.Now()
	tk, err := b.Add(ctx, taskboard.NewTask{Title: "write the parser", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	got := waitTask(t, b, tk.ID, task.Closed, d)
	t.Logf("task added -> closed by an idle agent: %v", time.Since(added))
	if !strings.Contains(got.Result, "DONE: finished") {
		t.Errorf("task result %q", got.Result)
	}
	prompts, _ := filepath.Glob(filepath.Join(stateDir, "logs", "alice", "*.prompt.md"))
	found := false
	for _, p := range prompts {
		b, _ := os.ReadFile(p)
		found = found || strings.Contains(string(b), "Your task: #1: write the parser")
	}
	if !found {
		t.Errorf("no prompt of alice carried the task")
	}

	// A dependency chain and a split task move by themselves.
	first, _ := b.Add(ctx, taskboard.NewTask{Title: "first"})
	second, _ := b.Add(ctx, taskboard.NewTask{Title: "second", After: []int64{first.ID}})
	if second.State != task.Blocked {
		t.Fatalf("second is %s, want BLOCKED", second.State)
	}
	waitTask(t, b, second.ID, task.Closed, d)
	// A task for an agent not in this swarm waits; split, its parts are for
	// anyone, and when both are done the parent is done.
	parent, _ := b.Add(ctx, taskboard.NewTask{Title: "parent", Assignee: "carol"})
	kids, err := b.Split(ctx, parent.ID, taskboard.Holder{}, []string{"part one", "part two"})
	if err != nil || len(kids) != 2 {
		t.Fatalf("split: %v", err)
	}
	for _, k := range kids {
		waitTask(t, b, k.ID, task.Closed, d)
	}
	waitTask(t, b, parent.ID, task.Closed, d)

	// Mail wakes bob, and only then does he start a session.
	if wait := 5*time.Second - time.Since(bobIdleSince); wait > 0 {
		time.Sleep(wait) // the span over which the idle agent is watched
	}
	if n := sessionLogs(t, stateDir, "bob"); n != bobSessions {
		// bob may have taken one of the tasks above: that is work, not a loop.
		if hist, _ := b.List(ctx, taskboard.Filter{Agent: "bob"}); len(hist) == 0 {
			t.Fatalf("idle bob started %d sessions with nothing to do", n-bobSessions)
		}
		bobSessions = n
	}
	d.mu.Lock()
	d.cursor = len(d.lines)
	d.mu.Unlock()
	if _, err := db.Send(ctx, mailbox.Draft{From: mailbox.Operator, To: "bob", Body: "look at the README"}); err != nil {
		t.Fatal(err)
	}
	d.waitNext("bob awake", func(m map[string]any) bool {
		return m["agent"] == "bob" && strings.HasPrefix(m["msg"].(string), "awake")
	})
	d.waitNext("bob Running", transitionTo("bob", "Running"))
	d.waitNext("bob idle again", idleLine("bob"))
	if n := sessionLogs(t, stateDir, "bob"); n != bobSessions+1 {
		t.Errorf("bob ran %d sessions for one message, want 1", n-bobSessions)
	}
	out, _, _ := runCLI(t, nil, "", "status", "-c", cfg)
	if !strings.Contains(out, "idle") {
		t.Errorf("status does not show idle agents:\n%s", out)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestTaskOrphanedByKillIsRequeued: kill -9 of the daemon mid-task; after
// the restart the task is requeued (orphan_recovered) and finished once.
func TestTaskOrphanedByKillIsRequeued(t *testing.T) {
	repo := gitRepo(t)
	slow := `
listen: ""
defaults:
  backend: worker
  min_session_interval: 0s
backends:
  worker:
    type: scripted
    steps: [{print: [working], setsid_child: true, sleep: 1h}]
agents:
  - {name: alice, role: works}
`
	cfg := writeConfig(t, repo, slow)
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	b, _ := openBoardAt(t, stateDir)
	ctx := context.Background()
	tk, err := b.Add(ctx, taskboard.NewTask{Title: "long job"})
	if err != nil {
		t.Fatal(err)
	}
	// alice's first session runs forever; interrupt it so her next prompt
	// claims the task.
	if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--urgent", "--to", "alice", "-c", cfg, "take the task"); code != 0 {
		t.Fatal(stderr)
	}
	waitTask(t, b, tk.ID, task.InProgress, d)
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	d.wait(5 * time.Second)

	writeConfig(t, repo, strings.Replace(slow, "{print: [working], setsid_child: true, sleep: 1h}", `{print: [DONE]}`, 1))
	d2 := startDaemon(t, cfg)
	d2.waitLine("requeued", func(m map[string]any) bool { return m["msg"] == "task requeued after a restart" })
	got := waitTask(t, b, tk.ID, task.Closed, d2)
	if got.Retries != 1 {
		t.Errorf("retries %d, want 1", got.Retries)
	}
	h, err := b.History(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	recovered := false
	for _, e := range h {
		path = append(path, e.To)
		recovered = recovered || (e.From == "ORPHANED" && e.To == "OPEN" && e.TransitionReason == "orphan_recovered")
	}
	if !recovered || strings.Count(strings.Join(path, " "), "CLOSED") != 1 {
		t.Errorf("history %v: want ORPHANED -> OPEN (orphan_recovered) and one CLOSED", path)
	}
	_ = d2.cmd.Process.Signal(syscall.SIGTERM)
	if code := d2.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, stateDir, 2*time.Second)
}

// heldWorker works on one task across a restart: handed a task anew it
// commits half of it (half1.txt), leaves the other half uncommitted
// (half2.txt) and works until stopped; given back the task its previous
// session worked on, it finishes it where that work is. Any other task (or
// its work gone) it fails.
const heldWorker = `p=$(cat)
case "$p" in
*"Continue your task #"*)
  if [ -e half1.txt ] && [ -e half2.txt ]; then git add -A; git commit -q -m "second half"; printf 'finished\nDONE\n'; exit 0; fi
  printf 'FAIL: my work is gone\n'; exit 0;;
*"Your task: #"*)
  if [ -n "$FIRST" ]; then echo one > half1.txt; git add half1.txt; git commit -q -m "first half"; echo two > half2.txt; exec sleep 3600; fi
  printf 'FAIL: not where I left it\n'; exit 0;;
esac
printf 'nothing\nDONE\n'`

// TestTaskKeptOverSIGTERMRestart: SIGTERM to swarmd run mid-task, then
// swarmd run again (a config upgrade): the task stays with the agent that
// worked on it, whose first session after the restart continues it on its
// task line with its uncommitted work, and it merges, with no retry, no
// ORPHANED and one kept_over_restart event; the other agent never has it.
func TestTaskKeptOverSIGTERMRestart(t *testing.T) {
	repo := gitRepo(t)
	config := func(first string) string {
		return fmt.Sprintf(`
listen: ""
merge: {into: main}
defaults:
  backend: worker
  min_session_interval: 0s
  grace_period: 2s
  env: {FIRST: %q}
backends:
  worker: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: alice, role: works}
  - {name: bob, role: works}
`, first, heldWorker)
	}
	cfg := writeConfig(t, repo, config("yes"))
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("alice idle", idleLine("alice"))
	d.waitLine("bob idle", idleLine("bob"))
	b, _ := openBoardAt(t, stateDir)
	ctx := context.Background()
	tk, err := b.Add(ctx, taskboard.NewTask{Title: "two halves"})
	if err != nil {
		t.Fatal(err)
	}
	holder := waitTask(t, b, tk.ID, task.InProgress, d).Claimant
	waitForFile(t, filepath.Join(stateDir, "worktrees", holder, "half2.txt"), "two")
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}

	writeConfig(t, repo, config(""))
	d2 := startDaemon(t, cfg)
	var got taskboard.Task
	waitUntil(t, "the task merged or failed", func() bool {
		got, err = b.Get(ctx, tk.ID)
		return err == nil && (got.State == task.Closed || got.State == task.Failed)
	})
	h, err := b.History(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, e := range h {
		switch {
		case e.TransitionReason == taskboard.EventKeptOverRestart:
			kept++
		case e.To == "ORPHANED" || e.From == "IN_PROGRESS" && e.To == "OPEN" || e.To == "FAILED":
			t.Errorf("the task was taken from %s: %+v", holder, e)
		case e.To == "CLAIMED" && e.Actor != "agent:"+holder:
			t.Errorf("claimed by %s, not %s: %+v", e.Actor, holder, e)
		}
	}
	if got.State != task.Closed || got.Retries != 0 || kept != 1 {
		t.Errorf("task %s, retries %d, %d kept_over_restart events; want CLOSED, 0 and 1: %+v", got.StateName, got.Retries, kept, h)
	}
	for _, f := range []string{"half1.txt", "half2.txt"} {
		if out, err := exec.Command("git", "-C", repo, "show", "main:"+f).CombinedOutput(); err != nil {
			t.Errorf("main has no %s: %v\n%s", f, err, out)
		}
	}
	_ = d2.cmd.Process.Signal(syscall.SIGTERM)
	if code := d2.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, stateDir, 2*time.Second)
}

// TestReviewLoopEndToEnd: task -> worker DONE -> reviewer FAIL with
// feedback -> the worker's next prompt carries it -> DONE -> reviewer PASS
// -> CLOSED; a kill -9 while the review waits loses and repeats no round.
func TestReviewLoopEndToEnd(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  min_session_interval: 0s
backends:
  worker:
    type: command
    command: sh
    args: [-c, "p=$(cat); git commit -q --allow-empty -m work; if echo \"$p\" | grep -q 'needs tests'; then printf 'added tests\nDONE\n'; else printf 'first try\nDONE\n'; fi"]
  reviewer:
    type: command
    command: sh
    args: [-c, "p=$(cat); if echo \"$p\" | grep -q '^Round 1: FAIL'; then printf 'good now\nPASS\n'; elif echo \"$p\" | grep -q '^## Review request'; then printf 'FAIL: needs tests\n'; else printf 'nothing to review\nDONE\n'; fi"]
agents:
  - {name: alice, role: works, backend: worker, reviewer: rita}
  - {name: rita, role: reviews, backend: reviewer}
`)
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("alice idle", idleLine("alice"))
	d.waitLine("rita idle", idleLine("rita"))
	b, _ := openBoardAt(t, stateDir)
	ctx := context.Background()
	tk, err := b.Add(ctx, taskboard.NewTask{Title: "add a parser", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	got := waitTask(t, b, tk.ID, task.Closed, d)
	if got.ReviewState != "complete" || got.Iteration != 2 || got.Worker != "alice" {
		t.Fatalf("closed task %+v", got)
	}
	rounds, _ := b.Rounds(ctx, tk.ID)
	if len(rounds) != 2 || rounds[0].Verdict.String() != "fail" || !strings.Contains(rounds[0].Feedback, "needs tests") ||
		rounds[1].Verdict.String() != "pass" {
		t.Fatalf("rounds %+v", rounds)
	}
	// alice's prompt after the FAIL carried the feedback; rita's first
	// review request showed alice's work, frozen at DONE, and its commits.
	var sawFeedback, sawBranch bool
	for _, agent := range []string{"alice", "rita"} {
		ps, _ := filepath.Glob(filepath.Join(stateDir, "logs", agent, "*.prompt.md"))
		for _, p := range ps {
			b, _ := os.ReadFile(p)
			sawFeedback = sawFeedback || strings.Contains(string(b), "It came back from review (round 1)")
			sawBranch = sawBranch || strings.Contains(string(b), "frozen when it was reported done (`swarm/alice/work`")
		}
	}
	if !sawFeedback || !sawBranch {
		t.Errorf("prompts: feedback to the worker %v, branch to the reviewer %v", sawFeedback, sawBranch)
	}

	// A second task; kill -9 once it waits for review: after the restart
	// the review resumes, one round per verdict.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(10 * time.Second)
	writeConfig(t, repo, strings.Replace(mustRead(t, cfg), "printf 'good now\\nPASS\\n'", "sleep 3600", 1))
	d2 := startDaemon(t, cfg)
	tk2, _ := b.Add(ctx, taskboard.NewTask{Title: "second", Assignee: "alice"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, _ := b.Rounds(ctx, tk2.ID)
		if len(r) == 1 {
			if cur, _ := b.Get(ctx, tk2.ID); cur.ReviewState == "reviewing" {
				break // FAIL given, rework done, second review running (its reviewer sleeps)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("second task never reached its second review; log:\n%s", d2.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = d2.cmd.Process.Signal(syscall.SIGKILL)
	d2.wait(5 * time.Second)
	writeConfig(t, repo, strings.Replace(mustRead(t, cfg), "sleep 3600", "printf 'good now\\nPASS\\n'", 1))
	d3 := startDaemon(t, cfg)
	got2 := waitTask(t, b, tk2.ID, task.Closed, d3)
	r2, _ := b.Rounds(ctx, tk2.ID)
	if len(r2) != 2 || got2.Iteration != 2 {
		t.Fatalf("after the restart: %d rounds, iteration %d; want 2, 2 (none lost or repeated)", len(r2), got2.Iteration)
	}
	_ = d3.cmd.Process.Signal(syscall.SIGTERM)
	if code := d3.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTaskMergedThroughTheQueue: with a merge queue, a task the worker
// finished (and the reviewer passed) is integrated into the target only
// when the gate passes on the merged result, and then CLOSED; the target
// holds the work.
func TestTaskMergedThroughTheQueue(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  min_session_interval: 0s
merge:
  into: main
  gate: ["test -f feature.txt"]
backends:
  worker:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; echo feature > feature.txt; git add feature.txt; git commit -q -m 'add the feature'; printf 'added it\nDONE\n'"]
  reviewer:
    type: command
    command: sh
    args: [-c, "p=$(cat); if echo \"$p\" | grep -q '^## Review request'; then printf 'fine\nPASS\n'; else printf 'idle\nDONE\n'; fi"]
agents:
  - {name: alice, role: works, backend: worker, reviewer: rita}
  - {name: rita, role: reviews, backend: reviewer}
`)
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("rita idle", idleLine("rita"))
	b, _ := openBoardAt(t, stateDir)
	tk, err := b.Add(context.Background(), taskboard.NewTask{Title: "the feature", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	got := waitTask(t, b, tk.ID, task.Closed, d)
	if got.ReviewState != "complete" {
		t.Errorf("closed without its review: %+v", got)
	}
	out, err := exec.Command("git", "-C", repo, "show", "main:feature.txt").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "feature" {
		t.Fatalf("main lacks the merged work: %v %s", err, out)
	}
	h, _ := b.History(context.Background(), tk.ID)
	if last := h[len(h)-1]; last.Actor != "merge-queue" || !strings.HasPrefix(last.Reason, "merged as ") {
		t.Errorf("closed by %+v, want the merge queue", last)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestAReviewGivenToAnotherReviewer: a DONE task waits for rita's verdict;
// a reload removes rita, and the task would wait for good: the reload's
// warning names it, inbox lists it,
// task assign --reviewer gives the review to bob, who is woken for it and
// passes it, and the task closes.
func TestAReviewGivenToAnotherReviewer(t *testing.T) {
	repo := gitRepo(t)
	body := `
listen: ""
defaults:
  min_session_interval: 0s
backends:
  worker:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; git commit -q --allow-empty -m work; printf 'done it\nDONE\n'"]
  slow:
    type: scripted
    steps: [{print: [reading], sleep: 1h}]
  reviewer:
    type: command
    command: sh
    args: [-c, "if grep -q '^## Review request'; then printf 'fine\nPASS\n'; else printf 'nothing\nDONE\n'; fi"]
agents:
  - {name: alice, role: works, backend: worker, reviewer: %s}
%s  - {name: bob, role: reviews, backend: reviewer, claims: false}
`
	cfg := writeConfig(t, repo, fmt.Sprintf(body, "rita", "  - {name: rita, role: reviews, backend: slow, claims: false}\n"))
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("alice idle", idleLine("alice"))
	b, _ := openBoardAt(t, stateDir)
	ctx := context.Background()
	tk, err := b.Add(ctx, taskboard.NewTask{Title: "the feature", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got := waitTask(t, b, tk.ID, task.Done, d); got.Reviewer != "rita" {
		t.Fatalf("task DONE with reviewer %q, want rita", got.Reviewer)
	}
	writeConfig(t, repo, fmt.Sprintf(body, "bob", ""))
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitLine("rita Stopped", transitionTo("rita", "Stopped"))
	d.waitLine("the warning naming the task", func(m map[string]any) bool {
		ts, _ := m["tasks"].([]any)
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "tasks wait for the verdict of an agent a reload removed") &&
			m["agent"] == "rita" && len(ts) == 1 && ts[0] == float64(tk.ID)
	})
	out, stderr, code := runCLI(t, nil, "", "inbox", "-c", cfg)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("task #%d is DONE, waiting for the review of rita, which is not an agent of the swarm", tk.ID)) ||
		!strings.Contains(out, fmt.Sprintf("swarmd task assign %d --reviewer AGENT", tk.ID)) {
		t.Fatalf("inbox with rita gone: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := runCLI(t, nil, "", "task", "assign", fmt.Sprint(tk.ID), "--reviewer", "bob", "-c", cfg); code != 0 ||
		out != fmt.Sprintf("task %d is DONE, reviewed by bob\n", tk.ID) {
		t.Fatalf("task assign --reviewer bob: exit %d %q %q", code, out, stderr)
	}
	got := waitTask(t, b, tk.ID, task.Closed, d)
	if got.Reviewer != "bob" || got.ReviewState != "complete" {
		t.Fatalf("closed task: reviewer %q, review %q; want bob, complete", got.Reviewer, got.ReviewState)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
