package settle_test

import (
	"context"
	"testing"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// A session's result is its own text, read from its output, where a NUL is
// one JSON escape away. PostgreSQL's text cannot hold one: the settlement
// failed for good there (SQLSTATE 22021), the session never settled, its
// mail shown again as new, its outbox record failing every restart's
// recovery. It is settled on both stores, its DONE applied, its mail
// acknowledged once.
func TestResultWithANULIsSettled(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, pg bool) {
		ctx := context.Background()
		tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
			t.Fatal(err)
		}
		s := e.begin(t, 1)
		if _, err := e.s.Settle(ctx, s.ended("read a\x00b\nDONE"), nil); err != nil {
			t.Fatalf("Settle of a result holding a NUL: %v", err)
		}
		if got := e.task(t, tk.ID); got.StateName != "CLOSED" {
			t.Fatalf("task %s, want CLOSED (DONE, no reviewer)", got.StateName)
		}
		if open := unsettledIDs(t, e); len(open) != 0 {
			t.Fatalf("unsettled %v", open)
		}
		if pending, err := e.mail.Inbox(ctx, "alice", false); err != nil || len(pending) != 0 {
			t.Fatalf("pending mail %+v, %v; want it acknowledged", pending, err)
		}
	})
}
