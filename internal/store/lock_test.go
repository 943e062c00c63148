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
	srv := pgtest.Shared(t)
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
	lc := takeWithin(t, c, "merge", 10*time.Second, "the lock of a terminated connection")
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

// TestSilentLockHolderLosesTheLock: a holder that goes silent (its daemon
// stopped with SIGSTOP, or cut off without a word) kept its session-level
// lock for as long as the server kept its connection: for ever, so no
// other daemon ever ran the merge queue. Taken with TryLockFor, the lock
// passes to another handle once its holder has been silent that long,
// and the old holder's Check then says it is lost; a holder that keeps
// checking keeps it.
func TestSilentLockHolderLosesTheLock(t *testing.T) {
	srv := pgtest.Shared(t)
	if err := srv.CreateDB("silent"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := openStore(t, srv.URL("silent")), openStore(t, srv.URL("silent"))
	const silent = time.Second
	la, ok, err := a.TryLockFor(ctx, "merge", silent)
	if err != nil || !ok {
		t.Fatalf("TryLockFor = %v, %v; want it taken", ok, err)
	}
	// Checked more often than silent: still held after several times it.
	for end := time.Now().Add(3 * silent); time.Now().Before(end); time.Sleep(silent / 4) {
		if err := la.Check(ctx); err != nil {
			t.Fatalf("Check of a lock its holder keeps using: %v", err)
		}
		if _, ok, err := b.TryLock(ctx, "merge"); err != nil || ok {
			t.Fatalf("TryLock of a lock in use = %v, %v; want refused", ok, err)
		}
	}
	// Silent from now on: another handle takes it within a few times silent.
	lb := takeWithin(t, b, "merge", 10*silent, "the lock of a silent holder")
	if err := la.Check(ctx); err == nil {
		t.Error("Check of a lock lost to silence = nil, want an error")
	}
	if err := la.Release(); err != nil {
		t.Errorf("Release of a lost lock = %v, want nil", err)
	}
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}
}

// takeWithin takes lock name on db as soon as it is free, failing the test
// if it is not within d.
func takeWithin(t *testing.T, db *store.DB, name string, d time.Duration, what string) *store.Lock {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		l, ok, err := db.TryLock(context.Background(), name)
		switch {
		case err != nil:
			t.Fatal(err)
		case ok:
			return l
		case time.Now().After(deadline):
			t.Fatalf("%s was not freed within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
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
