package settle_test

import (
	"context"
	"testing"

	"github.com/swarmd/swarmd/internal/mailbox"
)

// TestCompletedSessionAcknowledgesItsMail: settling a session that
// completed delivers the mail its prompt carried, in the settlement
// itself, and the next prompt carries none of it. This is the quick guard
// of the acknowledgement: without it the mail is shown to session after
// session, which the slower tests only see after a held lock or a restart.
func TestCompletedSessionAcknowledgesItsMail(t *testing.T) {
	e := sqliteEnv(t)
	ctx := context.Background()
	for _, body := range []string{"one", "two"} {
		if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	s1 := e.begin(t, 1)
	if s1.mail != 2 {
		t.Fatalf("session 1's prompt carried %d messages, want 2", s1.mail)
	}
	res, err := e.s.Apply(ctx, e.s.RecordOf(s1.ended("all read")))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acked != 2 {
		t.Errorf("Apply acknowledged %d messages, want 2", res.Acked)
	}
	all, err := e.mail.Inbox(ctx, "alice", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.DeliveredAt == nil || m.ClaimedSession != s1.id {
			t.Errorf("message %d: delivered %v, claimed by %q; want delivered, by %s", m.ID, m.DeliveredAt, m.ClaimedSession, s1.id)
		}
	}
	if s2 := e.begin(t, 2); s2.mail != 0 {
		t.Errorf("session 2's prompt carried %d messages again, want none", s2.mail)
	}
}
