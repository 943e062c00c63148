package store

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"testing/synctest"
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
