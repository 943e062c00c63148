package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// TestTryLockPostgres: two handles on one PostgreSQL database (two
// daemons): one holds a named lock at a time; a release frees it, and so
// does closing the holder's handle. Other names are independent.
func TestTryLockPostgres(t *testing.T) {
	srv := pgtest.Require(t)
	if err := srv.CreateDB("locks"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := openStore(t, srv.URL("locks"))
	b, err := store.Open(ctx, srv.URL("locks"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	la, ok, err := a.TryLock(ctx, "merge")
	if err != nil || !ok {
		t.Fatalf("first TryLock = %v, %v; want it taken", ok, err)
	}
	if err := la.Check(ctx); err != nil {
		t.Fatalf("Check of a held lock: %v", err)
	}
	if _, ok, err := b.TryLock(ctx, "merge"); err != nil || ok {
		t.Fatalf("TryLock of a held lock = %v, %v; want refused", ok, err)
	}
	if _, ok, err := a.TryLock(ctx, "merge"); err != nil || ok {
		t.Fatalf("TryLock by the holder's handle again = %v, %v; want refused (one holder)", ok, err)
	}
	other, ok, err := b.TryLock(ctx, "another")
	if err != nil || !ok {
		t.Fatalf("TryLock of another name = %v, %v; want taken", ok, err)
	}
	if err := other.Release(); err != nil {
		t.Fatal(err)
	}

	if err := la.Release(); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(); err != nil {
		t.Fatalf("a second Release = %v, want nil", err)
	}
	lb, ok, err := b.TryLock(ctx, "merge")
	if err != nil || !ok {
		t.Fatalf("TryLock after the release = %v, %v; want taken", ok, err)
	}

	// The holder's handle closes (a daemon stops, or dies: its connection
	// ends): the lock is free.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lb.Check(ctx); err == nil {
		t.Error("Check of a lock whose handle closed = nil, want an error")
	}
	la, ok, err = a.TryLock(ctx, "merge")
	if err != nil || !ok {
		t.Fatalf("TryLock after the holder closed = %v, %v; want taken", ok, err)
	}

	// The holder's connection dies (its machine is cut off): PostgreSQL
	// frees the lock, another handle takes it, and the old holder's Check
	// says it is lost.
	if err := srv.Exec("locks", `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'`); err != nil {
		t.Fatal(err)
	}
	c := openStore(t, srv.URL("locks"))
	var lc *store.Lock
	deadline := time.Now().Add(10 * time.Second)
	for lc == nil {
		l, ok, err := c.TryLock(ctx, "merge")
		switch {
		case err != nil:
			t.Fatal(err)
		case ok:
			lc = l
		case time.Now().After(deadline):
			t.Fatal("the lock of a terminated connection was not freed")
		default:
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := la.Check(ctx); err == nil {
		t.Error("Check of a lock whose connection was terminated = nil, want an error")
	}
	if err := la.Release(); err != nil {
		t.Errorf("Release of a lock lost with its connection = %v, want nil", err)
	}
	if err := lc.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestTryLockSQLite: on SQLite, a lock is always granted (one daemon per
// file: the state dir lock).
func TestTryLockSQLite(t *testing.T) {
	db := openStore(t, t.TempDir()+"/swarm.db")
	for range 2 {
		l, ok, err := db.TryLock(context.Background(), "merge")
		if err != nil || !ok {
			t.Fatalf("TryLock = %v, %v; want ok", ok, err)
		}
		if err := l.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer l.Release()
	}
}
