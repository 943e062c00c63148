package daemon

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// Where nothing keeps an agent from writing the merge target, a move the
// queue did not make is seen (at the end of the session that made it, or
// by the watch) and recorded (target_moved), once: an agent that advances
// main past the queue, then one that rewinds it to the root commit. With
// isolation off: in a sandbox the agent cannot write main at all
// (cmd/swarmd's TestSandboxHoldsAHostileSession).
func TestTargetMovedByAnAgentIsRecorded(t *testing.T) {
	script := `p=$(cat)
case "$p" in
*"Your task: #"*rewind*) git update-ref refs/heads/main "$(git rev-list --max-parents=0 HEAD)"; echo DONE;;
*"Your task: #"*advance*) echo a > a.txt; git add a.txt; git commit -qm a; git update-ref refs/heads/main HEAD; echo DONE;;
*) echo idle; echo DONE;;
esac`
	cfg := agentMovesTarget(t, script)
	dir := filepath.Dir(cfg)
	root := strings.TrimSpace(git(t, dir, "rev-parse", "main"))
	r := start(t, cfg)
	ctx := context.Background()
	moves := func() []string { return targetMoves(t, r) }
	advance, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "advance main"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the advance recorded", func() bool { return len(moves()) == 1 })
	// Seen at the end of alice's session, or by the watch if it looked
	// first.
	advanced := strings.TrimSpace(git(t, dir, "rev-parse", "main"))
	if m, want := moves()[0], fmt.Sprintf("main advanced from %.12s to %.12s by someone other than the merge queue", root, advanced); !strings.HasPrefix(m, want) {
		t.Fatalf("recorded %q, want %q", m, want)
	}
	// The queue waits meanwhile: main's checkout does not have the files
	// of the commit alice put main at.
	rewind, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "rewind main"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rewind recorded", func() bool { return len(moves()) == 2 })
	if m, want := moves()[1], fmt.Sprintf("main rewound from %.12s to %.12s", advanced, root); !strings.HasPrefix(m, want) || !strings.Contains(m, "may no longer be on it") {
		t.Fatalf("recorded %q, want %q", m, want)
	}
	// The rewind leaves the checkout clean: the queue merges both tasks
	// onto the rewound main. Then a look of the daemon's, after the
	// queue's last move and after any look begun before it (it waits for
	// them), finds nothing more to record: each move once, and the
	// queue's merge not at all.
	waitFor(t, "both tasks merged", func() bool {
		for _, id := range []int64{advance.ID, rewind.ID} {
			if got, err := r.tasks.Get(ctx, id); err != nil || got.State != task.Closed {
				return false
			}
		}
		return true
	})
	merged := strings.TrimSpace(git(t, dir, "rev-parse", "main"))
	if strings.TrimSpace(git(t, dir, "rev-parse", merged+"^1")) != root {
		t.Fatalf("main at %.12s, want the queue's merge onto the rewound %.12s", merged, root)
	}
	r.lookAtTarget(ctx, "by the test")
	if ms := moves(); len(ms) != 2 {
		t.Fatalf("%d moves recorded, want each once (main at the queue's merge %.12s): %q", len(ms), merged, ms)
	}
	r.stop(t)
}

// TestTargetMoveTheQueueBuiltOnIsRecordedOnce: an agent moves main (to a
// commit of its own, with main's files: the checkout stays clean), and
// the queue merges the agent's task onto the moved main while a look that
// read the move is held between its sighting and its claim (under load,
// git's merge-base in the look is slower than the queue's merge). The move
// is recorded once, as the agent's; the queue's merge on it is not
// recorded at all. Before, the held look took the queue's place back to
// the stale tip, and the next look reported the queue's own merge as
// "advanced by someone other than the merge queue": 3 moves in
// TestTargetMovedByAnAgentIsRecorded under load.
func TestTargetMoveTheQueueBuiltOnIsRecordedOnce(t *testing.T) {
	script := `p=$(cat)
case "$p" in
*"Your task: #"*) echo a > a.txt; git add a.txt; git commit -qm a
  git update-ref refs/heads/main "$(git commit-tree -p main -m moved 'main^{tree}')"; echo DONE;;
*) echo idle; echo DONE;;
esac`
	cfg := agentMovesTarget(t, script)
	dir := filepath.Dir(cfg)
	main0 := strings.TrimSpace(git(t, dir, "rev-parse", "main"))
	r := start(t, cfg)
	ctx := context.Background()

	held, release := make(chan merge.Sighting, 1), make(chan struct{})
	r.merge.looking.Lock()
	first := true
	r.merge.lookHook = func(s merge.Sighting) { // under looking
		if first {
			first = false
			held <- s
			<-release
		}
	}
	r.merge.looking.Unlock()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	tk, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "move main"})
	if err != nil {
		t.Fatal(err)
	}
	var s merge.Sighting
	select {
	case s = <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("no look sighted alice's move of main")
	}
	if s.Last != main0 || s.Own {
		t.Fatalf("sighting %+v, want a move from %.12s", s, main0)
	}
	moved := s.Tip
	// The queue merges the task onto the moved main meanwhile.
	waitFor(t, "the task merged onto the moved main", func() bool {
		got, err := r.tasks.Get(ctx, tk.ID)
		return err == nil && got.State == task.Closed
	})
	merged := strings.TrimSpace(git(t, dir, "rev-parse", "main"))
	if merged == moved || strings.TrimSpace(git(t, dir, "rev-parse", merged+"^1")) != moved {
		t.Fatalf("main at %.12s, want the queue's merge onto %.12s", merged, moved)
	}
	close(release)
	// A look after it all: it waits for the held one, and finds nothing
	// more to record.
	r.lookAtTarget(ctx, "by the test")
	got := targetMoves(t, r)
	want := fmt.Sprintf("main advanced from %.12s to %.12s by someone other than the merge queue", main0, moved)
	if len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Fatalf("target_moved recorded %q, want once %q (main then at the queue's merge %.12s)", got, want, merged)
	}
	r.stop(t)
}

// agentMovesTarget is a swarm with merge.into main and one agent, alice,
// whose sessions run script, with nothing to keep it from writing main.
func agentMovesTarget(t *testing.T, script string) string {
	return repo(t, fmt.Sprintf(`
listen: ""
isolation: off
defaults: {backend: worker, grace_period: 1s, min_session_interval: 0s}
merge: {into: main}
backends:
  worker: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: alice, role: works}
`, script))
}

// targetMoves is the reasons of the target_moved events recorded so far.
func targetMoves(t *testing.T, r *running) []string {
	t.Helper()
	ctx := context.Background()
	_ = r.journal.Flush(ctx)
	evs, err := r.db.Events(ctx, store.EventQuery{Agent: "merge"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		if e.Event == "target_moved" {
			out = append(out, e.Reason)
		}
	}
	return out
}

// TestRemoteTargetMovedIsNotTaken: on a shared store the merge leader takes
// the remote's target only at a commit a merge queue made. Someone (an
// agent with the remote's credentials) pushes a commit straight to the
// remote's main: the leader does not fast-forward main to it, the task's
// entry waits saying why, and the move is recorded once (target_moved,
// kind remote).
func TestRemoteTargetMovedIsNotTaken(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "remotemoved")
	remote := filepath.Join(t.TempDir(), "remote.git")
	git(t, "", "init", "-q", "--bare", "-b", "main", remote)
	cfg := repo(t, fmt.Sprintf(`
listen: ""
store: %s
remote: %s
defaults: {backend: worker, grace_period: 1s, min_session_interval: 0s}
merge: {into: main}
backends:
  worker: {type: command, command: sh, args: [-c, 'p=$(cat); case "$p" in *"Your task: #"*) echo w > w.txt; git add w.txt; git commit -qm work; echo DONE;; *) echo idle; echo DONE;; esac']}
agents:
  - {name: alice, role: works}
`, srv.URL(dbName), remote))
	dir := filepath.Dir(cfg)
	git(t, dir, "push", "-q", remote, "main")
	main0 := strings.TrimSpace(git(t, dir, "rev-parse", "main"))

	// The push no merge queue made.
	other := filepath.Join(t.TempDir(), "other")
	git(t, "", "clone", "-q", remote, other)
	git(t, other, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "--allow-empty", "-m", "straight to main")
	git(t, other, "push", "-q", "origin", "main")
	pushed := strings.TrimSpace(git(t, other, "rev-parse", "HEAD"))

	r := start(t, cfg)
	ctx := context.Background()
	tk, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "work"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the entry waiting on the remote's target", func() bool {
		st, err := r.merge.queue.Status(ctx)
		return err == nil && strings.Contains(st.Waiting, "which no merge queue made")
	})
	if got := strings.TrimSpace(git(t, dir, "rev-parse", "main")); got != main0 {
		t.Errorf("main is at %s, want %s: the leader took %s", got, main0, pushed)
	}
	_ = r.journal.Flush(ctx)
	evs, err := r.db.Events(ctx, store.EventQuery{Agent: "merge"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Event == "target_moved" && strings.Contains(e.Reason, "on "+remote+" moved to "+pushed[:12]) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d target_moved events for the remote's move, want 1: %+v", n, evs)
	}
	if got, _ := r.tasks.Get(ctx, tk.ID); got.State == task.Closed {
		t.Errorf("task %d closed: merged onto a target no queue made", tk.ID)
	}
	r.stop(t)
}

// git runs git in dir ("" for none) and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	out, err := exec.Command("git", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}
