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
	srv := pgtest.Require(t)
	if err := srv.CreateDB("leader"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	openDB := func() *store.DB {
		db, err := store.Open(ctx, srv.URL("leader"), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	a := newEnv(t)
	a.db.Close() // newEnv's SQLite file: A's store is PostgreSQL
	a.db = openDB()
	// B: another daemon's state dir and store handle (one Supervisor a
	// process).
	bState := filepath.Join(t.TempDir(), "state")
	b := &env{t: t, stateDir: bState, db: openDB(), sup: a.sup, logs: logs.New(bState, 0, 0, nil), cb: newRecorder(),
		metrics: &metricsRecorder{}, mark: a.mark}
	// B's repository is a clone of A's, with the worker's branch.
	w := a.worker("w")
	head := commitFile(t, w, "w.txt", "w\n", "w's work")
	b.repo = filepath.Join(t.TempDir(), "b")
	gitT(t, a.repo, "clone", "-q", a.repo, b.repo)
	gitT(t, b.repo, "fetch", "-q", a.repo, "swarm/w/work:swarm/w/work")
	gitT(t, b.repo, "checkout", "-q", "--detach")
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
