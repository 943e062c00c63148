package router

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/mailbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type call struct {
	agent string
	id    int64
}

type recorder struct {
	mu    sync.Mutex
	calls []call
	seen  chan struct{}
}

func (r *recorder) Interrupt(agent string, id int64, _ time.Time) error {
	if agent == "operator" {
		return fmt.Errorf("unknown agent %q", agent)
	}
	r.mu.Lock()
	r.calls = append(r.calls, call{agent, id})
	r.mu.Unlock()
	select {
	case r.seen <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func openDB(t *testing.T, path string) *mailbox.DB {
	t.Helper()
	db, err := mailbox.Open(context.Background(), path, mailbox.Options{Agents: []string{"alice", "bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestPollRoutesEachUrgentMessageOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	daemonDB := openDB(t, path)
	sender := openDB(t, path) // another process's connection
	rec := &recorder{seen: make(chan struct{}, 1)}
	r := New(daemonDB, rec, Options{})

	if err := r.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	send := func(from, to string, urgent bool) int64 {
		m, err := sender.Send(ctx, mailbox.Draft{From: from, To: to, Body: "hi", Urgent: urgent})
		if err != nil {
			t.Fatal(err)
		}
		return m.ID
	}
	u1 := send("alice", "bob", true)
	send("alice", "bob", false) // normal mail never interrupts
	u2 := send("bob", "carol", true)
	send("alice", "operator", true) // no runner: waits in the mailbox
	for i := 0; i < 3; i++ {        // repeated polls must not resend
		if err := r.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := rec.snapshot()
	want := []call{{"bob", u1}, {"carol", u2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("interrupts = %v, want %v", got, want)
	}

	// Urgent mail consumed by a prompt before the router saw it needs no interrupt.
	u3 := send("carol", "alice", true)
	if _, err := sender.ConsumeForPrompt(ctx, "alice", "alice-1-x"); err != nil {
		t.Fatal(err)
	}
	u4 := send("carol", "alice", true)
	if err := r.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	got = rec.snapshot()
	if len(got) != 3 || got[2] != (call{"alice", u4}) {
		t.Fatalf("after consume: interrupts = %v (u3=%d must be skipped, u4=%d sent)", got, u3, u4)
	}
}

func TestStartStopRoutesWithinMilliseconds(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	daemonDB := openDB(t, path)
	sender := openDB(t, path)
	rec := &recorder{seen: make(chan struct{}, 1)}
	// A one-hour poll: only the WAL watch can deliver in time.
	r := New(daemonDB, rec, Options{Interval: time.Hour, DBPath: path})
	r.Start(ctx)
	r.Start(ctx) // idempotent
	defer r.Stop()

	start := time.Now()
	if _, err := sender.Send(ctx, mailbox.Draft{From: "alice", To: "bob", Body: "stop", Urgent: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rec.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("urgent mail not routed")
	}
	t.Logf("send → interrupt in %v", time.Since(start))
	r.Stop()
	r.Stop()
}
