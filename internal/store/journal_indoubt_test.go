package store

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/swarmd/swarmd/internal/pgtest"
)

// cutProxy is a proxy in front of a new database of srv, closed at t's end.
func cutProxy(t *testing.T, srv *pgtest.Server, name string) *pgtest.Proxy {
	t.Helper()
	if err := srv.CreateDB(name); err != nil {
		t.Fatal(err)
	}
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestJournalCommitAnswerLost: the journal's connection dies after the
// server committed a batch, before the journal heard so. The batch is in
// the database once: the journal's retry must not write it again.
func TestJournalCommitAnswerLost(t *testing.T) {
	srv := pgtest.Shared(t)
	p := cutProxy(t, srv, "journalcut")
	ctx := context.Background()
	db := openTest(t, p.URL("journalcut"), Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: time.Millisecond})
	j.Event(ev("alice", 1, "X"))
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p.CutNextCommit()
	for i := range uint32(3) {
		j.Event(ev("alice", 2+i, "X"))
	}
	// Flushed by the writer, which retries the failed batch on its own.
	waitFor(t, "the cut", func() bool { return p.Cuts() == 1 })
	waitFor(t, "the journal to write everything", func() bool {
		return j.Backlog() == 0 && j.Flush(ctx) == nil
	})
	if n := countTable(t, db, "events"); n != 4 {
		t.Fatalf("%d events in the database, want 4 (each once)", n)
	}
}

// TestJournalLostAttemptStillRunning: the journal's connection fails while
// its batch waits on the server for the appenders' turn. The server's
// process goes on with the batch once it has the turn; so does the
// journal's retry, on a new connection. One of them commits it, once.
func TestJournalLostAttemptStillRunning(t *testing.T) {
	srv := pgtest.Shared(t)
	p := cutProxy(t, srv, "journallost")
	ctx := context.Background()
	db := openTest(t, p.URL("journallost"), Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: time.Millisecond})
	j.Event(ev("alice", 1, "X"))
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The appenders' turn, held by another client (on the server's socket).
	holder, err := sql.Open("pgx", srv.URL("journallost"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	turn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Close()
	if _, err := turn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, appendLock); err != nil {
		t.Fatal(err)
	}
	waiting := func(n int) func() bool {
		return func() bool {
			var got int
			err := holder.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity
				WHERE datname = 'journallost' AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&got)
			return err == nil && got == n
		}
	}
	for i := range uint32(3) {
		j.Event(ev("alice", 2+i, "X"))
	}
	waitFor(t, "the batch to wait for the turn", waiting(1))
	// A network that fails: pgx's cancel of the lost statement is lost
	// too, and the server's process waits on.
	p.SetDown(true)
	p.CutAll()
	waitFor(t, "pgx to try to cancel the lost statement", func() bool { return p.Cancels() == 1 })
	p.SetDown(false)
	waitFor(t, "the retry to wait for the turn too", waiting(2))
	if _, err := turn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, appendLock); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the journal to write everything", func() bool {
		return j.Backlog() == 0 && j.Flush(ctx) == nil && waiting(0)()
	})
	if n := countTable(t, db, "events"); n != 4 {
		t.Fatalf("%d events in the database, want 4 (each once)", n)
	}
}
