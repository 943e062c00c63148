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

	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// mergeLeaderConfig is a daemon of the merge leader's tests on a shared
// store: agent NAME commits a file of its session's on a task (a "work item") and reports DONE; the
// gate waits, after noting in OUT that it started (and where:
// the daemon's integration worktree); the gate of task N waits for
// OUT/go-N.
func mergeLeaderConfig(t *testing.T, repo, url, lease, out, agent string) string {
	t.Helper()
	worker := `p=$(cat); if printf '%s' "$p" | grep -q 'work item'; then f=work-$SWARM_SESSION_ID.txt; echo "$SWARM_SESSION_ID" > "$f"; git add "$f"; git commit -q -m "work of $SWARM_SESSION_ID"; fi; echo DONE`
	gate := fmt.Sprintf(`echo "$SWARM_MERGE_TASKS $PWD" >> %[1]s/gate-started; while [ ! -e %[1]s/go-$SWARM_MERGE_TASKS ]; do sleep 0.05; done`, out)
	return writeConfig(t, repo, fmt.Sprintf(`
listen: ""
isolation: off
store: %q
lease_timeout: %s
remote: origin
defaults:
  grace_period: 1s
  min_session_interval: 50ms
merge:
  into: main
  batch: 1
  gate: [%q]
backends:
  worker: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: %s, role: works, backend: worker}
`, url, lease, gate, worker, agent))
}

// mergeEntries reads the merge queue's entries from the store.
func mergeEntries(t *testing.T, db *store.DB) []merge.Entry {
	t.Helper()
	es, err := merge.NewStore(db, nil).List(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// gitOutput runs git and returns its trimmed output.
func gitOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestPausedMergeLeaderDoesNotRejectOnItsGuardsKill: the merge leader is
// stopped (SIGSTOP) during a gate run past its lease; its lease guard kills
// every process of the daemon, the gate included. That run was not the
// task's to fail: when the daemon continues, the task is tested again and
// merged, not sent back to its worker as gate_failed.
func TestPausedMergeLeaderDoesNotRejectOnItsGuardsKill(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "mergeguard")
	url := srv.URL(dbName)
	out := t.TempDir()
	remote := filepath.Join(t.TempDir(), "remote.git")
	seed := gitRepo(t)
	gitOutput(t, "init", "-q", "--bare", "-b", "main", remote)
	gitOutput(t, "-C", seed, "push", "-q", remote, "main")
	repo := filepath.Join(t.TempDir(), "clone")
	gitOutput(t, "clone", "-q", remote, repo)
	cfg := mergeLeaderConfig(t, repo, url, "2s", out, "alice")
	stateDir := filepath.Join(repo, ".swarm")

	a := startDaemon(t, cfg)
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		if t.Failed() {
			t.Logf("daemon's log:\n%s", a.log())
		}
	})
	a.waitLine("the merge leader", func(m map[string]any) bool { return m["msg"] == "this daemon runs the swarm's merge queue" })
	id := addTask(t, cfg, "work item", "--to", "alice")
	var pids []int
	waitUntil(t, "the gate running", func() bool {
		b, _ := os.ReadFile(filepath.Join(out, "gate-started"))
		pids = treePids(stateDir)
		return strings.Count(string(b), "\n") == 1 && len(pids) > 0
	})

	// Stopped past the guard's deadline: the guard kills the gate.
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the gate killed by the lease guard", func() bool { return ended(pids) && len(treeProcesses(stateDir)) == 0 })
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The task is gated again (a second run), then let through; or, the
	// bug, rejected on the killed run.
	waitUntil(t, "a second gate run or a rejection", func() bool {
		b, _ := os.ReadFile(filepath.Join(out, "gate-started"))
		es := mergeEntries(t, db)
		return strings.Count(string(b), "\n") >= 2 || (len(es) > 0 && es[0].State == merge.Rejected)
	})
	letGo(t, out, id)
	waitUntil(t, "the task's entry finished", func() bool {
		es := mergeEntries(t, db)
		return len(es) > 0 && (es[len(es)-1].State == merge.Merged || es[len(es)-1].State == merge.Rejected)
	})
	for _, e := range mergeEntries(t, db) {
		if e.Task == id && e.State == merge.Rejected {
			t.Errorf("task %d rejected (%s) on the run its daemon's lease guard killed:\n%s", id, e.Result, e.Detail)
		}
	}
	waitTaskCLI(t, cfg, id, func(tk taskboard.Task) bool { return tk.StateName == "CLOSED" })
	if n := taskMerges(t, repo, "main", id); n != 1 {
		t.Errorf("main has %d merge commits of task %d, want 1", n, id)
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(20 * time.Second)
}

// taskMerges counts the commits of branch in repo that carry task id's
// Swarmd-Task trailer.
func taskMerges(t *testing.T, repo, branch string, id int64) int {
	t.Helper()
	n := 0
	for _, l := range strings.Split(gitOutput(t, "--git-dir", gitDir(t, repo), "log", "--format=%(trailers:key=Swarmd-Task,valueonly)", branch), "\n") {
		if strings.TrimSpace(l) == fmt.Sprint(id) {
			n++
		}
	}
	return n
}

// letGo lets task id's gate runs pass.
func letGo(t *testing.T, out string, id int64) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(out, fmt.Sprintf("go-%d", id)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// gateRuns are the gate runs started so far: the task and the directory
// (the daemon's integration worktree) of each.
func gateRuns(out string) [][2]string {
	b, _ := os.ReadFile(filepath.Join(out, "gate-started"))
	var runs [][2]string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if task, dir, ok := strings.Cut(l, " "); ok {
			runs = append(runs, [2]string{task, dir})
		}
	}
	return runs
}

// gateRunsOf counts the gate runs of task id in the daemon of stateDir.
func gateRunsOf(out string, id int64, stateDir string) int {
	n := 0
	for _, r := range gateRuns(out) {
		if r[0] == fmt.Sprint(id) && strings.HasPrefix(r[1], stateDir) {
			n++
		}
	}
	return n
}

// cutMergeLock ends the server session that holds the merge lock, as a
// network cut of that one connection would: PostgreSQL frees the lock.
func cutMergeLock(t *testing.T, srv *pgtest.Server, db string) {
	t.Helper()
	got, err := srv.Query(db, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND objsubid = 1 AND objid::text::bigint = (hashtext('swarmd merge queue')::bigint & 4294967295)`)
	if err != nil || got != "1" {
		t.Fatalf("cut the merge lock's session: %q, %v", got, err)
	}
}

// TestMergeLeaderCutOffWhilePausedLeavesTheBatchToItsSuccessor: daemon A
// runs the merge queue on a shared store and gates task 1 when it is
// stopped (SIGSTOP) and its merge lock's connection is cut: daemon B takes
// the queue over, gates the task again and merges it. When A continues, its
// gate has passed; it has lost the lead, and must not move its target or
// record the task merged at its own commit. Then B is killed (SIGKILL)
// during the gate of task 2: A takes the queue over and merges it. Then
// the server restarts (immediate) during the gate of task 3. Every task is
// merged once: one merge commit on the remote's main each, the store's
// record at that commit.
func TestMergeLeaderCutOffWhilePausedLeavesTheBatchToItsSuccessor(t *testing.T) {
	// Its own repositories, daemons and server; mostly waiting on leases and sessions.
	t.Parallel()
	srv := pgtest.RequireDurable(t) // an immediate restart loses no acknowledged commit
	const dbName = "mergeleader"
	if err := srv.CreateDB(dbName); err != nil {
		t.Fatal(err)
	}
	url := srv.URL(dbName)
	p := startMergePair(t, url, "30s")
	out, remote, repoA, repoB, cfgA, cfgB, stateA, stateB, a, b, logs :=
		p.out, p.remote, p.repoA, p.repoB, p.cfgA, p.cfgB, p.stateA, p.stateB, p.a, p.b, p.logs
	leads := leadsMerge
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range mergeEntries(t, db) {
				t.Logf("merge entry %+v", e)
			}
			ctl, err := srv.Query(dbName, `SELECT row_to_json(merge_control) FROM merge_control`)
			t.Logf("merge_control %s %v", ctl, err)
			tasks, err := srv.Query(dbName, `SELECT id, state FROM tasks ORDER BY id`)
			t.Logf("tasks %s %v", tasks, err)
		}
	})

	// 1. A stopped and cut off during task 1's gate; B merges it.
	t1 := addTask(t, cfgA, "work item 1", "--to", "alice")
	waitUntil(t, "A gating task 1", func() bool { return gateRunsOf(out, t1, stateA) == 1 })
	// A pushes the task's line after the session, apart from its queue: B
	// can merge only the head the remote holds. (Stopped before the push,
	// A leaves B waiting for it, as it should.)
	waitUntil(t, "task 1's line on the remote", func() bool {
		return exec.Command("git", "--git-dir", remote, "rev-parse", "--verify", "-q", fmt.Sprintf("refs/heads/swarm/task/%d", t1)).Run() == nil
	})
	mainA := gitOutput(t, "-C", repoA, "rev-parse", "refs/heads/main")
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cutMergeLock(t, srv, dbName)
	b.waitLine("B leads the merge queue", leads)
	waitUntil(t, "B gating task 1", func() bool { return gateRunsOf(out, t1, stateB) == 1 })
	letGo(t, out, t1) // A's gate passes too, A stopped
	waitTaskCLI(t, cfgB, t1, func(tk taskboard.Task) bool { return tk.StateName == "CLOSED" })
	mainB := gitOutput(t, "-C", repoB, "rev-parse", "refs/heads/main")
	waitUntil(t, "B's merge on the remote", func() bool {
		return gitOutput(t, "--git-dir", remote, "rev-parse", "refs/heads/main") == mainB
	})
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a.waitLine("A sees the merge lock lost", func(m map[string]any) bool {
		return m["msg"] == "merge queue: the merge lock is lost; stopping the queue"
	})
	// A stops: whatever its loop was to do after its gate is done by then.
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(30 * time.Second)
	if got := gitOutput(t, "-C", repoA, "rev-parse", "refs/heads/main"); got != mainA {
		t.Errorf("A moved its main to %s after it lost the queue (B merged task 1 at %s)", got, mainB)
	}
	checkMerged(t, db, remote, t1)

	// 2. B killed during task 2's gate; A, started again, takes it over.
	a = startDaemon(t, cfgA)
	logs["A"] = a
	t2 := addTask(t, cfgB, "work item 2", "--to", "bob")
	waitUntil(t, "B gating task 2", func() bool { return gateRunsOf(out, t2, stateB) == 1 })
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	b.wait(10 * time.Second)
	waitUntil(t, "A gating task 2", func() bool { return gateRunsOf(out, t2, stateA) == 1 })
	letGo(t, out, t2)
	waitTaskCLI(t, cfgA, t2, func(tk taskboard.Task) bool { return tk.StateName == "CLOSED" })
	checkMerged(t, db, remote, t2)

	// 3. The server restarts during task 3's gate (A's).
	t3 := addTask(t, cfgA, "work item 3", "--to", "alice")
	waitUntil(t, "A gating task 3", func() bool { return gateRunsOf(out, t3, stateA) == 1 })
	if err := srv.Restart("immediate", time.Second); err != nil {
		t.Fatal(err)
	}
	letGo(t, out, t3)
	waitTaskCLI(t, cfgA, t3, func(tk taskboard.Task) bool { return tk.StateName == "CLOSED" })
	checkMerged(t, db, remote, t3)
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(30 * time.Second)
	waitNoTreeProcesses(t, stateA, 10*time.Second)
	waitNoTreeProcesses(t, stateB, 10*time.Second)
}

// mergePair is two daemons, A (agent alice) and B (agent bob), each with
// its own clone of one bare remote, on one PostgreSQL store: A started and
// leading the merge queue, B started and running.
type mergePair struct {
	out, remote    string
	repoA, repoB   string
	cfgA, cfgB     string
	stateA, stateB string
	a, b           *daemonProc
	logs           map[string]*daemonProc // by name, logged if the test fails
}

var leadsMerge = func(m map[string]any) bool { return m["msg"] == "this daemon runs the swarm's merge queue" }

func startMergePair(t *testing.T, url, lease string) *mergePair {
	t.Helper()
	p := &mergePair{out: t.TempDir(), remote: filepath.Join(t.TempDir(), "remote.git")}
	seed := gitRepo(t)
	gitOutput(t, "init", "-q", "--bare", "-b", "main", p.remote)
	gitOutput(t, "-C", seed, "push", "-q", p.remote, "main")
	clone := func() string {
		dir := filepath.Join(t.TempDir(), "clone")
		gitOutput(t, "clone", "-q", p.remote, dir)
		return dir
	}
	p.repoA, p.repoB = clone(), clone()
	p.cfgA = mergeLeaderConfig(t, p.repoA, url, lease, p.out, "alice")
	p.cfgB = mergeLeaderConfig(t, p.repoB, url, lease, p.out, "bob")
	p.stateA, p.stateB = filepath.Join(p.repoA, ".swarm"), filepath.Join(p.repoB, ".swarm")
	p.a = startDaemon(t, p.cfgA)
	p.logs = map[string]*daemonProc{"A": p.a}
	t.Cleanup(func() {
		for name, d := range p.logs {
			_ = d.cmd.Process.Signal(syscall.SIGCONT)
			if t.Failed() {
				t.Logf("daemon %s's log:\n%s", name, d.log())
			}
		}
	})
	p.a.waitLine("A leads the merge queue", leadsMerge)
	p.b = startDaemon(t, p.cfgB)
	p.logs["B"] = p.b
	p.b.waitLine("B running", transitionTo("bob", "Running"))
	return p
}

// checkMerged: task id has one merged entry, at a commit of the remote's
// main that is the one merge commit of the task there; no other entry of it
// is merged or under test.
func checkMerged(t *testing.T, db *store.DB, remote string, id int64) {
	t.Helper()
	var merged []merge.Entry
	for _, e := range mergeEntries(t, db) {
		if e.Task != id {
			continue
		}
		switch e.State {
		case merge.Merged:
			merged = append(merged, e)
		case merge.Testing, merge.Queued:
			t.Errorf("task %d has an entry still %s: %+v", id, e.State, e)
		}
	}
	if len(merged) != 1 {
		t.Fatalf("task %d has %d merged entries, want 1: %+v", id, len(merged), merged)
	}
	waitUntil(t, fmt.Sprintf("task %d's merge on the remote", id), func() bool {
		return exec.Command("git", "--git-dir", remote, "merge-base", "--is-ancestor", merged[0].Candidate, "refs/heads/main").Run() == nil
	})
	if n := taskMerges(t, remote, "main", id); n != 1 {
		t.Errorf("the remote's main has %d merge commits of task %d, want 1", n, id)
	}
	msg := gitOutput(t, "--git-dir", remote, "log", "-1", "--format=%(trailers:key=Swarmd-Task,valueonly)", merged[0].Candidate)
	if strings.TrimSpace(msg) != fmt.Sprint(id) {
		t.Errorf("task %d's recorded commit %s carries Swarmd-Task %q", id, merged[0].Candidate, msg)
	}
}

// gitDir is repo's git directory (repo itself when bare).
func gitDir(t *testing.T, repo string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repo, ".git")); err == nil {
		return filepath.Join(repo, ".git")
	}
	return repo
}

// TestPausedMergeLeaderHandsTheQueueOver: the merge leader is stopped
// (SIGSTOP) and nothing else happens: its connection stays open, and so,
// before, did its merge lock, so that no other daemon ever ran the queue
// while it stayed stopped. The server now ends a lock session silent for
// the lease timeout (and several lock checks): daemon B takes the queue
// over, gates the task and merges it.
func TestPausedMergeLeaderHandsTheQueueOver(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "mergepause")
	p := startMergePair(t, srv.URL(dbName), "3s")
	out, repoB, cfgB, stateA, stateB, a, b := p.out, p.repoB, p.cfgB, p.stateA, p.stateB, p.a, p.b
	id := addTask(t, cfgB, "work item 1", "--to", "bob")
	waitUntil(t, "A gating the task", func() bool { return gateRunsOf(out, id, stateA) == 1 })
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	b.waitLine("B leads the merge queue", leadsMerge)
	// Silence bound 9 s (three lock checks), and B's next try 3 s later.
	if took := time.Since(paused); took > 20*time.Second {
		t.Errorf("B led the queue %s after A was stopped", took.Round(time.Second))
	}
	waitUntil(t, "B gating the task", func() bool { return gateRunsOf(out, id, stateB) == 1 })
	letGo(t, out, id)
	waitTaskCLI(t, cfgB, id, func(tk taskboard.Task) bool { return tk.StateName == "CLOSED" })
	if n := taskMerges(t, repoB, "main", id); n != 1 {
		t.Errorf("B's main has %d merge commits of task %d, want 1", n, id)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a.waitLine("A sees the merge lock lost", func(m map[string]any) bool {
		return m["msg"] == "merge queue: the merge lock is lost; stopping the queue"
	})
	for _, d := range []*daemonProc{a, b} {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
	}
	a.wait(30 * time.Second)
	b.wait(30 * time.Second)
}
