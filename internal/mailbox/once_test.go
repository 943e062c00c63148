package mailbox

import (
	"context"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store/storetest"
)

// A draft sent again (Draft.At: the CLI's retry after an attempt whose
// answer was lost) is stored once, and it takes the senders' turn only:
// while another daemon's write transaction holds the swarm's writers'
// lock, the send still goes through, as urgent mail must.
func TestSendOnceBesideTheWritersLock(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "sendonce")
	ctx := context.Background()
	db := storetest.OpenTarget(t, srv.URL(dbName))
	mb, err := New(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	writer := storetest.OpenTarget(t, srv.URL(dbName))
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// Sent now, with the lock: the writers' lock is held from here.
	if _, err := tx.ExecContext(ctx, `UPDATE settings SET value = value WHERE key = 'nothing'`); err != nil {
		t.Fatal(err)
	}

	d := Draft{From: "alice", To: "bob", Subject: "s", Body: "b", Urgent: true, At: time.Now()}
	// Under the server's idle_in_transaction_session_timeout (5 s), which
	// would end the writer's transaction and let a waiting send through.
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	first, err := mb.Send(sctx, d)
	if err != nil {
		t.Fatalf("send while the writers' lock is held: %v", err)
	}
	again, err := mb.Send(sctx, d)
	if err != nil {
		t.Fatalf("the same draft again: %v", err)
	}
	if again.ID != first.ID || !again.Urgent {
		t.Fatalf("the same draft again = id %d urgent %v, want the first's id %d, urgent", again.ID, again.Urgent, first.ID)
	}
	// Another send of the same text is another message.
	d.At = d.At.Add(time.Millisecond)
	if other, err := mb.Send(sctx, d); err != nil || other.ID == first.ID {
		t.Fatalf("a later draft = id %d, %v; want a message of its own", other.ID, err)
	}
	var n int
	if err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM messages`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("messages = %d, %v; want 2", n, err)
	}
}
