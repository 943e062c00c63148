package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// busyTimeoutOf reads the write connection's busy_timeout, as a statement
// outside a transaction runs with it.
func busyTimeoutOf(t *testing.T, db *DB) int64 {
	t.Helper()
	var ms int64
	if err := db.SQL().QueryRow(`PRAGMA busy_timeout`).Scan(&ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// A write transaction's BEGIN waits in Go for another process's lock
// (busywait.go): it neither fails nor gives up while the lock is held, it
// begins once it is released, and the connection's statements outside a
// transaction get SQLite's busy handler back afterwards.
func TestBeginWaitsForAnotherWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	a, b := openTest(t, path, Options{}), openTest(t, path, Options{})
	held, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES ('k', 'b')`); err != nil {
		t.Fatal(err)
	}
	type begun struct {
		tx  *Tx
		err error
	}
	done := make(chan begun, 1)
	go func() {
		tx, err := a.Begin(ctx)
		done <- begun{tx, err}
	}()
	// The waiter has tried and slept a few times (it cannot have begun:
	// the lock is b's until it commits).
	time.Sleep(20 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("Begin returned while another connection held the lock: %v", r.err)
	default:
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	var r begun
	select {
	case r = <-done:
	case <-time.After(busyTimeout):
		t.Fatal("Begin still waiting after the lock was released")
	}
	if r.err != nil {
		t.Fatalf("Begin after the lock was released: %v", r.err)
	}
	var v string
	if err := r.tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = 'k'`).Scan(&v); err != nil || v != "b" {
		t.Fatalf("in the waiter's transaction: k = %q, %v; want b (the other writer's commit)", v, err)
	}
	if err := r.tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*DB{a, b} {
		if got, want := busyTimeoutOf(t, db), busyTimeout.Milliseconds(); got != want {
			t.Errorf("busy_timeout after a transaction = %d, want %d", got, want)
		}
	}
}

// A BEGIN whose context ends while it waits returns the context's error
// (not after busy_timeout), and leaves SQLite's busy handler on.
func TestBeginWaitEndsWithItsContext(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	a, b := openTest(t, path, Options{}), openTest(t, path, Options{})
	held, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	tx, err := a.Begin(wctx)
	if err == nil {
		tx.Rollback()
		t.Fatal("Begin succeeded while another connection held the lock")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Begin = %v, want the context's deadline", err)
	}
	if waited := time.Since(start); waited >= busyTimeout/2 {
		t.Fatalf("Begin gave up after %v, not with its context", waited)
	}
	if got, want := busyTimeoutOf(t, a), busyTimeout.Milliseconds(); got != want {
		t.Errorf("busy_timeout after an abandoned BEGIN = %d, want %d", got, want)
	}
}
