package daemon

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

func gitRun(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(cmd.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// anotherLeads is a PostgreSQL database name on the test server, a handle
// on it, and the merge lock it holds, as another daemon that leads the
// merge queue would; the test's end releases and closes them.
func anotherLeads(t *testing.T, name string) (string, *store.DB, *store.Lock) {
	t.Helper()
	srv := pgtest.Shared(t)
	name = srv.NewDB(t, name)
	url := srv.URL(name)
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	lock, ok, err := db.TryLock(context.Background(), mergeLockName)
	if err != nil || !ok {
		t.Fatalf("the other daemon's TryLock = %v, %v", ok, err)
	}
	t.Cleanup(func() { lock.Release() })
	return url, db, lock
}

// TestMergeOnOneDaemon: on a shared store the merge queue runs on the
// daemon holding the merge lock only. Here another daemon (played by a
// store handle) holds it; once it lets go, this daemon takes the queue
// over, fast-forwards its target to the remote's (the earlier merger's
// work), fetches from the remote the head another machine's agent pushed,
// merges it and pushes the target to the remote.
func TestMergeOnOneDaemon(t *testing.T) {
	ctx := context.Background()
	url, db, other := anotherLeads(t, "mergelock")

	bare := filepath.Join(t.TempDir(), "remote.git")
	gitRun(t, "init", "-q", "--bare", bare)
	cfg := repo(t, "remote: "+bare+"\nmerge: {into: main}\n"+sharedYAML(url, 10*time.Second, "alice"))
	dir := filepath.Dir(cfg)
	gitRun(t, "-C", dir, "push", "-q", bare, "main")
	// Another machine's clone: its agent bob commits and its daemon pushes.
	clone := filepath.Join(t.TempDir(), "clone")
	gitRun(t, "clone", "-q", "-b", "main", bare, clone)
	// The daemon that merged before (and holds the lock) pushed a merge.
	writeFile(t, filepath.Join(clone, "earlier.txt"), "earlier\n")
	gitRun(t, "-C", clone, "add", "earlier.txt")
	gitRun(t, "-C", clone, "commit", "-q", "-m", "merged by the daemon before")
	gitRun(t, "-C", clone, "push", "-q", "origin", "main")
	earlier := gitOut(t, "-C", clone, "rev-parse", "HEAD")
	// ... and recorded it in the shared store, as every queue does: the
	// leader takes the remote's target only at a commit a queue made.
	if _, err := db.ExecCount(ctx, "earlier merge", `INSERT INTO merge_queue (task_id, agent, branch, head, state, result, candidate, notified, enqueued_at)
		VALUES (0, 'carol', 'swarm/task/0', ?, 'merged', 'merged', ?, 1, '2026-01-01T00:00:00Z')`, earlier, earlier); err != nil {
		t.Fatal(err)
	}
	gitRun(t, "-C", clone, "checkout", "-q", "-b", "swarm/bob/work")
	writeFile(t, filepath.Join(clone, "bob.txt"), "bob\n")
	gitRun(t, "-C", clone, "add", "bob.txt")
	gitRun(t, "-C", clone, "commit", "-q", "-m", "bob's work")
	gitRun(t, "-C", clone, "push", "-q", "origin", "swarm/bob/work")
	head := gitOut(t, "-C", clone, "rev-parse", "HEAD")

	d := start(t, cfg)
	d.waitRunning(t, "alice")
	// Bob's daemon queues his finished task with the head it pushed.
	board := taskboard.New(db, taskboard.Options{})
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "bob's work", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	// Reported done at that head by bob's session, on the other machine.
	if _, err := db.ExecCount(ctx, "bob's DONE", `UPDATE tasks SET state = 'DONE', claimant = 'bob', head = ?, work_head = ? WHERE id = ?`,
		head, head, tk.ID); err != nil {
		t.Fatal(err)
	}
	queue := merge.NewStore(db, nil)
	if _, err := queue.Enqueue(ctx, tk.ID, "bob", "swarm/bob/work", head); err != nil {
		t.Fatal(err)
	}
	if e, err := queue.Latest(ctx, tk.ID); err != nil || e.State != merge.Queued {
		t.Fatalf("entry while another daemon holds the lock = %+v, %v; want queued", e, err)
	}
	// The dashboards show the queue as it is, not "not configured".
	src := viewSource{d: d.Daemon, spend: new(store.SpendTally)}
	mq, err := src.Merge(ctx)
	if err != nil || !mq.Configured || len(mq.Items) != 1 || mq.Items[0].TaskID != tk.ID || mq.Items[0].Title != "bob's work" ||
		mq.Items[0].State != "queued" || !src.Features().Merge {
		t.Fatalf("the dashboards' merge queue = %+v, %v (features %+v); want bob's task queued", mq, err, src.Features())
	}
	// The leader's run ahead, as it records it, shows on the dashboards.
	if _, err := db.ExecCount(ctx, "a run ahead", `UPDATE merge_control SET ahead_seq = 9, ahead_tasks = ? WHERE id = 1`,
		strconv.FormatInt(tk.ID, 10)); err != nil {
		t.Fatal(err)
	}
	if mq, err = src.Merge(ctx); err != nil || mq.AheadSeq != 9 || len(mq.Items) != 1 || mq.Items[0].State != "ahead" {
		t.Fatalf("the dashboards' merge queue with a run ahead = %+v, %v; want bob's task ahead in gate run 9", mq, err)
	}

	if err := other.Release(); err != nil { // the other daemon stops
		t.Fatal(err)
	}
	waitFor(t, "bob's work merged by this daemon", func() bool {
		e, err := queue.Latest(ctx, tk.ID)
		return err == nil && e.State == merge.Merged
	})
	local := gitOut(t, "-C", dir, "rev-parse", "refs/heads/main")
	for _, c := range []string{earlier, head} {
		if err := exec.Command("git", "-C", dir, "merge-base", "--is-ancestor", c, local).Run(); err != nil {
			t.Fatalf("main %s does not hold %s (the earlier merge, then bob's head)", local, c)
		}
	}
	waitFor(t, "the merged target on the remote", func() bool {
		return gitOut(t, "--git-dir", bare, "rev-parse", "refs/heads/main") == local
	})
	if got := gitOut(t, "-C", dir, "rev-parse", "--verify", "--quiet", "refs/heads/swarm/bob/work"); got != "" {
		t.Errorf("the fetch created a local branch swarm/bob/work at %s", got)
	}
}

// TestUnseenTargetMergesOnlyOntoTheLastMerge: when the merging daemon
// cannot fetch the remote's target (the remote away, or git's fetch
// refused while a sandboxed session's commit has its objects in
// quarantine), it merges on only if its own target holds the swarm's last
// merge. TestChaosPostgres found a daemon that took the queue over after
// another had merged, could not fetch, and merged onto its stale target:
// the remote refused its push, the targets forked, and tasks were recorded
// merged that the remote's target never got.
func TestUnseenTargetMergesOnlyOntoTheLastMerge(t *testing.T) {
	ctx := context.Background()
	gone := filepath.Join(t.TempDir(), "no-remote.git")
	cfg := repo(t, agentsYAML("alice")+"remote: "+gone+"\nmerge: {into: main, gate: [\"true\"]}\n")
	dir := filepath.Dir(cfg)
	d := open(t, cfg)
	defer d.Close()
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	merged := func(candidate string) {
		t.Helper()
		if _, err := d.db.SQL().ExecContext(ctx, `INSERT INTO merge_queue (task_id, agent, branch, head, state, result, detail, candidate,
			gate_seq, enqueued_at, finished_at) VALUES (?, 'bob', 'swarm/task/1', ?, 'merged', 'merged', '', ?, 1, ?, ?)`,
			time.Now().UnixNano(), candidate, candidate, store.FormatTime(time.Now()), store.FormatTime(time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	// No merge yet: the first one's push creates the remote's target.
	if err := d.checkTarget(ctx, "main", gone); err != nil {
		t.Fatalf("no merge yet, the remote unseen: %v, want merge on", err)
	}
	// This daemon merged last: its target holds the last merge.
	merged(git("rev-parse", "main"))
	if err := d.checkTarget(ctx, "main", gone); err != nil {
		t.Fatalf("the target holds the last merge, the remote unseen: %v, want merge on", err)
	}
	// Another daemon merged since, onto a commit this repository lacks.
	merged(git("commit-tree", "-p", "main", "-m", "another daemon's merge", "main^{tree}"))
	if err := d.checkTarget(ctx, "main", gone); err == nil || !strings.Contains(err.Error(), "lacks the swarm's last merge") {
		t.Fatalf("the target lacks another daemon's last merge, the remote unseen: %v, want a wait", err)
	}
}
