package merge

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestDepthIsReportedByTheLoopThatRunsTheQueue: on a shared store every
// daemon's queue enqueues, and one loop runs the queue (the merge
// leader's). A's queue, whose loop does not run, reports no depth when it
// enqueues; B's loop, which runs the queue, reports it; once B's loop
// stops (B lost the lead) it reports 0, and A's loop, which takes over,
// reports the depth. Summed over the daemons, the gauge is the queue's
// depth throughout (it was A's 1 plus B's 1, and B's 1 stayed after its
// loop stopped).
func TestDepthIsReportedByTheLoopThatRunsTheQueue(t *testing.T) {
	ctx := context.Background()
	a, b, head := twoQueues(t, "depth")
	dir := t.TempDir()
	release := filepath.Join(dir, "go")
	gate := func(name string) string {
		return "touch " + filepath.Join(dir, name) + "; while [ ! -e " + release + " ]; do sleep 0.05; done"
	}
	qa, qb := a.open(a.options(gate("a.started"))), b.open(b.options(gate("b.started")))
	t.Cleanup(func() { writeFile(t, release, "") }) // before the queues stop: no gate left waiting
	depths := func() (da, db int) {
		da, _, _ = a.metrics.snapshot()
		db, _, _ = b.metrics.snapshot()
		return da, db
	}

	qb.Start(ctx) // B leads
	if _, err := qa.Enqueue(ctx, 1, "w", "swarm/w/work", head); err != nil {
		t.Fatal(err)
	}
	if da, _ := depths(); da != 0 {
		t.Fatalf("A, whose loop does not run the queue, reports depth %d after its enqueue; want none", da)
	}
	qb.Wake() // as B's daemon does when the store changed
	waitForFile(t, filepath.Join(dir, "b.started"))
	if da, db := depths(); da != 0 || db != 1 {
		t.Fatalf("B testing task 1: depths A %d, B %d; want 0 and 1", da, db)
	}

	qb.Stop() // B lost the lead: its gate is killed, the entry stays first
	if da, db := depths(); da != 0 || db != 0 {
		t.Fatalf("B's loop stopped: depths A %d, B %d; want 0 and 0 (the queue is no longer B's to report)", da, db)
	}
	qa.Start(ctx) // A takes over
	waitForFile(t, filepath.Join(dir, "a.started"))
	if da, db := depths(); da != 1 || db != 0 {
		t.Fatalf("A testing task 1: depths A %d, B %d; want 1 and 0", da, db)
	}
	writeFile(t, release, "")
	deadline := time.Now().Add(waitLimit)
	for {
		e, err := qa.Store().Latest(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if da, db := depths(); e.State == Merged && da == 0 && db == 0 {
			break
		}
		if time.Now().After(deadline) {
			da, db := depths()
			t.Fatalf("task 1 %s, depths A %d, B %d; want merged and 0, 0", e.State, da, db)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
