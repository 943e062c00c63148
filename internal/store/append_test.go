package store

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
)

// On PostgreSQL the journal appends on a connection of its own, under the
// appenders' turn (appendLock) instead of the swarm's writers' lock, and a
// write transaction takes the appenders' turn before its first event.

// openAppendTest opens a fresh database on srv and starts a journal on it.
func openAppendTest(t *testing.T, srv *pgtest.Server, name string) (*DB, *Journal) {
	t.Helper()
	if err := srv.CreateDB(name); err != nil {
		t.Fatal(err)
	}
	db := openTest(t, srv.URL(name), Options{})
	j := db.NewJournal(JournalOptions{FlushInterval: time.Hour})
	j.Start()
	t.Cleanup(func() {
		if err := j.Close(); err != nil {
			t.Errorf("journal close: %v", err)
		}
	})
	return db, j
}

// advisoryLocks counts the advisory locks on key, granted or waited for.
func advisoryLocks(t *testing.T, db *DB, key int64, granted bool) int {
	t.Helper()
	var n int
	err := db.ReadSQL().QueryRowContext(context.Background(), `SELECT COUNT(*) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = ? AND objid = ? AND objsubid = 1 AND granted = ?`,
		key>>32, key&0xffffffff, granted).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// openWrite begins a write transaction and sends its lock: the read makes
// the transaction's BEGIN and lock go to the server. The test's end rolls
// it back unless it was committed.
func openWrite(t *testing.T, db *DB) *Tx {
	t.Helper()
	tx, err := db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	var one int
	if err := tx.QueryRowContext(context.Background(), `SELECT 1`).Scan(&one); err != nil {
		t.Fatal(err)
	}
	return tx
}

func TestJournalAppendsBesideTheWritersLock(t *testing.T) {
	srv := pgtest.Shared(t)
	ctx := context.Background()
	db, j := openAppendTest(t, srv, "append_beside")

	openWrite(t, db)
	if n := advisoryLocks(t, db, writerLock, true); n != 1 {
		t.Fatalf("writers' locks held = %d, want 1 (the open transaction's)", n)
	}
	// The writers' lock is held: the journal's events and agent rows still
	// commit.
	j.Event(EventRecord{At: t0, Agent: "alice", From: "Idle", Event: "Wake", To: "BuildingPrompt", Actor: "runner"})
	j.Agent(AgentRecord{Name: "alice", State: "BuildingPrompt", UpdatedAt: t0})
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := j.Flush(fctx); err != nil {
		t.Fatalf("journal flush while the writers' lock is held: %v", err)
	}
	evs, err := db.Events(ctx, EventQuery{Agent: "alice"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("alice's events = %+v, %v; want the one appended", evs, err)
	}
}

func TestEventsBecomeVisibleInIDOrder(t *testing.T) {
	srv := pgtest.Shared(t)
	ctx := context.Background()
	db, j := openAppendTest(t, srv, "append_order")

	// A writer adds an event and has not committed: its id is drawn.
	tx := openWrite(t, db)
	if _, err := tx.ExecContext(ctx, insertEventSQL, FormatTime(t0), "bob", "Running", "Claim", "Running", "", "runner", "", "", 1); err != nil {
		t.Fatal(err)
	}
	if n := advisoryLocks(t, db, appendLock, true); n != 1 {
		t.Fatalf("appenders' turns held = %d, want 1 (the writer's, taken for its event)", n)
	}
	// The journal's event would get a higher id: it must not commit first,
	// or a follower that read past it would never see the writer's.
	j.Event(EventRecord{At: t0, Agent: "alice", From: "Idle", Event: "Wake", To: "BuildingPrompt", Actor: "runner"})
	flushed := make(chan error, 1)
	go func() { flushed <- j.Flush(ctx) }()
	for deadline := time.Now().Add(20 * time.Second); advisoryLocks(t, db, appendLock, false) == 0; {
		select {
		case err := <-flushed:
			t.Fatalf("the journal committed (%v) while a lower event id was not", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the journal never waited for the appenders' turn")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if last, err := db.LastEventID(ctx); err != nil || last != 0 {
		t.Fatalf("last event id visible = %d, %v; want none before the writer commits", last, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	evs, err := db.Events(ctx, EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Agent != "bob" || evs[1].Agent != "alice" || evs[0].ID >= evs[1].ID {
		t.Fatalf("events = %+v; want bob's, then alice's with a higher id", evs)
	}
}

// TestEventFollowerMissesNothing: writers and journals on two handles (two
// daemons) append events at once, some writers holding their transaction
// open after their event; a follower reading by id, as the dashboards and
// `swarmd events --follow` do, sees every event.
func TestEventFollowerMissesNothing(t *testing.T) {
	srv := pgtest.Shared(t)
	ctx := context.Background()
	a, ja := openAppendTest(t, srv, "append_follow")
	b := openTest(t, srv.URL("append_follow"), Options{})
	jb := b.NewJournal(JournalOptions{FlushInterval: time.Hour})
	jb.Start()
	defer jb.Close()

	const rounds = 40
	errs := make(chan error, 4)
	write := func(db *DB, agent string) {
		for i := range rounds {
			err := db.InTx(ctx, "test", func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, insertEventSQL, FormatTime(t0), agent, "a", "e", "b", "", "runner", "", "", i); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, `SELECT pg_sleep(0.002)`)
				return err
			})
			if err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}
	journal := func(j *Journal, agent string) {
		for i := range rounds {
			j.Event(EventRecord{At: t0, Agent: agent, From: "a", Event: "e", To: "b", Actor: "runner", Seq: uint32(i)})
			if err := j.Flush(ctx); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}
	go write(a, "wa")
	go write(b, "wb")
	go journal(ja, "ja")
	go journal(jb, "jb")

	seen := map[int64]bool{}
	var after int64
	done := 0
	follow := func() {
		evs, err := a.Events(ctx, EventQuery{AfterID: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			seen[e.ID] = true
			after = e.ID
		}
	}
	for done < 4 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
			done++
		default:
			follow()
		}
	}
	follow()
	all, err := a.Events(ctx, EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4*rounds {
		t.Fatalf("%d events committed, want %d", len(all), 4*rounds)
	}
	var missed []int64
	for _, e := range all {
		if !seen[e.ID] {
			missed = append(missed, e.ID)
		}
	}
	if len(missed) > 0 {
		t.Fatalf("the follower missed %d events, ids %v: they became visible after higher ones", len(missed), fmt.Sprint(missed))
	}
}

// TestResetAgentBesideAJournal: a daemon resets an agent (a writer that
// writes the agent's row and an event) while another handle's journal
// writes the same row, over and over. The writer takes the appenders' turn
// before the row, so the two never wait for each other in a cycle: a
// deadlock would fail one of them after the server's deadlock_timeout.
func TestResetAgentBesideAJournal(t *testing.T) {
	srv := pgtest.Shared(t)
	ctx := context.Background()
	a, ja := openAppendTest(t, srv, "append_reset")
	b := openTest(t, srv.URL("append_reset"), Options{})
	ja.Agent(AgentRecord{Name: "alice", State: "Running", UpdatedAt: t0})
	if err := ja.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	jb := b.NewJournal(JournalOptions{FlushInterval: time.Hour})
	jb.Start()
	defer jb.Close()

	const rounds = 300
	errs := make(chan error, 2)
	go func() {
		for range rounds {
			if err := a.ResetAgent(ctx, "alice", t0, "ops"); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	go func() {
		for i := range rounds {
			jb.Agent(AgentRecord{Name: "alice", State: "Running", Seq: uint32(i), UpdatedAt: t0})
			jb.Event(EventRecord{At: t0, Agent: "alice", From: "a", Event: "e", To: "b", Actor: "runner"})
			if err := jb.Flush(ctx); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
