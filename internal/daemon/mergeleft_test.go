package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// TestLeaderMergesTheWorkOfAWorkerThatLeft: on a shared store each daemon
// queues its own agents' finished tasks. A task whose worker no daemon
// runs any more (bob, removed from every config: no daemon holds his
// lease) once its review passed was queued by nobody, and stayed DONE for
// good: `task assign` refuses a DONE task. The daemon that leads the queue
// queues it instead, at its frozen head, fetched through the task's line
// on the remote, and merges exactly that commit once: not the commit a
// later push put on the line. While another daemon runs bob, that daemon
// queues it, and the leader does not. A task whose line on the remote does
// not hold its frozen head is not queued (it would hold up the queue for
// work no daemon pushes): the leader says which task, and what to do, and
// queues it once the line is pushed.
func TestLeaderMergesTheWorkOfAWorkerThatLeft(t *testing.T) {
	ctx := context.Background()
	db, bare, cfgPath, clone := leftWorkerSwarm(t, "mergeleft")
	dir := filepath.Dir(cfgPath)
	commit := func(file string) string {
		t.Helper()
		writeFile(t, filepath.Join(clone, file), file+"\n")
		gitRun(t, "-C", clone, "add", file)
		gitRun(t, "-C", clone, "commit", "-q", "-m", file)
		return gitOut(t, "-C", clone, "rev-parse", "HEAD")
	}

	// Bob's daemon ran him, and holds his lease.
	other := store.Lease{Daemon: "other:/srv/swarm", Host: "other", PID: 7}
	if err := db.SetMembers(ctx, other.Daemon, []store.Member{{Agent: "bob"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.AcquireLeases(ctx, other, []string{"bob"}, time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	board := taskboard.New(db, taskboard.Options{FrozenHead: true})
	// done is a task of bob's, DONE at head and passed by rita.
	done := func(title, head string) int64 {
		t.Helper()
		tk, err := board.Add(ctx, taskboard.NewTask{Title: title, Assignee: "bob", Reviewer: "rita"})
		if err != nil {
			t.Fatal(err)
		}
		h := taskboard.Holder{Agent: "bob", Session: "bob-" + title}
		if _, err := board.Claim(ctx, tk.ID, h.Agent, h.Session); err != nil {
			t.Fatal(err)
		}
		if _, err := board.DoneAt(ctx, tk.ID, h, "done", head); err != nil {
			t.Fatal(err)
		}
		if _, err := board.Verdict(ctx, tk.ID, "rita", head, true, "good"); err != nil {
			t.Fatal(err)
		}
		return tk.ID
	}
	// Task 1's line was never pushed where the leader can fetch it.
	gitRun(t, "-C", clone, "checkout", "-q", "-b", "unpushed")
	unpushed := commit("unpushed.txt")
	first := done("unpushed", unpushed)
	// Task 2's line was, at its frozen head; then a later commit went on
	// it (a fenced-off attempt's push): that is no work of the task's.
	gitRun(t, "-C", clone, "checkout", "-q", "-b", "swarm/task/2", "main")
	head := commit("bob.txt")
	second := done("bob's work", head)
	if second != 2 {
		t.Fatalf("the second task is %d, want 2 (its line is swarm/task/2)", second)
	}
	later := commit("later.txt")
	gitRun(t, "-C", clone, "push", "-q", "origin", "swarm/task/2")

	core, logged := observer.New(zap.WarnLevel)
	d, err := Open(ctx, mustLoad(t, cfgPath), Options{Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- d.Run(rctx) }()
	t.Cleanup(func() { r.stop(t) })
	waitFor(t, "this daemon leads the merge queue", func() bool { return d.run.ready.Load() && d.merge.leading.Load() })

	queue := merge.NewStore(db, nil)
	// While bob's daemon runs him, it queues his work: the leader does not.
	// Alice's task, ready after bob's, is queued by the leader's own
	// feeder, which saw bob's then too.
	gitRun(t, "-C", clone, "checkout", "-q", "-b", "swarm/task/3", "main")
	alices := commit("alice.txt")
	gitRun(t, "-C", clone, "push", "-q", "origin", "swarm/task/3")
	third, err := board.Add(ctx, taskboard.NewTask{Title: "alice's work", Assignee: "alice"})
	if err != nil || third.ID != 3 {
		t.Fatalf("alice's task = %+v, %v; want task 3 (its line is swarm/task/3)", third, err)
	}
	ah := taskboard.Holder{Agent: "alice", Session: "alice-test"}
	if _, err := board.Claim(ctx, third.ID, ah.Agent, ah.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := board.DoneAt(ctx, third.ID, ah, "done", alices); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alice's task queued by the leader", func() bool {
		_, err := queue.Latest(ctx, third.ID)
		return err == nil
	})
	for _, id := range []int64{first, second} {
		if e, err := queue.Latest(ctx, id); err == nil {
			t.Fatalf("task %d queued by the leader while another daemon runs bob: %+v", id, e)
		}
	}

	// That daemon stops (or dies, or pauses past its lease): bob's lease
	// is no daemon's, but a config still names him.
	if err := db.ReleaseLeases(ctx, other.Daemon, []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob's work merged by the leader", func() bool {
		tk, err := board.Get(ctx, second)
		return err == nil && tk.State == task.Closed
	})
	es, err := queue.List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var entries []merge.Entry
	for _, e := range es {
		if e.Task == second {
			entries = append(entries, e)
		}
	}
	if len(entries) != 1 || entries[0].State != merge.Merged || entries[0].Head != head || entries[0].Branch != "swarm/task/2" {
		t.Fatalf("task %d's entries %+v; want one, merged, of its line at its frozen head %s", second, entries, head)
	}
	main := gitOut(t, "-C", dir, "rev-parse", "refs/heads/main")
	if err := exec.Command("git", "-C", dir, "merge-base", "--is-ancestor", head, main).Run(); err != nil {
		t.Fatalf("main %s does not hold the frozen head %s", main, head)
	}
	if err := exec.Command("git", "-C", dir, "merge-base", "--is-ancestor", later, main).Run(); err == nil {
		t.Fatalf("main %s holds %s, pushed on the line after the frozen head", main, later)
	}
	waitFor(t, "the merge on the remote", func() bool {
		return gitOut(t, "--git-dir", bare, "rev-parse", "refs/heads/main") == main
	})

	// The unpushed one waits, out of the queue, and the operator is told.
	if e, err := queue.Latest(ctx, first); err == nil {
		t.Fatalf("task %d queued with its frozen head nowhere to fetch: %+v", first, e)
	}
	want := "swarm/task/1"
	waitFor(t, "a warning naming the unpushed task", func() bool {
		for _, e := range logged.All() {
			if e.ContextMap()["task"] == first && strings.Contains(e.Message, want) && strings.Contains(e.Message, "git push") {
				return true
			}
		}
		return false
	})
	// Told where a person looks too, once, but only once bob has left the
	// swarm: while a config names him, his daemon is away for a while
	// (the leader's log may be on another machine).
	left := time.Now()
	if err := db.SetMembers(ctx, other.Daemon, nil, left); err != nil { // its reload without bob
		t.Fatal(err)
	}
	var told []mailbox.Message
	waitFor(t, "a note to the operator naming the unpushed task", func() bool {
		notes, err := d.mail.Inbox(ctx, mailbox.Operator, true)
		if err != nil {
			t.Fatal(err)
		}
		told = told[:0]
		for _, m := range notes {
			if m.Subject == fmt.Sprintf("task #%d waits for its line to be pushed", first) && strings.Contains(m.Body, "git push") && strings.Contains(m.Body, unpushed) {
				told = append(told, m)
			}
		}
		return len(told) > 0
	})
	if len(told) != 1 || told[0].CreatedAt.Before(left.Truncate(time.Microsecond)) {
		t.Errorf("notes to the operator about task %d: %+v; want one, sent once bob left every config (at %s)", first, told, left)
	}
	// The operator pushes it from the clone that has it: it merges.
	gitRun(t, "-C", clone, "push", "-q", "origin", unpushed+":refs/heads/swarm/task/1")
	waitFor(t, "the unpushed task merged once pushed", func() bool {
		tk, err := board.Get(ctx, first)
		return err == nil && tk.State == task.Closed
	})
	if e, err := queue.Latest(ctx, first); err != nil || e.Head != unpushed || e.State != merge.Merged {
		t.Fatalf("task %d's entry %+v, %v; want merged at %s", first, e, err, unpushed)
	}
}

// A lease no daemon keeps any more is no daemon running its agent: bob's,
// left under the leader's own name by an earlier run of it that was killed
// (or whose stop could not give it up), then restarted without bob, has
// expired. No daemon reaps it (a daemon reaps only the others' leases,
// and this one is the only daemon of the swarm), so it stays in the store
// for good. The leader queues bob's work all the same: read as a daemon
// running bob, it left the task DONE for good.
func TestLeaderMergesTheWorkOfAWorkerWhoseLeaseExpired(t *testing.T) {
	ctx := context.Background()
	db, _, cfgPath, clone := leftWorkerSwarm(t, "mergeleftexpired")
	gitRun(t, "-C", clone, "checkout", "-q", "-b", "swarm/task/1", "main")
	writeFile(t, filepath.Join(clone, "bob.txt"), "bob\n")
	gitRun(t, "-C", clone, "add", "bob.txt")
	gitRun(t, "-C", clone, "commit", "-q", "-m", "bob")
	head := gitOut(t, "-C", clone, "rev-parse", "HEAD")
	gitRun(t, "-C", clone, "push", "-q", "origin", "swarm/task/1")

	cfg := mustLoad(t, cfgPath)
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	// This daemon's earlier run held bob's lease; it expired an hour ago.
	earlier := store.Lease{Daemon: host + ":" + cfg.StateDir, Host: host, PID: 7}
	if _, _, err := db.AcquireLeases(ctx, earlier, []string{"bob"}, time.Now().Add(-2*time.Hour), time.Hour); err != nil {
		t.Fatal(err)
	}
	board := taskboard.New(db, taskboard.Options{FrozenHead: true})
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "bob's work", Assignee: "bob", Reviewer: "rita"})
	if err != nil || tk.ID != 1 {
		t.Fatalf("bob's task = %+v, %v; want task 1 (its line is swarm/task/1)", tk, err)
	}
	h := taskboard.Holder{Agent: "bob", Session: "bob-work"}
	if _, err := board.Claim(ctx, tk.ID, h.Agent, h.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := board.DoneAt(ctx, tk.ID, h, "done", head); err != nil {
		t.Fatal(err)
	}
	if _, err := board.Verdict(ctx, tk.ID, "rita", head, true, "good"); err != nil {
		t.Fatal(err)
	}

	d, err := Open(ctx, cfg, Options{Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- d.Run(rctx) }()
	t.Cleanup(func() { r.stop(t) })
	waitFor(t, "this daemon leads the merge queue", func() bool { return d.run.ready.Load() && d.merge.leading.Load() })
	waitFor(t, "bob's work merged by the leader", func() bool {
		got, err := board.Get(ctx, tk.ID)
		return err == nil && got.State == task.Closed
	})
}

// leftWorkerSwarm is a shared store (database name) that alice's daemon,
// to be started from cfgPath, merges into main on the bare remote; clone
// is the clone of the machine whose daemon ran bob.
func leftWorkerSwarm(t *testing.T, name string) (db *store.DB, bare, cfgPath, clone string) {
	t.Helper()
	srv := pgtest.Shared(t)
	name = srv.NewDB(t, name)
	url := srv.URL(name)
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	bare = filepath.Join(t.TempDir(), "remote.git")
	gitRun(t, "init", "-q", "--bare", bare)
	cfgPath = repo(t, "remote: "+bare+"\nmerge: {into: main}\n"+sharedYAML(url, 10*time.Second, "alice"))
	gitRun(t, "-C", filepath.Dir(cfgPath), "push", "-q", bare, "main")
	clone = filepath.Join(t.TempDir(), "clone")
	gitRun(t, "clone", "-q", "-b", "main", bare, clone)
	return db, bare, cfgPath, clone
}
