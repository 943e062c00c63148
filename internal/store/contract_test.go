package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/store/storetest"
)

// sqliteHarness runs the contract on real files in temp dirs.
var sqliteHarness = storetest.Harness{
	Fresh:     func(t *testing.T) string { return filepath.Join(t.TempDir(), "swarm.db") },
	Open:      openSQLite,
	ChildTest: "TestContractChild",
}

func openSQLite(t testing.TB, path string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return db
}

func TestContract(t *testing.T) { storetest.Run(t, sqliteHarness) }

// TestContractChild is a process the contract's ConcurrentProcesses starts.
func TestContractChild(t *testing.T) { storetest.Child(t, openSQLite) }
