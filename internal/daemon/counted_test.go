package daemon

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// countedRepo is a daemon's repository with a remote (bare) that holds its
// main; git runs git in it.
type countedRepo struct {
	t         *testing.T
	dir, bare string
}

func newCountedRepo(t *testing.T, body string) (*countedRepo, string) {
	bare := filepath.Join(t.TempDir(), "remote.git")
	cfg := repo(t, strings.ReplaceAll(body, "REMOTE", bare))
	r := &countedRepo{t: t, dir: filepath.Dir(cfg), bare: bare}
	gitRun(t, "init", "-q", "--bare", "-b", "main", bare)
	gitRun(t, "-C", r.dir, "remote", "add", "origin", bare)
	gitRun(t, "-C", r.dir, "push", "-q", "origin", "main") // as a clone has it: origin/main
	return r, cfg
}

func (r *countedRepo) git(args ...string) string {
	r.t.Helper()
	out, err := exec.Command("git", append([]string{"-C", r.dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// mergeOf is a merge commit of task onto parent as the queue makes it
// (with its trailer), adding file t<task>.txt; trailer false leaves the
// trailer out (someone's own commit).
func (r *countedRepo) mergeOf(parent string, task int, trailer bool, salt string) string {
	r.t.Helper()
	blob := r.git("hash-object", "-w", "--stdin", "--path", "x") // empty blob
	idx := filepath.Join(r.t.TempDir(), "index")
	env := []string{"GIT_INDEX_FILE=" + idx}
	run := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", r.dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
		cmd.Env = append(cmd.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			r.t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("read-tree", parent)
	run("update-index", "--add", "--cacheinfo", "100644,"+blob+",t"+fmt.Sprint(task)+".txt")
	tree := run("write-tree")
	msg := fmt.Sprintf("Merge task %d (%s)", task, salt)
	if trailer {
		msg += fmt.Sprintf("\n\nSwarmd-Task: %d\n", task)
	}
	return run("commit-tree", "-p", parent, "-m", msg, tree)
}

func recordMerged(t *testing.T, d *Daemon, task int, candidate string) {
	t.Helper()
	now := store.FormatTime(time.Now())
	if _, err := d.db.SQL().ExecContext(context.Background(), `INSERT INTO merge_queue (task_id, agent, branch, head, state, result, detail, candidate,
		gate_seq, notified, enqueued_at, finished_at) VALUES (?, 'bob', ?, ?, 'merged', 'merged', '', ?, 1, 1, ?, ?)`,
		task, fmt.Sprintf("swarm/task/%d", task), candidate, candidate, now, now); err != nil {
		t.Fatal(err)
	}
}

// TestNewLineStartsBelowAnUncountedMerge: with a remote, a new task line
// starts from the newest commit of the target that the swarm counts (one
// the remote's target holds as last fetched, or someone's own), not from a
// merge a leader moved its target to and was cut off before it pushed,
// recorded or not: the next leader merges that task again, and a line
// started on the first merge carried it (TestChaosPostgres).
func TestNewLineStartsBelowAnUncountedMerge(t *testing.T) {
	ctx := context.Background()
	r, cfg := newCountedRepo(t, agentsYAML("alice")+"remote: REMOTE\nmerge: {into: main, gate: [\"true\"]}\n")
	d := open(t, cfg)
	defer d.Close()
	if _, err := d.trees.FetchBranch(ctx, "main", r.bare); err != nil {
		t.Fatal(err)
	}
	pushed := r.git("rev-parse", "main")
	base := d.lineBase("main", r.bare)
	at := func() string {
		t.Helper()
		got, err := base(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r.git("rev-parse", got)
	}
	if got := at(); got != pushed {
		t.Fatalf("the target on the remote: a line starts at %.12s, want its tip %.12s", got, pushed)
	}
	lost := r.mergeOf(pushed, 7, true, "cut off")
	r.git("update-ref", "refs/heads/main", lost)
	if got := at(); got != pushed {
		t.Fatalf("a merge on the target that the remote lacks: a line starts at %.12s, want %.12s below it", got, pushed)
	}
	// Recorded by the store is not enough: the queue records a batch's
	// merges before it pushes them, and a leader cut off in between leaves
	// a recorded merge that the remote never gets.
	recordMerged(t, d, 7, lost)
	if got := at(); got != pushed {
		t.Fatalf("a recorded merge that the remote lacks: a line starts at %.12s, want %.12s below it", got, pushed)
	}
	// On the remote, as last fetched: the swarm's.
	gitRun(t, "-C", r.dir, "push", "-q", r.bare, "main")
	if _, err := d.trees.FetchBranch(ctx, "main", r.bare); err != nil {
		t.Fatal(err)
	}
	if got := at(); got != lost {
		t.Fatalf("the merge on the remote: a line starts at %.12s, want it (%.12s)", got, lost)
	}
	// Someone's own commit (no trailer) is theirs to have brought in: a
	// line starts on it, below an uncounted merge on it.
	mine := r.mergeOf(lost, 8, false, "someone's own")
	r.git("update-ref", "refs/heads/main", mine)
	if got := at(); got != mine {
		t.Fatalf("someone's own commit on the target: a line starts at %.12s, want it (%.12s)", got, mine)
	}
	lost2 := r.mergeOf(mine, 9, true, "cut off")
	r.git("update-ref", "refs/heads/main", lost2)
	if got := at(); got != mine {
		t.Fatalf("an uncounted merge on someone's own commit: a line starts at %.12s, want %.12s", got, mine)
	}
}

// TestNewLineOfADaemonStartsBelowAnUncountedMerge: the daemon's own agent,
// given a task, starts its line below the uncounted merge.
func TestNewLineOfADaemonStartsBelowAnUncountedMerge(t *testing.T) {
	ctx := context.Background()
	r, cfg := newCountedRepo(t, "remote: origin\nmerge: {into: main, gate: [\"true\"]}\n"+taskWorker)
	pushed := r.git("rev-parse", "main")
	r.git("checkout", "-q", "-b", "elsewhere") // main is the queue's, not checked out
	lost := r.mergeOf(pushed, 7, true, "cut off")
	r.git("update-ref", "refs/heads/main", lost)
	d := open(t, cfg)
	recordMerged(t, d, 1, pushed)                    // the swarm's last recorded merge
	if err := d.merge.queue.Pause(ctx); err != nil { // the task waits to merge
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	run := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
	go func() { run.errc <- d.Run(runCtx) }()
	t.Cleanup(func() { run.stop(t) })
	tk, err := d.tasks.Add(ctx, taskboard.NewTask{Title: "work", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	var head string
	waitFor(t, "the task done", func() bool {
		got, err := d.tasks.Get(ctx, tk.ID)
		head = got.Head
		return err == nil && got.StateName == "DONE" && head != ""
	})
	if got := r.git("rev-parse", head+"^"); got != pushed {
		t.Errorf("the task's line starts at %.12s, want %.12s (the remote's target, below the uncounted merge %.12s)", got, pushed, lost)
	}
}

// TestUncountedMergesSetAside: the leader taking the remote's target over
// its own, diverged, sets its own aside when every commit of it the remote
// lacks is a merge nobody recorded (kept under refs/swarmd/set-aside/), in
// the checkout that has the target or by a compare-and-swap of the ref;
// a commit of anyone else's keeps the queue waiting for the operator.
func TestUncountedMergesSetAside(t *testing.T) {
	for _, checkedOut := range []bool{true, false} {
		t.Run(fmt.Sprintf("checked out %v", checkedOut), func(t *testing.T) {
			ctx := context.Background()
			r, cfg := newCountedRepo(t, agentsYAML("alice")+"remote: REMOTE\nmerge: {into: main, gate: [\"true\"]}\n")
			if !checkedOut {
				r.git("checkout", "-q", "-b", "elsewhere")
			}
			d := open(t, cfg)
			defer d.Close()
			pushed := r.git("rev-parse", "main")
			// The leader after this daemon merged task 7 and recorded it.
			again := r.mergeOf(pushed, 7, true, "again")
			gitRun(t, "-C", r.dir, "push", "-q", r.bare, again+":refs/heads/main")
			recordMerged(t, d, 7, again)
			// This daemon's own merge of task 7 and a person's commit on it.
			lost := r.mergeOf(pushed, 7, true, "cut off")
			mine := r.mergeOf(lost, 8, false, "someone's own")
			moveMain := func(c string) { // this daemon's main, in its checkout or as a ref
				if checkedOut {
					r.git("reset", "-q", "--hard", c)
				} else {
					r.git("update-ref", "refs/heads/main", c)
				}
			}
			moveMain(mine)
			err := d.checkTarget(ctx, "main", r.bare)
			if err == nil || !strings.Contains(err.Error(), "each has commits the other lacks") {
				t.Fatalf("a person's commit among the ones the remote lacks: %v, want the queue to wait", err)
			}
			if got := r.git("rev-parse", "main"); got != mine {
				t.Fatalf("main moved to %.12s with a person's commit on it", got)
			}
			if got := r.git("for-each-ref", setAsidePrefix); got != "" {
				t.Fatalf("set aside with a person's commit on it: %s", got)
			}

			moveMain(lost)
			if err := d.checkTarget(ctx, "main", r.bare); err != nil {
				t.Fatalf("only an uncounted merge the remote lacks: %v, want it set aside", err)
			}
			if got := r.git("rev-parse", "main"); got != again {
				t.Errorf("main at %.12s, want the remote's %.12s", got, again)
			}
			kept := strings.Fields(r.git("for-each-ref", "--format=%(objectname) %(refname)", setAsidePrefix+"main/"))
			if len(kept) != 2 || kept[0] != lost {
				t.Errorf("kept: %q, want %s under %smain/", kept, lost, setAsidePrefix)
			}
			if checkedOut {
				if got := r.git("status", "--porcelain", "--untracked-files=no"); got != "" {
					t.Errorf("the checkout after the set-aside: %q, want clean", got)
				}
			}
			var reason string
			waitFor(t, "the set-aside's event", func() bool {
				return d.db.ReadSQL().QueryRowContext(ctx, `SELECT reason FROM events WHERE event = 'target_set_aside'`).Scan(&reason) == nil
			})
			if !strings.Contains(reason, "task(s) 7") {
				t.Errorf("the event's reason %q does not name task 7", reason)
			}
		})
	}
}

// TestUncountedMergeOfATaskNotMergedAgainSetAside: the uncounted merge is
// a real merge commit, its second parent the task's own head, and the
// swarm has not merged that task again (its next run was rejected, or it
// waits behind others) while the remote's target moved on with other
// merges. The task's own commits are not the target's: the merge is set
// aside all the same. Kept, it left this daemon's target diverged for the
// operator, and the queue, led by this daemon, waiting on the operator
// before the very task that would have ended it.
func TestUncountedMergeOfATaskNotMergedAgainSetAside(t *testing.T) {
	ctx := context.Background()
	r, cfg := newCountedRepo(t, agentsYAML("alice")+"remote: REMOTE\nmerge: {into: main, gate: [\"true\"]}\n")
	r.git("checkout", "-q", "-b", "elsewhere")
	d := open(t, cfg)
	defer d.Close()
	pushed := r.git("rev-parse", "main")
	// The leader after this daemon merged task 8 only, and recorded it.
	other := r.mergeOf(pushed, 8, true, "the next leader's")
	gitRun(t, "-C", r.dir, "push", "-q", r.bare, other+":refs/heads/main")
	recordMerged(t, d, 8, other)
	// This daemon's merge of task 7's head, as the queue makes it.
	head := r.mergeOf(pushed, 7, false, "task 7's own work")
	tree := r.git("rev-parse", head+"^{tree}")
	lost := r.git("commit-tree", "-p", pushed, "-p", head, "-m", "Merge task 7 from swarm/task/7\n\nSwarmd-Task: 7\n", tree)
	r.git("update-ref", "refs/heads/main", lost)

	if err := d.checkTarget(ctx, "main", r.bare); err != nil {
		t.Fatalf("an uncounted merge the remote lacks, with its task's commits: %v, want it set aside", err)
	}
	if got := r.git("rev-parse", "main"); got != other {
		t.Errorf("main at %.12s, want the remote's %.12s", got, other)
	}
	if got := r.git("for-each-ref", "--format=%(objectname)", setAsidePrefix+"main/"); got != lost {
		t.Errorf("kept %q, want %s", got, lost)
	}
}

// BenchmarkLineBase: where a new task line starts with a remote, in the
// usual case (the target's tip is the swarm's last recorded merge, the
// remote behind it by that merge), against reading the target alone
// (what a line starts from without a remote).
func BenchmarkLineBase(b *testing.B) {
	ctx := context.Background()
	bare := filepath.Join(b.TempDir(), "remote.git")
	dir := b.TempDir()
	run := func(args ...string) string {
		b.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...).CombinedOutput()
		if err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q", "-b", "main")
	for i := 0; i < 200; i++ {
		run("commit", "-q", "--allow-empty", "-m", fmt.Sprintf("c%d", i))
	}
	writeFile(b, filepath.Join(dir, "swarmd.yaml"), agentsYAML("alice")+"remote: origin\nmerge: {into: main, gate: [\"true\"]}\n")
	gitRun(b, "init", "-q", "--bare", "-b", "main", bare)
	run("remote", "add", "origin", bare)
	run("push", "-q", "origin", "main")
	merged := run("commit-tree", "-p", "main", "-m", "Merge task 1\n\nSwarmd-Task: 1", "main^{tree}")
	run("update-ref", "refs/heads/main", merged)
	cfg, err := config.Load(filepath.Join(dir, "swarmd.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	d, err := Open(ctx, cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	now := store.FormatTime(time.Now())
	if _, err := d.db.SQL().ExecContext(ctx, `INSERT INTO merge_queue (task_id, agent, branch, head, state, result, detail, candidate,
		gate_seq, notified, enqueued_at, finished_at) VALUES (1, 'bob', 'swarm/task/1', ?, 'merged', 'merged', '', ?, 1, 1, ?, ?)`,
		merged, merged, now, now); err != nil {
		b.Fatal(err)
	}
	base := d.lineBase("main", "origin")
	b.Run("lineBase", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if got, err := base(ctx); err != nil || got != merged {
				b.Fatalf("lineBase = %s, %v; want %s", got, err, merged)
			}
		}
	})
	b.Run("target", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if got, err := d.trees.BranchCommit(ctx, "main"); err != nil || got != merged {
				b.Fatalf("BranchCommit = %s, %v", got, err)
			}
		}
	})
}
