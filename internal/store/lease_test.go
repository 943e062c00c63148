package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/store/storetest"
)

// On PostgreSQL a write transaction that checked an agent's lease holds
// the lease's row until it ends, so that no daemon takes the lease between
// the check and the commit; the holder's own renewal must not wait for it.
// It did (the check took FOR SHARE, which an UPDATE waits for): a renewal
// then queued behind writes, and one that had updated another lease row of
// the batch deadlocked with it (PostgreSQL broke the cycle after
// deadlock_timeout, 1 s by default, failing one side). Here the renewal
// goes through while such a transaction is open, and a takeover by another
// daemon still waits for it (the swarm's writer lock, and the row) and then
// raises the epoch. (The open transaction must end within the server's
// idle-in-transaction timeout, 5 s, or the server ends it.)
func TestRenewalDoesNotWaitForFencedWrites(t *testing.T) {
	srv := pgtest.Shared(t)
	if err := srv.CreateDB("renewfence"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func() *store.DB {
		db, err := store.Open(ctx, srv.URL("renewfence"), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	db, db2 := open(), open() // opening takes the writer lock to migrate
	const self, other = "host1:/srv", "host2:/srv"
	now := time.Now()
	held := storetest.HoldLeases(t, db, self, "ann", "bob")

	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, a := range []string{"bob", "ann"} {
		if err := db.FenceTx(ctx, tx.Tx, a); err != nil {
			t.Fatal(err)
		}
	}
	var one int
	if err := tx.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil { // sends the held-back checks
		t.Fatal(err)
	}

	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	renewed, err := db.RenewLeases(rctx, self, now, time.Hour)
	cancel()
	if err != nil || len(renewed) != 2 {
		t.Fatalf("renewal while a write transaction holds the checked leases = %d leases, %v; want both at once", len(renewed), err)
	}

	// Another daemon, once the lease has expired, waits for the open
	// transaction before it takes the name.
	later := now.Add(2 * time.Hour)
	type took struct {
		held []store.Lease
		err  error
	}
	done := make(chan took, 1)
	go func() {
		h, _, err := db2.AcquireLeases(ctx, store.Lease{Daemon: other, Host: "host2", PID: 2}, []string{"ann"}, later, time.Minute)
		done <- took{h, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("another daemon took ann's lease while a transaction that checked it was open: %v, %v", r.held, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the takeover neither waited nor finished within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.held) != 1 || r.held[0].Epoch != held[0].Epoch+1 {
		t.Fatalf("the takeover after the commit = %v, %v; want ann at epoch %d", r.held, r.err, held[0].Epoch+1)
	}
}
