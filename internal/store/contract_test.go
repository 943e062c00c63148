package store_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store/storetest"
)

// sqliteHarness runs the contract on real files in temp dirs.
var sqliteHarness = storetest.Harness{
	Fresh:     func(t *testing.T) string { return filepath.Join(t.TempDir(), "swarm.db") },
	Open:      openStore,
	ChildTest: "TestContractChild",
}

// openStore opens a target for the contract, closed when the test ends.
var openStore = storetest.OpenTarget

func TestContract(t *testing.T) { storetest.Run(t, sqliteHarness) }

// TestContractChild is a process the contract's ConcurrentProcesses starts.
func TestContractChild(t *testing.T) { storetest.Child(t, openStore) }

// TestContractPostgres runs the contract on a real PostgreSQL server
// started for it, a fresh database per test.
func TestContractPostgres(t *testing.T) {
	srv := pgtest.Shared(t)
	n := 0
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) string {
			n++
			name := fmt.Sprintf("contract%d", n)
			if err := srv.CreateDB(name); err != nil {
				t.Fatal(err)
			}
			return srv.URL(name)
		},
		Open:      openStore, // store.Open picks the driver by the target
		ChildTest: "TestContractChild",
		Notifies:  true,
	})
}
