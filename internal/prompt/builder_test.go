package prompt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/settle"
	"github.com/swarmd/swarmd/internal/worktree"
)

func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "initial commit"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// TestBuilderWithRealMailboxAndWorktree: the prompt shows the branch's
// commits, dirty files and pending mail (urgent first); its mail is marked
// delivered; Release makes it pending again, as when the session never
// started.
func TestBuilderWithRealMailboxAndWorktree(t *testing.T) {
	ctx := context.Background()
	repo := gitRepo(t)
	state := filepath.Join(repo, ".swarm")
	trees, err := worktree.Open(ctx, worktree.Options{Repo: repo, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := trees.Ensure(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt.Path, "notes.txt"), []byte("wip"), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := mailbox.Open(ctx, filepath.Join(state, "swarm.db"), store.Options{}, mailbox.Options{Agents: []string{"alice", "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	normal, _ := db.Send(ctx, mailbox.Draft{From: "alice", To: "bob", Subject: "fyi", Body: "docs moved"})
	urgent, _ := db.Send(ctx, mailbox.Draft{From: "alice", To: "bob", Subject: "halt", Body: "main is broken", Urgent: true})

	b := &Builder{Mail: db, Git: trees, Agents: []string{"alice", "bob"}}
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", Role: "You review.", SessionID: "bob-1-aaaa", Seq: 1, Worktree: wt,
		Why: runner.Why{Kind: runner.WhyAfterInterrupt}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"initial commit", "notes.txt", "Other agents: `alice`", "You review.", `interrupted by urgent mail ("halt")`} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	if i, j := strings.Index(p.Text, "main is broken"), strings.Index(p.Text, "docs moved"); i < 0 || j < 0 || i > j {
		t.Errorf("urgent mail not first: %d, %d", i, j)
	}
	if p.Watermark != max(normal.ID, urgent.ID) {
		t.Errorf("watermark %d", p.Watermark)
	}
	if p.Mail != 2 {
		t.Errorf("prompt carries %d messages, want 2", p.Mail)
	}
	if pending, _ := db.Inbox(ctx, "bob", false); len(pending) != 2 || pending[0].ClaimedSession != "bob-1-aaaa" {
		t.Errorf("after the prompt: %+v, want 2 pending, claimed by the session", pending)
	}
	if err := b.Release(ctx, "bob-1-aaaa"); err != nil {
		t.Fatal(err)
	}
	if pending, _ := db.Inbox(ctx, "bob", false); len(pending) != 2 || pending[0].ClaimedSession != "" {
		t.Errorf("after Release %+v, want 2 pending, unclaimed", pending)
	}

	// A session that did not complete: the next prompt shows the mail again
	// and says why; a completed one acknowledges it.
	if _, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-2-bbbb", Seq: 2}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := settleIt(t, db, b, runner.Settlement{Session: ended("bob", "bob-2-bbbb", 2, now), Mail: 2, Note: "that session timed out"}); err != nil {
		t.Fatal(err)
	}
	p3, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-3-cccc", Seq: 3})
	if err != nil || p3.Mail != 2 || !strings.Contains(p3.Text, "Shown before, but that session timed out: it is still unread.") {
		t.Fatalf("prompt after an incomplete session (%v):\n%s", err, p3.Text)
	}
	if _, err := settleIt(t, db, b, runner.Settlement{Session: ended("bob", "bob-3-cccc", 3, now), Mail: 2, Completed: true}); err != nil {
		t.Fatal(err)
	}
	if pending, _ := db.Inbox(ctx, "bob", false); len(pending) != 0 {
		t.Errorf("%d messages pending after a completed session", len(pending))
	}
	p4, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-4-dddd", Seq: 4})
	if err != nil || p4.Mail != 0 {
		t.Fatalf("prompt after completion carries %d messages (%v)", p4.Mail, err)
	}
}

// TestBuilderTaskKeptOverRestart: the first prompt after an orderly restart
// that kept the agent's task says that swarmd restarted and the work is as
// the session left it, not that the session ended without reporting; the
// next one, after a session of its own that did not report, says that.
func TestBuilderTaskKeptOverRestart(t *testing.T) {
	ctx := context.Background()
	db := openMail(t, mailbox.Options{Agents: []string{"alice"}})
	board := taskboard.New(db.Store(), taskboard.Options{AutoClose: true})
	b := &Builder{Mail: db, Tasks: board, Agents: []string{"alice"}}
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "write the parser"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "alice", SessionID: "alice-1-aaaa", Seq: 1})
	if err != nil || p.Task != tk.ID {
		t.Fatalf("prompt = %+v, %v; want task %d", p, err, tk.ID)
	}
	if _, err := settlerOf(db, b).Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-1-aaaa", Seq: 1,
		Started: time.Now(), Task: p.Task}, nil); err != nil {
		t.Fatal(err)
	}
	// The daemon's orderly stop ends the session, records it, and holds
	// the task over; the next start keeps it for alice.
	st := runner.Settlement{Session: ended("alice", "alice-1-aaaa", 1, time.Now()), Task: p.Task, Result: "half way"}
	st.Session.Outcome = agent.ExitOutcome{Kind: agent.Error}
	st.Session.Result.Outcome, st.Session.Result.AbortReason = backend.OutcomeError, backend.AbortShutdownSignal
	if _, err := settleIt(t, db, b, st); err != nil {
		t.Fatal(err)
	}
	if held, err := board.HoldOver(ctx, "host:/state", []string{"alice"}); err != nil || len(held) != 1 {
		t.Fatalf("held over %+v, %v; want alice's task", held, err)
	}
	if got, err := board.Recover(ctx, taskboard.Recovery{Runs: func(string) bool { return true }, Why: "restarted"}); err != nil || len(got.Kept) != 1 {
		t.Fatalf("recovered %+v, %v; want the task kept", got, err)
	}

	p2, err := b.Build(ctx, runner.PromptRequest{Agent: "alice", SessionID: "alice-2-bbbb", Seq: 2})
	if err != nil || p2.Task != tk.ID || p2.NewTask {
		t.Fatalf("prompt after the restart = %+v, %v", p2, err)
	}
	if !strings.Contains(p2.Text, "Continue your task #1: write the parser\nswarmd restarted while your previous session worked on it.") ||
		strings.Contains(p2.Text, "ended without reporting") {
		t.Errorf("prompt after the restart does not say swarmd restarted:\n%s", p2.Text)
	}
	if _, err := settleIt(t, db, b, runner.Settlement{Session: ended("alice", "alice-2-bbbb", 2, time.Now()), Completed: true,
		Task: p2.Task, Result: "more"}); err != nil {
		t.Fatal(err)
	}
	p3, err := b.Build(ctx, runner.PromptRequest{Agent: "alice", SessionID: "alice-3-cccc", Seq: 3})
	if err != nil || !strings.Contains(p3.Text, "Your previous session worked on it and ended without reporting on it.") ||
		strings.Contains(p3.Text, "swarmd restarted") {
		t.Errorf("prompt after a session that did not report = %v:\n%s", err, p3.Text)
	}
}

// TestBuilderTasksSignalsAndIdle: the prompt carries the claimed task, a
// completed session's DONE finishes it, and an agent that said DONE with no
// mail and no task gets no prompt (Idle) until a task arrives.
func TestBuilderTasksSignalsAndIdle(t *testing.T) {
	ctx := context.Background()
	db := openMail(t, mailbox.Options{Agents: []string{"alice"}})
	board := taskboard.New(db.Store(), taskboard.Options{AutoClose: true})
	b := &Builder{Mail: db, Tasks: board, Agents: []string{"alice"}, Swarmd: "/opt/swarmd/bin/swarmd"}
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "write the parser", Body: "in parse.go"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "alice", SessionID: "alice-1-aaaa", Seq: 1})
	if err != nil || p.Task != tk.ID || !p.NewTask || p.Idle {
		t.Fatalf("prompt = %+v, %v; want task %d, new", p, err, tk.ID)
	}
	for _, want := range []string{"Your task: #1: write the parser", "> in parse.go", "`/opt/swarmd/bin/swarmd`"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("prompt lacks %q:\n%s", want, p.Text)
		}
	}
	if _, err := settlerOf(db, b).Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-1-aaaa", Seq: 1,
		Started: time.Now(), Task: p.Task}, nil); err != nil {
		t.Fatal(err)
	}
	// A session that ends without a signal: the task continues.
	now := time.Now()
	if r, err := settleIt(t, db, b, runner.Settlement{Session: ended("alice", "alice-1-aaaa", 1, now), Completed: true, Task: p.Task, Result: "made progress"}); err != nil || r.Signalled {
		t.Fatalf("settle without a signal = %+v, %v", r, err)
	}
	p2, err := b.Build(ctx, runner.PromptRequest{Agent: "alice", SessionID: "alice-2-bbbb", Seq: 2})
	if err != nil || p2.Task != tk.ID || p2.NewTask || !strings.Contains(p2.Text, "Continue your task #1") {
		t.Fatalf("second prompt = %+v, %v", p2, err)
	}
	r, err := settleIt(t, db, b, runner.Settlement{Session: ended("alice", "alice-2-bbbb", 1, now), Completed: true, Task: p2.Task, Result: "parser written\nDONE"})
	if err != nil || !r.Signalled {
		t.Fatalf("settle with DONE = %+v, %v", r, err)
	}
	if got, _ := board.Get(ctx, tk.ID); got.StateName != "CLOSED" || got.Result != "parser written\nDONE" {
		t.Fatalf("task after DONE: %+v", got)
	}
	p3, err := b.Build(ctx, runner.PromptRequest{Agent: "alice", SessionID: "alice-3-cccc", Seq: 3, MayIdle: true})
	if err != nil || !p3.Idle || p3.Text != "" {
		t.Fatalf("prompt with nothing to do = %+v, %v; want Idle", p3, err)
	}
	if _, err := board.Add(ctx, taskboard.NewTask{Title: "next"}); err != nil {
		t.Fatal(err)
	}
	if p4, err := b.Build(ctx, runner.PromptRequest{Agent: "alice", SessionID: "alice-3-dddd", Seq: 3, MayIdle: true}); err != nil || p4.Idle || p4.Task == 0 {
		t.Fatalf("prompt after a new task = %+v, %v", p4, err)
	}
	// FAIL fails the task with the result as the reason.
	r, err = settleIt(t, db, b, runner.Settlement{Session: ended("alice", "alice-3-dddd", 1, now), Completed: true, Task: 2, Result: "no such file\nFAIL"})
	if err != nil || !r.Signalled {
		t.Fatalf("settle with FAIL = %+v, %v", r, err)
	}
	if got, _ := board.Get(ctx, 2); got.StateName != "FAILED" || !strings.Contains(got.Result, "no such file") {
		t.Fatalf("task after FAIL: %+v", got)
	}
}

// TestBuilderReviewBeforeOwnTask: an agent that holds a task and has a
// review waiting gets the review first (a worker waits on it), then its task.
func TestBuilderReviewBeforeOwnTask(t *testing.T) {
	ctx := context.Background()
	db := openMail(t, mailbox.Options{})
	board := taskboard.New(db.Store(), taskboard.Options{AutoClose: true})
	b := &Builder{Tasks: board}
	own, _ := board.Add(ctx, taskboard.NewTask{Title: "bob's own", Assignee: "bob"})
	if _, err := board.Claim(ctx, own.ID, "bob", "bob-1-aaaa"); err != nil {
		t.Fatal(err)
	}
	work, _ := board.Add(ctx, taskboard.NewTask{Title: "alice's", Reviewer: "bob", Assignee: "alice"})
	if _, err := board.Claim(ctx, work.ID, "alice", "alice-1-aaaa"); err != nil {
		t.Fatal(err)
	}
	if _, err := board.Done(ctx, work.ID, taskboard.Holder{Agent: "alice"}, "done"); err != nil {
		t.Fatal(err)
	}
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-2-bbbb", Seq: 2})
	if err != nil || p.Review != work.ID || p.Task != 0 || !strings.Contains(p.Text, "## Review request") {
		t.Fatalf("bob's prompt = review %d task %d (%v); want the review of %d first", p.Review, p.Task, err, work.ID)
	}
	now := time.Now()
	if _, err := settleIt(t, db, b, runner.Settlement{Session: ended("bob", "bob-2-bbbb", 1, now), Completed: true, Review: p.Review, ReviewHead: p.ReviewHead, Result: "fine\nPASS"}); err != nil {
		t.Fatal(err)
	}
	p, err = b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-3-cccc", Seq: 3})
	if err != nil || p.Task != own.ID || p.Review != 0 {
		t.Fatalf("after the review: task %d review %d (%v); want his own task %d", p.Task, p.Review, err, own.ID)
	}
}

// TestBuilderReviewCarriesItsHead: a review prompt says which commit it
// shows, the task's frozen head as read (Prompt.ReviewHead): the verdict
// of its session is on that commit, and on no later one.
func TestBuilderReviewCarriesItsHead(t *testing.T) {
	ctx := context.Background()
	db := openMail(t, mailbox.Options{})
	board := taskboard.New(db.Store(), taskboard.Options{})
	b := &Builder{Tasks: board}
	work, _ := board.Add(ctx, taskboard.NewTask{Title: "alice's", Reviewer: "bob", Assignee: "alice"})
	h := taskboard.Holder{Agent: "alice", Session: "alice-1-aaaa"}
	if _, err := board.Claim(ctx, work.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	head := strings.Repeat("a", 40)
	if _, err := board.DoneAt(ctx, work.ID, h, "done", head); err != nil {
		t.Fatal(err)
	}
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-1-bbbb", Seq: 1})
	if err != nil || p.Review != work.ID || p.ReviewHead != head {
		t.Fatalf("bob's prompt = review %d at %q (%v); want the review of %d at %s", p.Review, p.ReviewHead, err, work.ID, head)
	}
}

// countingTasks counts the board reads a prompt makes, of a real board.
type countingTasks struct {
	*taskboard.Board
	reads map[string]int
}

func (c *countingTasks) ReviewFor(ctx context.Context, reviewer string) (taskboard.Task, bool, error) {
	c.reads["ReviewFor"]++
	return c.Board.ReviewFor(ctx, reviewer)
}

func (c *countingTasks) Held(ctx context.Context, agent string) (taskboard.Task, bool, error) {
	c.reads["Held"]++
	return c.Board.Held(ctx, agent)
}

func (c *countingTasks) ClaimSeen(ctx context.Context, agent, session string) (taskboard.Task, bool, error) {
	c.reads["ClaimSeen"]++
	return c.Board.ClaimSeen(ctx, agent, session)
}

// TestBuilderReadsOnlyWhatWorkSaw: the prompt's first read of the board
// says what it has for the agent, and the prompt makes only the reads that
// have something: a task to claim costs no review or held-task read, a held
// task no review read and no claim, nothing at all none of them.
func TestBuilderReadsOnlyWhatWorkSaw(t *testing.T) {
	ctx := context.Background()
	db := openMail(t, mailbox.Options{})
	board := &countingTasks{Board: taskboard.New(db.Store(), taskboard.Options{AutoClose: true})}
	b := &Builder{Tasks: board}
	build := func(seq uint32) runner.Prompt {
		t.Helper()
		board.reads = map[string]int{}
		p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: fmt.Sprintf("bob-%d-aaaa", seq), Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := build(1); p.Task != 0 || len(board.reads) != 0 {
		t.Fatalf("empty board: task %d, reads %v; want none", p.Task, board.reads)
	}
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "for anyone"})
	if err != nil {
		t.Fatal(err)
	}
	if p := build(2); p.Task != tk.ID || !maps.Equal(board.reads, map[string]int{"ClaimSeen": 1}) {
		t.Fatalf("a task to claim: task %d, reads %v; want task %d, one claim and nothing else", p.Task, board.reads, tk.ID)
	}
	if p := build(3); p.Task != tk.ID || !maps.Equal(board.reads, map[string]int{"Held": 1}) {
		t.Fatalf("a held task: task %d, reads %v; want task %d, one held-task read", p.Task, board.reads, tk.ID)
	}
}

// countingGit counts RecentCommits calls of a real worktree manager.
type countingGit struct {
	*worktree.Manager
	recent int
}

func (g *countingGit) RecentCommits(ctx context.Context, agent string, n int) ([]worktree.Commit, error) {
	g.recent++
	return g.Manager.RecentCommits(ctx, agent, n)
}

// TestBuilderRecentCommitsFollowHead: a prompt built on the same HEAD shows
// the same commits without walking the history again; a commit made since
// is shown in the next prompt; Prompt.Head is the worktree's HEAD.
func TestBuilderRecentCommitsFollowHead(t *testing.T) {
	ctx := context.Background()
	repo := gitRepo(t)
	trees, err := worktree.Open(ctx, worktree.Options{Repo: repo, StateDir: filepath.Join(repo, ".swarm")})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := trees.Ensure(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	g := &countingGit{Manager: trees}
	b := &Builder{Git: g, Agents: []string{"bob"}}
	build := func(seq uint32) runner.Prompt {
		t.Helper()
		p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-1-aaaa", Seq: seq, Worktree: wt})
		if err != nil {
			t.Fatal(err)
		}
		head, err := trees.Head(ctx, "bob")
		if err != nil || p.Head != head {
			t.Fatalf("prompt built on HEAD %q, worktree at %q (%v)", p.Head, head, err)
		}
		return p
	}
	p1, p2 := build(1), build(2)
	if g.recent != 1 || p1.Text == "" || !strings.Contains(p2.Text, "initial commit") {
		t.Fatalf("%d walks of the history for two prompts on one HEAD, want 1:\n%s", g.recent, p2.Text)
	}
	if out, err := exec.Command("git", "-C", wt.Path, "-c", "user.name=t", "-c", "user.email=t@example.invalid",
		"commit", "-q", "--allow-empty", "-m", "second commit").CombinedOutput(); err != nil {
		t.Fatalf("git commit: %v\n%s", err, out)
	}
	if p3 := build(3); g.recent != 2 || !strings.Contains(p3.Text, "second commit") {
		t.Fatalf("after a commit: %d walks, prompt:\n%s", g.recent, p3.Text)
	}
}

// settlerOf is the settle.Settler of the store db and b's board: what
// records the sessions whose prompts b builds.
func settlerOf(db *mailbox.Mailbox, b *Builder) *settle.Settler {
	s := &settle.Settler{DB: db.Store()}
	if b.Mail != nil {
		s.Mail = db
	}
	if tb, ok := b.Tasks.(*taskboard.Board); ok && tb != nil {
		s.Tasks = tb
	}
	return s
}

// settleIt settles st as the runner would once the session ended.
func settleIt(t *testing.T, db *mailbox.Mailbox, b *Builder, st runner.Settlement) (runner.SettleResult, error) {
	t.Helper()
	return settlerOf(db, b).Settle(context.Background(), st, nil)
}

// ended is a session record that ended at now.
func ended(name, id string, seq uint32, now time.Time) runner.SessionRecord {
	return runner.SessionRecord{Agent: name, SessionID: id, Seq: seq, Outcome: agent.ExitOutcome{Kind: agent.Success},
		Result: backend.Result{Outcome: backend.OutcomeSuccess, Started: now, Ended: now}}
}

// openMail opens a mailbox on a fresh swarm.db, closed when the test ends.
func openMail(t *testing.T, opts mailbox.Options) *mailbox.Mailbox {
	t.Helper()
	db, err := mailbox.Open(context.Background(), filepath.Join(t.TempDir(), "swarm.db"), store.Options{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// The review of a split task shows its subtasks, not its worker's branch:
// that branch carries the worker's next task by then, which the reviewer
// would be reviewing under this task's name.
func TestBuilderReviewOfASplitTask(t *testing.T) {
	ctx := context.Background()
	repo := gitRepo(t)
	state := filepath.Join(repo, ".swarm")
	trees, err := worktree.Open(ctx, worktree.Options{Repo: repo, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := trees.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	db := openMail(t, mailbox.Options{})
	board := taskboard.New(db.Store(), taskboard.Options{FrozenHead: true})
	parent, _ := board.Add(ctx, taskboard.NewTask{Title: "the feature", Reviewer: "bob", Assignee: "alice"})
	h := taskboard.Holder{Agent: "alice", Session: "alice-1-aaaa"}
	if _, err := board.Claim(ctx, parent.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	kids, err := board.Split(ctx, parent.ID, h, []string{"the parser"})
	if err != nil {
		t.Fatal(err)
	}
	kh := taskboard.Holder{Agent: "carol", Session: "carol-1-cccc"}
	if _, err := board.Claim(ctx, kids[0].ID, "carol", kh.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := board.DoneAt(ctx, kids[0].ID, kh, "done", trees.BaseCommit()); err != nil {
		t.Fatal(err)
	}
	// The subtask has its task's reviewer, who passes it first.
	if _, err := board.Verdict(ctx, kids[0].ID, "bob", trees.BaseCommit(), true, "ok"); err != nil {
		t.Fatal(err)
	}
	// Alice's branch moves on with her next task.
	for _, args := range [][]string{
		{"-c", "user.name=a", "-c", "user.email=a@example.invalid", "commit", "-q", "--allow-empty", "-m", "alice's next task, unreviewed"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", wt.Path}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	b := &Builder{Tasks: board, Compare: trees, ReviewBase: trees.BaseCommit()}
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-1-bbbb", Seq: 1})
	if err != nil || p.Review != parent.ID {
		t.Fatalf("bob's prompt = review %d (%v); want the review of %d", p.Review, err, parent.ID)
	}
	for _, want := range []string{fmt.Sprintf("- #%d the parser (DONE)", kids[0].ID), "`swarmd task show ID` of each subtask"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("the review lacks %q:\n%s", want, p.Text)
		}
	}
	if strings.Contains(p.Text, "alice's next task") || strings.Contains(p.Text, trees.Branch("alice")) {
		t.Errorf("the review of a split task shows alice's branch:\n%s", p.Text)
	}
}

// A task an agent added says so in its worker's prompt: its instructions
// carry that agent's authority, not the operator's (an agent could
// otherwise dress a request up as the operator's, to a peer).
func TestBuilderTaskAddedByAnAgentSaysSo(t *testing.T) {
	ctx := context.Background()
	db := openMail(t, mailbox.Options{})
	board := taskboard.New(db.Store(), taskboard.Options{AutoClose: true})
	b := &Builder{Tasks: board}
	byAgent, _ := board.Add(ctx, taskboard.NewTask{Title: "cherry-pick abc", Assignee: "bob", CreatedBy: "agent:mallory"})
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-1-aaaa", Seq: 1})
	if err != nil || p.Task != byAgent.ID {
		t.Fatalf("bob's prompt = task %d (%v); want %d", p.Task, err, byAgent.ID)
	}
	if want := "added by agent `mallory`, not by the operator"; !strings.Contains(p.Text, want) {
		t.Errorf("the prompt lacks %q:\n%s", want, p.Text)
	}
	if _, err := board.Done(ctx, byAgent.ID, taskboard.Holder{Agent: "bob"}, ""); err != nil {
		t.Fatal(err)
	}
	byOperator, _ := board.Add(ctx, taskboard.NewTask{Title: "the real work", Assignee: "bob"})
	p, err = b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-2-bbbb", Seq: 2})
	if err != nil || p.Task != byOperator.ID {
		t.Fatalf("bob's next prompt = task %d (%v); want %d", p.Task, err, byOperator.ID)
	}
	if strings.Contains(p.Text, "added by agent") {
		t.Errorf("the operator's task says an agent added it:\n%s", p.Text)
	}
}

// A task whose first attempt failed its review, split on its second, has
// no change of its own either: its review lists the subtasks, not the
// commit its first attempt froze (work the reviewer failed already, which
// passed now would be what the task stands for).
func TestBuilderReviewOfATaskSplitAfterAFailedReview(t *testing.T) {
	ctx := context.Background()
	repo := gitRepo(t)
	trees, err := worktree.Open(ctx, worktree.Options{Repo: repo, StateDir: filepath.Join(repo, ".swarm")})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := trees.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", wt.Path, "-c", "user.name=a", "-c", "user.email=a@example.invalid",
		"commit", "-q", "--allow-empty", "-m", "alice's first attempt").CombinedOutput(); err != nil {
		t.Fatalf("git commit: %v\n%s", err, out)
	}
	first, err := exec.Command("git", "-C", wt.Path, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	db := openMail(t, mailbox.Options{})
	board := taskboard.New(db.Store(), taskboard.Options{FrozenHead: true})
	parent, _ := board.Add(ctx, taskboard.NewTask{Title: "the feature", Reviewer: "bob", Assignee: "alice"})
	h := taskboard.Holder{Agent: "alice", Session: "alice-1-aaaa"}
	if _, err := board.Claim(ctx, parent.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := board.DoneAt(ctx, parent.ID, h, "done", strings.TrimSpace(string(first))); err != nil {
		t.Fatal(err)
	}
	if _, err := board.Verdict(ctx, parent.ID, "bob", strings.TrimSpace(string(first)), false, "too big: split it"); err != nil {
		t.Fatal(err)
	}
	h = taskboard.Holder{Agent: "alice", Session: "alice-2-aaaa"}
	if _, err := board.Claim(ctx, parent.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	kids, err := board.Split(ctx, parent.ID, h, []string{"the parser"})
	if err != nil {
		t.Fatal(err)
	}
	kh := taskboard.Holder{Agent: "carol", Session: "carol-1-cccc"}
	if _, err := board.Claim(ctx, kids[0].ID, "carol", kh.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := board.DoneAt(ctx, kids[0].ID, kh, "done", trees.BaseCommit()); err != nil {
		t.Fatal(err)
	}
	if _, err := board.Verdict(ctx, kids[0].ID, "bob", trees.BaseCommit(), true, "ok"); err != nil {
		t.Fatal(err)
	}
	b := &Builder{Tasks: board, Compare: trees, ReviewBase: trees.BaseCommit()}
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-1-bbbb", Seq: 1})
	if err != nil || p.Review != parent.ID {
		t.Fatalf("bob's prompt = review %d (%v); want the review of %d", p.Review, err, parent.ID)
	}
	if want := fmt.Sprintf("- #%d the parser (DONE)", kids[0].ID); !strings.Contains(p.Text, want) {
		t.Errorf("the review lacks %q:\n%s", want, p.Text)
	}
	if strings.Contains(p.Text, "alice's first attempt") {
		t.Errorf("the review of a split task shows its first attempt's frozen head:\n%s", p.Text)
	}
}

// brokenGit is a worktree whose status cannot be read.
type brokenGit struct{}

func (brokenGit) RecentCommits(context.Context, string, int) ([]worktree.Commit, error) {
	return nil, errors.New("git log: broken")
}

func (brokenGit) Look(context.Context, string) (worktree.Status, error) {
	return worktree.Status{}, errors.New("git status: broken")
}

// TestBuilderFailedBuildKeepsAContinuedTask: a prompt whose build fails
// after it continued the task its agent holds IN_PROGRESS gives back its
// claims, not the task the agent is working on.
func TestBuilderFailedBuildKeepsAContinuedTask(t *testing.T) {
	ctx := context.Background()
	db := openMail(t, mailbox.Options{Agents: []string{"alice"}})
	board := taskboard.New(db.Store(), taskboard.Options{AutoClose: true})
	b := &Builder{Mail: db, Tasks: board, Agents: []string{"alice"}}
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "write the parser"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "alice", SessionID: "alice-1-aaaa", Seq: 1})
	if err != nil || p.Task != tk.ID {
		t.Fatalf("prompt = %+v, %v; want task %d", p, err, tk.ID)
	}
	if _, err := settlerOf(db, b).Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-1-aaaa", Seq: 1,
		Started: time.Now(), Task: p.Task}, nil); err != nil {
		t.Fatal(err)
	}
	b.Git = brokenGit{}
	if _, err := b.Build(ctx, runner.PromptRequest{Agent: "alice", SessionID: "alice-2-bbbb", Seq: 2}); err == nil {
		t.Fatal("a build whose worktree status fails succeeded")
	}
	if got, err := board.Get(ctx, tk.ID); err != nil || got.StateName != "IN_PROGRESS" || got.Claimant != "alice" {
		t.Errorf("task after the failed build: %+v, %v; want IN_PROGRESS, held by alice", got, err)
	}
}

// TestBuilderReviewWarnsOfSeveralMergeBases: a head with two merge bases
// with the target (a criss-cross) is reviewed with a warning: its diff is
// against one of them, what a merge does is not. A head with one merge
// base has none.
func TestBuilderReviewWarnsOfSeveralMergeBases(t *testing.T) {
	ctx := context.Background()
	repo := gitRepo(t)
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	git("checkout", "-q", "-b", "side")
	git("commit", "-q", "--allow-empty", "-m", "t1")
	t1 := git("rev-parse", "HEAD")
	git("checkout", "-q", "main")
	git("commit", "-q", "--allow-empty", "-m", "h1")
	h1 := git("rev-parse", "HEAD")
	git("merge", "-q", "--no-ff", "--no-edit", "side")
	crossed := git("commit-tree", "-p", t1, "-p", h1, "-m", "w", "main^{tree}")
	trees, err := worktree.Open(ctx, worktree.Options{Repo: repo, StateDir: filepath.Join(repo, ".swarm")})
	if err != nil {
		t.Fatal(err)
	}
	db := openMail(t, mailbox.Options{})
	board := taskboard.New(db.Store(), taskboard.Options{FrozenHead: true})
	b := &Builder{Tasks: board, Compare: trees, ReviewBase: "main"}
	for i, head := range []string{crossed, t1} {
		work, _ := board.Add(ctx, taskboard.NewTask{Title: "alice's", Reviewer: "bob", Assignee: "alice"})
		h := taskboard.Holder{Agent: "alice", Session: fmt.Sprintf("alice-%d-aaaa", i+1)}
		if _, err := board.Claim(ctx, work.ID, "alice", h.Session); err != nil {
			t.Fatal(err)
		}
		if _, err := board.DoneAt(ctx, work.ID, h, "done", head); err != nil {
			t.Fatal(err)
		}
		session := fmt.Sprintf("bob-%d-bbbb", i+1)
		p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: session, Seq: uint32(i + 1)})
		if err != nil || p.Review != work.ID {
			t.Fatalf("bob's prompt = review %d (%v); want the review of %d", p.Review, err, work.ID)
		}
		warned := strings.Contains(p.Text, "**Its history has 2 merge bases with `main`**") &&
			strings.Contains(p.Text, "(`git merge main`)")
		if warned != (head == crossed) {
			t.Errorf("review of %s (criss-cross %v) warns %v:\n%s", head, head == crossed, warned, p.Text)
		}
		if _, err := settleIt(t, db, b, runner.Settlement{Session: ended("bob", session, uint32(i+1), time.Now()), Completed: true,
			Review: p.Review, ReviewHead: p.ReviewHead, Result: "PASS"}); err != nil {
			t.Fatal(err)
		}
	}
}
