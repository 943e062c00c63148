package store_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/store/storetest"
)

// batchOf queues one write for each key in g while another writer of
// this process holds the store's turn, so that they are applied as one
// batch, and returns each key's batch size and error.
func batchOf[K comparable](t *testing.T, db *store.DB, keys []K, do func(K) func(context.Context, *sql.Tx) error) map[K]batched {
	t.Helper()
	return batchThen(t, db, keys, func(k K) func(context.Context, *sql.Tx) (func() error, error) {
		return func(ctx context.Context, tx *sql.Tx) (func() error, error) { return nil, do(k)(ctx, tx) }
	})
}

// batchThen is batchOf for writes in two steps (DB.GroupedThen).
func batchThen[K comparable](t *testing.T, db *store.DB, keys []K, do func(K) func(context.Context, *sql.Tx) (func() error, error)) map[K]batched {
	t.Helper()
	hold, err := db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var g store.Group
	type result struct {
		k K
		batched
	}
	out := make(chan result, len(keys))
	for _, k := range keys {
		go func() {
			n, err := db.GroupedThen(context.Background(), &g, do(k))
			out <- result{k, batched{n, err}}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for g.Queued() < len(keys) {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued after 10 s, want %d", g.Queued(), len(keys))
		}
		time.Sleep(time.Millisecond)
	}
	_ = hold.Rollback()
	got := make(map[K]batched, len(keys))
	for range keys {
		r := <-out
		got[r.k] = r.batched
	}
	return got
}

type batched struct {
	n   int
	err error
}

// insertEvent appends an event for agent, a write whose result no one
// reads (store.Deferred).
func insertEvent(ctx context.Context, tx *sql.Tx, agent any) error {
	_, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state) VALUES (?, ?, 'a', 'e', 'b')`,
		store.FormatTime(time.Now()), agent)
	return err
}

// On PostgreSQL a write whose result no one reads (an event) is held back
// and sent with the next statement or the COMMIT (store.Deferred): one
// that fails at a batch's commit is found, with savepoints, to be its
// call's alone, and the others commit.
func TestHeldBackFailureIsItsCallsOnPostgres(t *testing.T) {
	srv := pgtest.Shared(t)
	if err := srv.CreateDB("heldback"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := store.Open(ctx, srv.URL("heldback"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	agents := []any{"ann", "bob", nil, "dan"} // nil: agent is NOT NULL
	got := batchOf(t, db, agents, func(agent any) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error { return insertEvent(ctx, tx, agent) }
	})
	for _, a := range agents {
		r := got[a]
		switch {
		case a == nil && (r.err == nil || !strings.Contains(r.err.Error(), "agent")):
			t.Errorf("the failing write: err = %v, want the not-null violation", r.err)
		case a != nil && r.err != nil:
			t.Errorf("%v's write: %v, want committed (the failure was another's)", a, r.err)
		case a != nil && r.n != len(agents):
			t.Errorf("%v's write committed in a batch of %d, want %d", a, r.n, len(agents))
		}
	}
	events := eventAgents(t, db) // the calls queued in any order
	if strings.Join(events, ",") != "ann,bob,dan" {
		t.Errorf("events committed = %v, want ann, bob, dan", events)
	}
}

// A write refused because its agent's lease was lost (store.ErrFenced)
// is its own call's failure: it waits for the lease, and the other agents'
// writes in its batch commit without it, rather than all of them waiting
// with it (a fenced agent retrying could otherwise hold back every batch
// it joined). On both engines: on PostgreSQL the lease check travels with
// the next statement, or the commit, of whichever call comes next.
func TestAFencedWriteFailsAlone(t *testing.T) {
	storetest.Engines(t, "fencedalone", func(t *testing.T, fresh func(t *testing.T) string) {
		db := storetest.OpenTarget(t, fresh(t))
		agents := []string{"ann", "bob", "cal"}
		held := storetest.HoldLeases(t, db, "host1:/srv", agents...)
		db.SetFence("bob", held[1].Epoch+1) // bob's lease is another epoch's now
		got := batchOf(t, db, agents, func(agent string) func(context.Context, *sql.Tx) error {
			return func(ctx context.Context, tx *sql.Tx) error {
				if err := db.FenceTx(ctx, tx, agent); err != nil {
					return err
				}
				return insertEvent(ctx, tx, agent)
			}
		})
		for _, a := range agents {
			r := got[a]
			switch {
			case a == "bob" && !errors.Is(r.err, store.ErrFenced):
				t.Errorf("bob's write: %v, want ErrFenced", r.err)
			case a != "bob" && r.err != nil:
				t.Errorf("%s's write: %v, want committed (bob's lease is bob's)", a, r.err)
			case a != "bob" && r.n != len(agents):
				t.Errorf("%s's write committed in a batch of %d, want %d", a, r.n, len(agents))
			}
		}
	})
}

// GroupedThen: every call of a batch asks (its do) before any reads its
// answer (its then), so on PostgreSQL a batch's questions go to the server
// together, in one round trip; each then reads its own answer. A then
// that fails has the batch applied again with a savepoint each, and the
// others commit without it. On both engines.
func TestGroupedThenAsksTogether(t *testing.T) {
	storetest.Engines(t, "groupedthen", func(t *testing.T, fresh func(t *testing.T) string) {
		target := fresh(t)
		db := storetest.OpenTarget(t, target)
		run := func(agents []string, refuse string) map[string]batched {
			t.Helper()
			before := db.WriteRoundTrips()
			got := batchThen(t, db, agents, func(a string) func(context.Context, *sql.Tx) (func() error, error) {
				return func(ctx context.Context, tx *sql.Tx) (func() error, error) {
					rows, err := tx.QueryContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state)
VALUES (?, ?, 'a', 'e', 'b') RETURNING agent`, store.FormatTime(time.Now()), a)
					if err != nil {
						return nil, err
					}
					return func() error {
						defer rows.Close()
						var got string
						if !rows.Next() {
							return errors.Join(errors.New("no row returned"), rows.Err())
						}
						if err := rows.Scan(&got); err != nil {
							return err
						}
						if got != a {
							return errors.New("read " + got + "'s answer")
						}
						if a == refuse {
							return errors.New(a + " refuses")
						}
						return nil
					}, nil
				}
			})
			if trips := db.WriteRoundTrips() - before; refuse == "" && strings.HasPrefix(target, "postgres") && trips != 2 {
				t.Errorf("a batch of %d took %d write round trips, want 2 (the questions together, then the commit)", len(agents), trips)
			}
			return got
		}
		for a, r := range run([]string{"ann", "bob", "cal", "dan"}, "") {
			if r.err != nil || r.n != 4 {
				t.Errorf("%s: batch %d, %v; want committed in a batch of 4", a, r.n, r.err)
			}
		}
		for a, r := range run([]string{"eve", "fay", "gus"}, "fay") {
			switch {
			case a == "fay" && (r.err == nil || !strings.Contains(r.err.Error(), "fay refuses")):
				t.Errorf("fay's write: %v, want her refusal", r.err)
			case a != "fay" && r.err != nil:
				t.Errorf("%s's write: %v, want committed without fay's", a, r.err)
			}
		}
		if got, want := strings.Join(eventAgents(t, db), ","), "ann,bob,cal,dan,eve,gus"; got != want {
			t.Errorf("events committed: %s, want %s", got, want)
		}
	})
}

// eventAgents is the agent of every event in the store, sorted.
func eventAgents(t *testing.T, db *store.DB) []string {
	t.Helper()
	rows, err := db.ReadSQL().QueryContext(context.Background(), `SELECT agent FROM events`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var agents []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(agents)
	return agents
}
