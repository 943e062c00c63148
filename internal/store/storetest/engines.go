package storetest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// Engines runs race on each engine the store has: a SQLite file, and a
// real PostgreSQL server, the test binary's shared one (pgtest.Shared: its
// TestMain must call pgtest.Share); fresh makes a new database, named
// prefix and a number on PostgreSQL. The packages with tables run their
// process races through it, on both engines alike.
func Engines(t *testing.T, prefix string, race func(t *testing.T, fresh func(t *testing.T) string)) {
	t.Run("sqlite", func(t *testing.T) {
		race(t, func(t *testing.T) string { return filepath.Join(t.TempDir(), "swarm.db") })
	})
	t.Run("postgres", func(t *testing.T) {
		srv := pgtest.Shared(t)
		race(t, func(t *testing.T) string { return srv.URL(srv.NewDB(t, prefix)) })
	})
}

// OpenTarget opens target (a path or a postgres:// URL), closed when the
// test ends.
func OpenTarget(t testing.TB, target string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), target, store.Options{})
	if err != nil {
		t.Fatalf("open %s: %v", target, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return db
}

// HoldLeases makes db the daemon that holds agents: it takes their leases
// for an hour from now and fences db's writes with the epochs taken, as a
// daemon's start does. It returns the leases, in agents' order.
func HoldLeases(t testing.TB, db *store.DB, daemon string, agents ...string) []store.Lease {
	t.Helper()
	held, _, err := db.AcquireLeases(context.Background(), store.Lease{Daemon: daemon, Host: "host1", PID: 1}, agents, time.Now(), time.Hour)
	if err != nil {
		t.Fatalf("take the leases of %v: %v", agents, err)
	}
	db.Fence(daemon)
	for _, l := range held {
		db.SetFence(l.Agent, l.Epoch)
	}
	return held
}
