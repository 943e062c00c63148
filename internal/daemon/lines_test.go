package daemon

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// TestFencedOffSessionKeepsNoLine: the end of a session whose task went to
// another attempt while it ran (its daemon lost the agent's lease, the
// daemon that reaped it requeued the task, another agent claimed it) keeps
// no line: its head would replace the new attempt's line, here and on the
// remote, where the merge queue then waits for ever for the frozen head
// (found by TestChaosPostgres). The holder's session keeps its line.
func TestFencedOffSessionKeepsNoLine(t *testing.T) {
	ctx := context.Background()
	cfg := repo(t, agentsYAML("alice", "bob")+"merge: {into: main, gate: [\"true\"]}\n")
	dir := filepath.Dir(cfg)
	d := open(t, cfg)
	defer d.Close()
	commit := func(msg string) string {
		t.Helper()
		out, err := exec.Command("git", "-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid",
			"commit-tree", "-m", msg, "HEAD^{tree}").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out[:40])
	}
	line := func(id int64) string {
		return gitOut(t, "-C", dir, "rev-parse", "-q", "--verify", fmt.Sprintf("refs/heads/swarm/task/%d", id))
	}

	requeued, err := d.tasks.Add(ctx, taskboard.NewTask{Title: "requeued, not claimed yet", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	lineKeeper{d}.OnSessionEnd(runner.SessionRecord{Agent: "alice", SessionID: "alice-3-old", Task: requeued.ID, HeadAfter: commit("stale")})
	if got := line(requeued.ID); got != "" {
		t.Errorf("a fenced-off session kept the line of a requeued task at %s", got)
	}

	taken, err := d.tasks.Add(ctx, taskboard.NewTask{Title: "claimed by bob since", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.tasks.Claim(ctx, taken.ID, "bob", "bob-1-new"); err != nil {
		t.Fatal(err)
	}
	lineKeeper{d}.OnSessionEnd(runner.SessionRecord{Agent: "alice", SessionID: "alice-4-old", Task: taken.ID, HeadAfter: commit("stale")})
	if got := line(taken.ID); got != "" {
		t.Errorf("a fenced-off session kept the line of bob's task at %s", got)
	}

	bobs := commit("bob's work")
	lineKeeper{d}.OnSessionEnd(runner.SessionRecord{Agent: "bob", SessionID: "bob-1-new", Task: taken.ID, HeadAfter: bobs})
	if got := line(taken.ID); got != bobs {
		t.Errorf("the holder's session: line at %q, want %s", got, bobs)
	}
}

// TestWaitingLinePushedAgain: on a shared store, the line of a task that
// waits to merge is the merging daemon's to fetch from the remote, and only
// its worker's daemon can push it. When the remote's line stops holding the
// frozen head (a fenced-off attempt's daemon pushed over it, or the push
// failed), the worker's daemon pushes it again by itself.
func TestWaitingLinePushedAgain(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "lines")
	ctx := context.Background()
	bare := filepath.Join(t.TempDir(), "remote.git")
	cfg := repo(t, fmt.Sprintf("store: %s\nlease_timeout: 3s\nremote: %s\nmerge: {into: main, gate: [\"true\"]}\n", srv.URL(dbName), bare)+taskWorker)
	dir := filepath.Dir(cfg)
	for _, args := range [][]string{{"init", "-q", "--bare", "-b", "main", bare}, {"-C", dir, "push", "-q", bare, "main"}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	d := open(t, cfg)
	// The queue is paused: the task waits to merge for as long as the test
	// looks.
	if err := d.merge.queue.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- d.Run(runCtx) }()
	t.Cleanup(func() { r.stop(t) })

	tk, err := d.tasks.Add(ctx, taskboard.NewTask{Title: "work", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	remoteLine := func() string {
		return gitOut(t, "--git-dir", bare, "rev-parse", "-q", "--verify", fmt.Sprintf("refs/heads/swarm/task/%d", tk.ID))
	}
	var head string
	waitFor(t, "the task done, its line on the remote", func() bool {
		got, err := d.tasks.Get(ctx, tk.ID)
		head = got.Head
		return err == nil && got.StateName == "DONE" && head != "" && remoteLine() == head
	})
	// A fenced-off attempt's line replaces it there.
	base := gitOut(t, "-C", dir, "rev-parse", "main")
	if out, err := exec.Command("git", "--git-dir", bare, "update-ref", fmt.Sprintf("refs/heads/swarm/task/%d", tk.ID), base).CombinedOutput(); err != nil {
		t.Fatalf("update-ref: %v %s", err, out)
	}
	deadline := time.Now().Add(4 * linePushAgain)
	for remoteLine() != head {
		if time.Now().After(deadline) {
			t.Fatalf("the remote's line is still at %s %v after it was replaced; want the frozen head %s pushed again", remoteLine(), 4*linePushAgain, head)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A daemon killed between the DONE's settlement and the keeping of
	// the line left the local line elsewhere (here: none), and the remote's
	// without the head: what is pushed again is the frozen head, not
	// whatever the local line holds.
	if out, err := exec.Command("git", "-C", dir, "update-ref", "-d", fmt.Sprintf("refs/heads/swarm/task/%d", tk.ID)).CombinedOutput(); err != nil {
		t.Fatalf("update-ref -d: %v %s", err, out)
	}
	if out, err := exec.Command("git", "--git-dir", bare, "update-ref", fmt.Sprintf("refs/heads/swarm/task/%d", tk.ID), base).CombinedOutput(); err != nil {
		t.Fatalf("update-ref: %v %s", err, out)
	}
	deadline = time.Now().Add(4 * linePushAgain)
	for remoteLine() != head {
		if time.Now().After(deadline) {
			t.Fatalf("the remote's line is at %s %v after the local line was lost; want the frozen head %s pushed again", remoteLine(), 4*linePushAgain, head)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLineKeptAtTheFrozenHead: a session that reports its task done with
// `swarmd task done` freezes the commit its worktree is at then; it may go
// on and move its HEAD elsewhere (amend the commit, reset to the target)
// before it ends. The task's line stays at the frozen head, which the
// reviewer was shown and the queue merges: kept at the session's last
// HEAD, the line (and the remote's copy, which the merging daemon of a
// shared store fetches the head from) no longer held the commit to merge,
// and the queue waited for it at its front for ever, every other task
// behind it. Where the line stands is the board's work_head, which the
// report set to the frozen head.
func TestLineKeptAtTheFrozenHead(t *testing.T) {
	ctx := context.Background()
	cfg := repo(t, agentsYAML("alice")+"merge: {into: main, gate: [\"true\"]}\n")
	dir := filepath.Dir(cfg)
	d := open(t, cfg)
	defer d.Close()
	commit := func(msg string) string {
		t.Helper()
		out, err := exec.Command("git", "-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid",
			"commit-tree", "-m", msg, "HEAD^{tree}").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out[:40])
	}
	tk, err := d.tasks.Add(ctx, taskboard.NewTask{Title: "work", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	const session = "alice-1"
	if _, err := d.tasks.Claim(ctx, tk.ID, "alice", session); err != nil {
		t.Fatal(err)
	}
	h := taskboard.Holder{Agent: "alice", Session: session}
	if _, err := d.tasks.Start(ctx, tk.ID, h); err != nil {
		t.Fatal(err)
	}
	frozen := commit("the work, reported done")
	if _, err := d.tasks.DoneAt(ctx, tk.ID, h, "done", frozen); err != nil {
		t.Fatal(err)
	}
	// The session goes on: its worktree ends at a commit that does not
	// hold the frozen one (an amend).
	lineKeeper{d}.OnSessionEnd(runner.SessionRecord{Agent: "alice", SessionID: session, Task: tk.ID, HeadAfter: commit("amended after the report")})
	line := gitOut(t, "-C", dir, "rev-parse", "-q", "--verify", fmt.Sprintf("refs/heads/swarm/task/%d", tk.ID))
	if line != frozen {
		t.Errorf("the line of a task frozen at %s is at %s after its session ended", frozen, line)
	}
	if got, err := d.tasks.Get(ctx, tk.ID); err != nil || got.Head != frozen || got.WorkHead != frozen {
		t.Errorf("task: head %q, work head %q (%v); want both %s", got.Head, got.WorkHead, err, frozen)
	}
}
