package merge

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// TestLoopThatLostTheLeadMovesNothing: two daemons' queues, each in its own
// clone, on one PostgreSQL store. A's loop runs the gate of task 1 when B's
// loop takes the lead (on a shared store: B took the merge lock, which A
// lost with its connection, and A has not seen it yet). B tests the task
// again and merges it. A's gate then passes: A must not move its target,
// record the task merged at its own commit, or report it; its writes are
// refused. The store has the one merge, B's, at B's commit.
func TestLoopThatLostTheLeadMovesNothing(t *testing.T) {
	ctx := context.Background()
	a, b, head := twoQueues(t, "leader")
	startA, startB := a.main(), b.main()

	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "go")
	optsA := a.options("touch " + started + "; while [ ! -e " + release + " ]; do sleep 0.05; done")
	core, logsA := observer.New(zapcore.WarnLevel)
	optsA.Log = zap.New(core)
	qa, qb := a.open(optsA), b.open(b.options("true"))
	if _, err := qa.Enqueue(ctx, 1, "w", "swarm/w/work", head); err != nil {
		t.Fatal(err)
	}
	qa.Start(ctx)
	waitForFile(t, started)

	qb.Start(ctx) // B leads now
	st := NewStore(b.db, nil)
	var e Entry
	deadline := time.Now().Add(waitLimit)
	for e.State != Merged {
		if time.Now().After(deadline) {
			t.Fatalf("task 1 not merged by B: %+v", e)
		}
		time.Sleep(20 * time.Millisecond)
		var err error
		if e, err = st.Latest(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	mergedB := b.main()
	if mergedB == startB || e.Candidate != mergedB {
		t.Fatalf("B's main %s (was %s), entry %+v: want the entry merged at B's new main", mergedB, startB, e)
	}

	// A's gate passes now.
	writeFile(t, release, "")
	deadline = time.Now().Add(waitLimit)
	for {
		if a.main() != startA {
			break // the bug: A moved its target too
		}
		refused := false
		for _, l := range logsA.All() {
			if err, ok := l.ContextMap()["error"].(string); ok && l.Message == "merge queue step failed" && err != "" {
				refused = true
			}
		}
		if refused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's loop neither moved its target nor failed its step; its warnings: %v", logsA.All())
		}
		time.Sleep(20 * time.Millisecond)
	}
	qa.Stop()
	if got := a.main(); got != startA {
		t.Errorf("A's main moved to %s after A lost the lead (B merged the task at %s)", got, mergedB)
	}
	if e, err := st.Latest(ctx, 1); err != nil || e.State != Merged || e.Candidate != mergedB {
		t.Errorf("task 1's entry = %+v, %v; want merged at B's %s", e, err, mergedB)
	}
	for _, c := range a.cb.all() {
		t.Errorf("A's loop reported %+v after it lost the lead", c)
	}
	merged := 0
	for _, ev := range b.events() {
		if strings.HasPrefix(ev, "testing --merged--> merged") {
			merged++
		}
	}
	if merged != 1 {
		t.Errorf("%d merged events, want 1: %v", merged, b.events())
	}
	// A's writes are refused as such.
	if err := qa.store.requeue(ctx, &e, "stale"); !errors.Is(err, ErrNotLeader) {
		t.Errorf("a write of A's store after it lost the lead: %v, want ErrNotLeader", err)
	}
	_ = os.Remove(release)
}

// twoQueues is two daemons' queue environments on one PostgreSQL store
// (database name): A's, and B's in a clone of A's repository holding the
// worker's branch, whose head is returned.
func twoQueues(t *testing.T, name string) (a, b *env, head string) {
	t.Helper()
	srv := pgtest.Shared(t)
	name = srv.NewDB(t, name)
	openDB := func() *store.DB {
		db, err := store.Open(context.Background(), srv.URL(name), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	a = newEnv(t)
	a.db.Close() // newEnv's SQLite file: A's store is PostgreSQL
	a.db = openDB()
	// B: another daemon's state dir and store handle (one Supervisor a
	// process).
	bState := filepath.Join(t.TempDir(), "state")
	b = &env{t: t, stateDir: bState, db: openDB(), sup: a.sup, logs: logs.New(bState, 0, 0, nil), cb: newRecorder(),
		metrics: &metricsRecorder{}, mark: a.mark}
	w := a.worker("w")
	head = commitFile(t, w, "w.txt", "w\n", "w's work")
	b.repo = filepath.Join(t.TempDir(), "b")
	gitT(t, a.repo, "clone", "-q", a.repo, b.repo)
	gitT(t, b.repo, "fetch", "-q", a.repo, "swarm/w/work:swarm/w/work")
	gitT(t, b.repo, "checkout", "-q", "--detach")
	return a, b, head
}

// pausingMetrics holds the loop in MergeResult, which it calls once its
// batch is recorded merged and before it reports it: where a daemon
// stopped (SIGSTOP, a frozen VM) or cut off loses the merge lock.
type pausingMetrics struct {
	*metricsRecorder
	recorded chan struct{}
	resume   chan struct{}
}

func (m *pausingMetrics) MergeResult(r string) {
	m.metricsRecorder.MergeResult(r)
	close(m.recorded)
	<-m.resume
}

// TestMergeALoopThatLostTheLeadNeverPushedIsMergedAgain: A's loop moves
// its target to C and records task 1 merged at C; it loses the lead before
// it reports (its daemon stopped there: the report pushes A's target, the
// only place C is). B's loop takes the lead. B's report of the task would
// close it merged at C, pushing B's target, which does not hold C: the
// task's work on no target but A's clone's. B merges it again instead, and
// reports it merged at a commit of its own target, once.
func TestMergeALoopThatLostTheLeadNeverPushedIsMergedAgain(t *testing.T) {
	ctx := context.Background()
	a, b, head := twoQueues(t, "leaderreport")

	pm := &pausingMetrics{metricsRecorder: a.metrics, recorded: make(chan struct{}), resume: make(chan struct{})}
	optsA := a.options("true")
	optsA.Metrics = pm
	qa, qb := a.open(optsA), b.open(b.options("true"))
	if _, err := qa.Enqueue(ctx, 1, "w", "swarm/w/work", head); err != nil {
		t.Fatal(err)
	}
	qa.Start(ctx)
	select {
	case <-pm.recorded:
	case <-time.After(waitLimit):
		t.Fatal("A's loop did not record task 1")
	}
	qb.Start(ctx) // B leads now
	deadline := time.Now().Add(waitLimit)
	for len(b.cb.all()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(pm.resume)
	qa.Stop()
	qb.Stop()
	if n := len(a.cb.all()); n != 0 {
		t.Errorf("A, which lost the lead, reported %d results", n)
	}
	reported := 0
	for _, c := range b.cb.all() {
		if !c.merged || c.task != 1 {
			continue
		}
		reported++
		if _, err := gitOut(b.repo, "merge-base", "--is-ancestor", c.commit, "main"); err != nil {
			t.Errorf("B reported task 1 merged at %s, which its own target (the one its report pushes) does not hold", c.commit)
		}
	}
	if reported != 1 {
		t.Errorf("task 1 reported merged %d times, want once", reported)
	}
}
