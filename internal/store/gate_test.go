package store

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The gate serves writers in order of arrival within their rank, outcomes
// before the rest, and a writer whose context ends leaves the line without
// taking or losing a turn.
func TestWriteGateOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g writeGate
		ctx := context.Background()
		if err := g.acquire(ctx); err != nil {
			t.Fatal(err)
		}
		var got []string
		done := make(chan struct{}, 8)
		enter := func(name string, ctx context.Context) {
			go func() {
				if err := g.acquire(ctx); err != nil {
					done <- struct{}{}
					return
				}
				got = append(got, name) // the turn serializes the appends
				g.release()
				done <- struct{}{}
			}()
			synctest.Wait() // queued before the next arrives
		}
		cctx, cancel := context.WithCancel(ctx)
		enter("claim-1", ctx)
		enter("gone", cctx)
		enter("claim-2", WithPriority(ctx, Normal))
		enter("outcome-1", WithPriority(ctx, Outcome))
		enter("claim-3", ctx)
		enter("outcome-2", WithPriority(ctx, Outcome))
		cancel()
		synctest.Wait()
		g.release()
		for range 6 {
			<-done
		}
		want := []string{"outcome-1", "outcome-2", "claim-1", "claim-2", "claim-3"}
		if len(got) != len(want) {
			t.Fatalf("served %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("served %v, want %v", got, want)
			}
		}
		// The gate is free again.
		if err := g.acquire(ctx); err != nil {
			t.Fatal(err)
		}
		g.release()
	})
}

// A Tx gives its turn back once, whether committed, rolled back, or both.
func TestTxGivesTheTurnBackOnce(t *testing.T) {
	db := openTest(t, "", Options{})
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES ('k', 'v')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("Rollback after Commit = %v", err)
	}
	// Two more turns: a double release would let both in at once and
	// leave the gate unbalanced; each must get it in turn.
	for range 2 {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback()
	}
	if db.gate.busy || len(db.gate.queues[Outcome])+len(db.gate.queues[Normal]) != 0 {
		t.Fatalf("gate after every turn given back: busy %v", db.gate.busy)
	}
}

// The gate counts its turns, how long they were held and how long writers
// waited in line, the turn in progress and the writers still in line
// included, so that the figures only grow.
func TestWriterStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &DB{}
		ctx := context.Background()
		if err := db.gate.acquire(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		if got, want := db.WriterStats(), (WriterStats{Turns: 1, Busy: 10 * time.Millisecond}); got != want {
			t.Fatalf("one turn held 10ms: %+v, want %+v", got, want)
		}
		granted := make(chan struct{})
		go func() {
			if err := db.gate.acquire(ctx); err != nil {
				t.Error(err)
			}
			close(granted)
		}()
		cctx, cancel := context.WithCancel(ctx)
		gaveUp := make(chan error)
		go func() { gaveUp <- db.gate.acquire(cctx) }()
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		// Two in line for 5ms, the holder at 15ms.
		if got, want := db.WriterStats(), (WriterStats{Turns: 1, Busy: 15 * time.Millisecond, Waited: 10 * time.Millisecond}); got != want {
			t.Fatalf("two in line: %+v, want %+v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
		cancel() // the second leaves the line after 10ms
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Fatalf("acquire after cancel = %v", err)
		}
		time.Sleep(5 * time.Millisecond)
		db.gate.release() // held 25ms; the first in line waited 15ms
		<-granted
		time.Sleep(3 * time.Millisecond)
		db.gate.release()
		if got, want := db.WriterStats(), (WriterStats{Turns: 2, Busy: 28 * time.Millisecond, Waited: 25 * time.Millisecond}); got != want {
			t.Fatalf("after both turns: %+v, want %+v", got, want)
		}
	})
}
