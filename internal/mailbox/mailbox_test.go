package mailbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(pgtest.Share())) }

var testAgents = []string{"alice", "bob", "carol"}

// fakeClock returns a clock that advances one second per reading.
func fakeClock() func() time.Time {
	t := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	return func() time.Time { t = t.Add(time.Second); return t }
}

// openTest opens the mailbox of a store at path (a fresh file when "") and
// closes both when the test ends. A clock, if given, is the store's.
func openTest(t testing.TB, path string, opts Options, now ...func() time.Time) *Mailbox {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "swarm.db")
	}
	var sopts store.Options
	if len(now) > 0 {
		sopts.Now = now[0]
	}
	db, err := Open(context.Background(), path, sopts, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

func countRows(t *testing.T, db *Mailbox, where string) int {
	t.Helper()
	var n int
	if err := db.Store().SQL().QueryRow(`SELECT COUNT(*) FROM messages WHERE ` + where).Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func ids(ms []Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func TestSendAndGet(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents}, fakeClock())

	m, err := db.Send(ctx, Draft{From: "alice", To: "bob", Subject: "build", Body: "it is red", Urgent: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.ID == 0 || m.ThreadID != m.ID || m.ReplyTo != 0 {
		t.Fatalf("new thread: id %d thread %d reply_to %d", m.ID, m.ThreadID, m.ReplyTo)
	}
	want := time.Date(2025, 3, 1, 12, 0, 1, 123456000, time.UTC)
	if !m.CreatedAt.Equal(want) {
		t.Fatalf("CreatedAt = %v, want %v (injected clock, microseconds)", m.CreatedAt, want)
	}

	got, err := db.Get(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.From != "alice" || got.To != "bob" || got.Subject != "build" || got.Body != "it is red" ||
		!got.Urgent || got.ThreadID != m.ID || !got.CreatedAt.Equal(want) || got.DeliveredAt != nil {
		t.Fatalf("Get = %+v", got)
	}

	m2, err := db.Send(ctx, Draft{From: "operator", To: "alice", Body: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if m2.ID <= m.ID || m2.ThreadID != m2.ID || m2.Urgent {
		t.Fatalf("second message: %+v", m2)
	}

	_, err = db.Get(ctx, 999)
	if !errors.Is(err, ErrNotFound) || !strings.HasPrefix(err.Error(), "mailbox: get message 999:") {
		t.Fatalf("Get(999) = %v, want ErrNotFound naming the operation", err)
	}
}

func TestReply(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents})

	q, err := db.Send(ctx, Draft{From: "alice", To: "bob", Subject: "review?", Body: "please look at #12"})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := db.Reply(ctx, "bob", q.ID, "LGTM", false)
	if err != nil {
		t.Fatal(err)
	}
	if r1.To != "alice" || r1.From != "bob" || r1.ThreadID != q.ID || r1.ReplyTo != q.ID || r1.Subject != "Re: review?" {
		t.Fatalf("reply = %+v", r1)
	}
	r2, err := db.Reply(ctx, "alice", r1.ID, "thanks", true)
	if err != nil {
		t.Fatal(err)
	}
	if r2.To != "bob" || r2.ThreadID != q.ID || r2.ReplyTo != r1.ID || r2.Subject != "Re: review?" || !r2.Urgent {
		t.Fatalf("reply to reply = %+v (subject must not double)", r2)
	}
	// Following up on one's own message goes to the other party.
	r3, err := db.Reply(ctx, "alice", q.ID, "also #13", false)
	if err != nil {
		t.Fatal(err)
	}
	if r3.To != "bob" {
		t.Fatalf("follow-up to own message went to %q, want bob", r3.To)
	}
	stored, err := db.Get(ctx, r2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.ThreadID != q.ID || stored.ReplyTo != r1.ID {
		t.Fatalf("stored reply thread %d reply_to %d", stored.ThreadID, stored.ReplyTo)
	}

	before := countRows(t, db, "1")
	if _, err := db.Reply(ctx, "bob", 4242, "x", false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("reply to missing = %v, want ErrNotFound", err)
	}
	if _, err := db.Reply(ctx, "bob", q.ID, " \n", false); !errors.Is(err, ErrEmptyBody) {
		t.Fatalf("empty reply = %v, want ErrEmptyBody", err)
	}
	// Nobody else's: carol's answer would go into their thread, and tell
	// her its subject and sender.
	if r, err := db.Reply(ctx, "carol", q.ID, "me too", false); !errors.Is(err, ErrNotFound) || strings.Contains(fmt.Sprint(r, err), "review?") {
		t.Fatalf("carol's reply to alice's mail to bob = %+v, %v; want refused, telling nothing of it", r, err)
	}
	if n := countRows(t, db, "1"); n != before {
		t.Fatalf("failed replies stored rows: %d -> %d", before, n)
	}
	// The operator, who reads all mail, answers any.
	if r, err := db.Reply(ctx, Operator, q.ID, "noted", false); err != nil || r.To != "alice" {
		t.Fatalf("the operator's reply to alice's mail to bob = %+v, %v; want sent to alice", r, err)
	}
}

func TestReplySubject(t *testing.T) {
	for in, want := range map[string]string{"": "", "x": "Re: x", "Re: x": "Re: x", "RE: x": "RE: x", "re:x": "re:x", "Rex": "Re: Rex"} {
		if got := replySubject(in); got != want {
			t.Errorf("replySubject(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBroadcast(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents})

	ms, err := db.Broadcast(ctx, Draft{From: "alice", Subject: "freeze", Body: "main is frozen", Urgent: true})
	if err != nil {
		t.Fatal(err)
	}
	var to []string
	for _, m := range ms {
		to = append(to, m.To)
		if m.ThreadID != ms[0].ID || m.From != "alice" || !m.Urgent || m.Body != "main is frozen" {
			t.Fatalf("copy %+v", m)
		}
	}
	if !slices.Equal(to, []string{"bob", "carol"}) {
		t.Fatalf("broadcast from alice went to %v, want [bob carol]", to)
	}
	if n := countRows(t, db, "1"); n != 2 {
		t.Fatalf("%d rows, want one per other agent", n)
	}

	ms, err = db.Broadcast(ctx, Draft{From: Operator, Body: "hello all"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("operator broadcast reached %d agents, want 3", len(ms))
	}

	if _, err := db.Broadcast(ctx, Draft{From: "alice", To: "bob", Body: "x"}); !errors.Is(err, ErrUnknownRecipient) {
		t.Fatalf("broadcast with a recipient = %v", err)
	}
	solo := openTest(t, "", Options{Agents: []string{"alice"}})
	if _, err := solo.Broadcast(ctx, Draft{From: "alice", Body: "x"}); !errors.Is(err, ErrNoRecipients) {
		t.Fatalf("broadcast with nobody to reach = %v, want ErrNoRecipients", err)
	}
	unknown := openTest(t, "", Options{})
	if _, err := unknown.Broadcast(ctx, Draft{From: "alice", Body: "x"}); !errors.Is(err, ErrNoRecipients) {
		t.Fatalf("broadcast without an agent list = %v, want ErrNoRecipients", err)
	}
}

func TestInboxMarksNothing(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents})
	a, _ := db.Send(ctx, Draft{From: "alice", To: "bob", Body: "one"})
	b, _ := db.Send(ctx, Draft{From: "carol", To: "bob", Body: "two"})
	if _, err := db.Send(ctx, Draft{From: "bob", To: "alice", Body: "not bob's"}); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		in, err := db.Inbox(ctx, "bob", false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(in), []int64{a.ID, b.ID}) {
			t.Fatalf("inbox = %v, want [%d %d]", ids(in), a.ID, b.ID)
		}
	}
	if n := countRows(t, db, "delivered_at IS NULL"); n != 3 {
		t.Fatalf("%d pending after reading the inbox, want 3", n)
	}

	if _, err := db.ConsumeForPrompt(ctx, "bob", "s1"); err != nil {
		t.Fatal(err)
	}
	// Claimed by a prompt is not delivered: pending until s1 completes.
	in, err := db.Inbox(ctx, "bob", false)
	if err != nil || !slices.Equal(ids(in), []int64{a.ID, b.ID}) {
		t.Fatalf("pending inbox after consume = %v, %v", ids(in), err)
	}
	now := time.Now()
	if n, err := db.Ack(ctx, store.SessionRecord{SessionID: "s1", Agent: "bob", Seq: 1, Started: now, Ended: &now}); err != nil || n != 2 {
		t.Fatalf("Ack = %d, %v; want 2", n, err)
	}
	if in, err = db.Inbox(ctx, "bob", false); err != nil || len(in) != 0 {
		t.Fatalf("pending inbox after ack = %v, %v", ids(in), err)
	}
	in, err = db.Inbox(ctx, "bob", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 2 || in[0].DeliveredAt == nil || in[0].ClaimedSession != "s1" || in[0].AckedBy != AckSession {
		t.Fatalf("inbox --all = %+v", in)
	}
}

func TestValidation(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents, MaxBodyBytes: 65536})
	loose := openTest(t, "", Options{}) // no agent list

	cases := []struct {
		name     string
		db       *Mailbox
		d        Draft
		sentinel error
		msg      string
	}{
		{"empty body", db, Draft{From: "alice", To: "bob"}, ErrEmptyBody, "mailbox: send: message body is empty"},
		{"blank body", db, Draft{From: "alice", To: "bob", Body: " \n\t"}, ErrEmptyBody, ""},
		{"too large", db, Draft{From: "alice", To: "bob", Body: strings.Repeat("x", 70000)}, ErrTooLarge,
			"mailbox: send: message body is 70000 bytes, over the 65536-byte limit (mailbox.max_body)"},
		{"subject too large", db, Draft{From: "alice", To: "bob", Subject: strings.Repeat("s", 2000), Body: "x"}, ErrTooLarge, ""},
		{"unknown recipient", db, Draft{From: "alice", To: "dave", Body: "x"}, ErrUnknownRecipient,
			`mailbox: send: unknown recipient "dave" (known: alice, bob, carol, operator)`},
		{"no recipient", db, Draft{From: "alice", Body: "x"}, ErrUnknownRecipient, ""},
		{"unknown sender", db, Draft{From: "zed", To: "alice", Body: "x"}, ErrUnknownSender,
			`mailbox: send: unknown sender "zed" (known: alice, bob, carol, operator)`},
		{"self", db, Draft{From: "alice", To: "alice", Body: "x"}, ErrSelfSend, "mailbox: send: alice cannot send a message to itself"},
		{"operator self", db, Draft{From: Operator, To: Operator, Body: "x"}, ErrSelfSend, ""},
		{"empty sender", db, Draft{To: "bob", Body: "x"}, store.ErrInvalidName, ""},
		{"invalid sender", db, Draft{From: "Bob; DROP", To: "bob", Body: "x"}, store.ErrInvalidName, ""},
		{"invalid recipient, no agent list", loose, Draft{From: "alice", To: "../etc", Body: "x"}, ErrUnknownRecipient, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.db.Send(ctx, c.d)
			if !errors.Is(err, c.sentinel) {
				t.Fatalf("err = %v, want %v", err, c.sentinel)
			}
			var ve *store.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err %v is not a *ValidationError", err)
			}
			if c.msg != "" && err.Error() != c.msg {
				t.Fatalf("message\n got %q\nwant %q", err.Error(), c.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("message is not one line: %q", err.Error())
			}
			if n := countRows(t, c.db, "1"); n != 0 {
				t.Fatalf("refused message stored %d rows", n)
			}
		})
	}

	// The limit is inclusive, and any well-formed name passes without an agent list.
	if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: strings.Repeat("x", 65536)}); err != nil {
		t.Fatalf("body at the limit: %v", err)
	}
	if _, err := loose.Send(ctx, Draft{From: "alice", To: "zed", Body: "x"}); err != nil {
		t.Fatalf("no agent list: %v", err)
	}
	if _, err := db.Send(ctx, Draft{From: "alice", To: Operator, Body: "x"}); err != nil {
		t.Fatalf("operator is always a recipient: %v", err)
	}
}

func TestConsumeUrgentFirst(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents}, fakeClock())
	send := func(to string, urgent bool) Message {
		m, err := db.Send(ctx, Draft{From: "carol", To: to, Body: "b", Urgent: urgent})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	n1, u2, n3, u4 := send("bob", false), send("bob", true), send("bob", false), send("bob", true)
	other := send("alice", true)

	got, err := db.ConsumeForPrompt(ctx, "bob", "sess-1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{u2.ID, u4.ID, n1.ID, n3.ID}; !slices.Equal(ids(got), want) {
		t.Fatalf("consumed %v, want urgent first then by id %v", ids(got), want)
	}
	for _, m := range got {
		if m.DeliveredAt != nil || m.ClaimedSession != "sess-1" || m.To != "bob" {
			t.Fatalf("consumed message %+v", m)
		}
	}
	// sess-1 did not complete: its mail is shown again, with the note.
	if n, err := db.Unack(ctx, "sess-1", "that session was interrupted by urgent mail"); err != nil || n != 4 {
		t.Fatalf("Unack = %d, %v; want 4", n, err)
	}
	again, err := db.ConsumeForPrompt(ctx, "bob", "sess-2")
	if err != nil || !slices.Equal(ids(again), ids(got)) {
		t.Fatalf("second consume = %v, %v; want %v again", ids(again), err, ids(got))
	}
	if again[0].ShownNote != "that session was interrupted by urgent mail" || again[0].ClaimedSession != "sess-2" {
		t.Fatalf("shown again without its note: %+v", again[0])
	}
	// A late ack of the first session acknowledges nothing it no longer holds.
	now := time.Now()
	if n, err := db.Ack(ctx, store.SessionRecord{SessionID: "sess-1", Agent: "bob", Seq: 1, Started: now, Ended: &now}); err != nil || n != 0 {
		t.Fatalf("Ack(sess-1) = %d, %v; want 0", n, err)
	}
	if n, err := db.Ack(ctx, store.SessionRecord{SessionID: "sess-2", Agent: "bob", Seq: 2, Started: now, Ended: &now}); err != nil || n != 4 {
		t.Fatalf("Ack(sess-2) = %d, %v; want 4", n, err)
	}
	stored, _ := db.Get(ctx, n1.ID)
	if stored.DeliveredAt == nil || stored.ClaimedSession != "sess-2" || stored.AckedBy != AckSession {
		t.Fatalf("stored after ack: %+v", stored)
	}
	if again, err := db.ConsumeForPrompt(ctx, "bob", "sess-3"); err != nil || len(again) != 0 {
		t.Fatalf("consume after ack = %v, %v; want nothing", ids(again), err)
	}
	if o, _ := db.Get(ctx, other.ID); o.DeliveredAt != nil {
		t.Fatal("consuming bob's mail delivered alice's")
	}
	if _, err := db.ConsumeForPrompt(ctx, "bob", ""); !errors.Is(err, store.ErrInvalidName) {
		t.Fatalf("consume without a session = %v", err)
	}
}

func TestUnconsume(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents})
	for i := range 3 {
		if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := db.ConsumeForPrompt(ctx, "bob", "never-started")
	if err != nil || len(first) != 3 {
		t.Fatalf("consume = %d, %v", len(first), err)
	}
	n, err := db.Unconsume(ctx, "never-started")
	if err != nil || n != 3 {
		t.Fatalf("Unconsume = %d, %v; want 3", n, err)
	}
	in, _ := db.Inbox(ctx, "bob", false)
	if !slices.Equal(ids(in), ids(first)) {
		t.Fatalf("pending after unconsume %v, want %v", ids(in), ids(first))
	}
	if in[0].ClaimedSession != "" || in[0].DeliveredAt != nil {
		t.Fatalf("unconsumed message still claimed: %+v", in[0])
	}
	second, err := db.ConsumeForPrompt(ctx, "bob", "started")
	if err != nil || !slices.Equal(ids(second), ids(first)) {
		t.Fatalf("re-consume = %v, %v", ids(second), err)
	}
	// Unconsuming the dead session again must not touch the started one's mail.
	if n, err := db.Unconsume(ctx, "never-started"); err != nil || n != 0 {
		t.Fatalf("second Unconsume = %d, %v", n, err)
	}
	now := time.Now()
	if _, err := db.Ack(ctx, store.SessionRecord{SessionID: "started", Agent: "bob", Seq: 1, Started: now, Ended: &now}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, "claimed_session = 'started' AND delivered_at IS NOT NULL"); n != 3 {
		t.Fatalf("%d messages delivered to the started session, want 3", n)
	}
}

func TestPendingUrgentAndCounts(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents})
	send := func(to string, urgent bool) Message {
		m, err := db.Send(ctx, Draft{From: Operator, To: to, Body: "b", Urgent: urgent})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	u1 := send("alice", true)
	send("alice", false)
	u3 := send("bob", true)

	got, err := db.PendingUrgent(ctx, 0)
	if err != nil || !slices.Equal(ids(got), []int64{u1.ID, u3.ID}) {
		t.Fatalf("PendingUrgent(0) = %v, %v", ids(got), err)
	}
	if got, _ := db.PendingUrgent(ctx, u1.ID); !slices.Equal(ids(got), []int64{u3.ID}) {
		t.Fatalf("PendingUrgent(after %d) = %v", u1.ID, ids(got))
	}
	counts, err := db.PendingCounts(ctx)
	if err != nil || counts["alice"] != 2 || counts["bob"] != 1 || len(counts) != 2 {
		t.Fatalf("PendingCounts = %v, %v", counts, err)
	}

	if _, err := db.ConsumeForPrompt(ctx, "bob", "s"); err != nil {
		t.Fatal(err)
	}
	// Claimed urgent mail is in a prompt already: nothing to interrupt for,
	// but it is pending until that session completes.
	if got, _ := db.PendingUrgent(ctx, 0); !slices.Equal(ids(got), []int64{u1.ID}) {
		t.Fatalf("claimed urgent mail still routed: %v", ids(got))
	}
	if counts, _ := db.PendingCounts(ctx); counts["bob"] != 1 || counts["alice"] != 2 {
		t.Fatalf("PendingCounts after consume = %v", counts)
	}
	now := time.Now()
	if _, err := db.Ack(ctx, store.SessionRecord{SessionID: "s", Agent: "bob", Seq: 1, Started: now, Ended: &now}); err != nil {
		t.Fatal(err)
	}
	if counts, _ := db.PendingCounts(ctx); counts["bob"] != 0 || counts["alice"] != 2 {
		t.Fatalf("PendingCounts after ack = %v", counts)
	}
}

func TestDataVersion(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	watcher := openTest(t, path, Options{})
	writer := openTest(t, path, Options{})

	v1, err := watcher.DataVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := watcher.DataVersion(ctx); v != v1 {
		t.Fatalf("data_version moved without a commit: %d -> %d", v1, v)
	}
	if _, err := writer.Send(ctx, Draft{From: "alice", To: "bob", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	v2, err := watcher.DataVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v2 == v1 {
		t.Fatal("data_version did not change after another handle committed")
	}
	// The watcher's own writes go through another connection, so they count too.
	if _, err := watcher.Send(ctx, Draft{From: "alice", To: "bob", Body: "y"}); err != nil {
		t.Fatal(err)
	}
	if v3, _ := watcher.DataVersion(ctx); v3 == v2 {
		t.Fatal("data_version did not change after the handle's own commit")
	}
}

func TestStorageErrors(t *testing.T) {
	ctx := context.Background()

	t.Run("disk full", func(t *testing.T) {
		db := openTest(t, "", Options{Agents: testAgents})
		// max_page_count is per connection; SQL() is the single write connection.
		// Capping it at the current size is a full disk as far as SQLite can tell.
		if _, err := db.Store().SQL().Exec(`PRAGMA max_page_count = 1`); err != nil {
			t.Fatal(err)
		}
		big := strings.Repeat("x", 60000)
		_, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: big})
		if !errors.Is(err, store.ErrDiskFull) || !strings.HasPrefix(err.Error(), "mailbox: send: ") || !strings.Contains(err.Error(), db.Store().Path()) {
			t.Fatalf("send on a full disk = %v", err)
		}
		// All or nothing: a broadcast that runs out of space half-way stores nothing.
		if _, err := db.Store().SQL().Exec(`PRAGMA max_page_count = 2147483646`); err != nil {
			t.Fatal(err)
		}
		var pages int
		db.Store().SQL().QueryRow(`PRAGMA page_count`).Scan(&pages)
		// Room for about one copy of a ~45 KB body (12 pages of 4 KiB), not two.
		if _, err := db.Store().SQL().Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+14)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Broadcast(ctx, Draft{From: "alice", Body: strings.Repeat("y", 45000)}); !errors.Is(err, store.ErrDiskFull) {
			t.Fatalf("broadcast on a nearly full disk = %v", err)
		}
		if n := countRows(t, db, "1"); n != 0 {
			t.Fatalf("failed broadcast stored %d rows", n)
		}
	})

	t.Run("read-only", func(t *testing.T) {
		// Tests may run as root, which ignores file modes; query_only gives
		// the same SQLITE_READONLY.
		db := openTest(t, "", Options{Agents: testAgents})
		if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: "for the consume below"}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Store().SQL().Exec(`PRAGMA query_only = 1`); err != nil {
			t.Fatal(err)
		}
		_, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: "x"})
		if !errors.Is(err, store.ErrReadOnly) || !strings.HasPrefix(err.Error(), "mailbox: send: ") {
			t.Fatalf("send to a read-only database = %v", err)
		}
		if _, err := db.ConsumeForPrompt(ctx, "bob", "s"); !errors.Is(err, store.ErrReadOnly) {
			t.Fatalf("consume on a read-only database = %v", err)
		}
	})
}

func TestOpenPaths(t *testing.T) {
	ctx := context.Background()

	t.Run("awkward path", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a b?c#d%20")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "swarm.db")
		db := openTest(t, path, Options{})
		if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: "x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("database not at the path given: %v", err)
		}
	})

	t.Run("no create", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "swarm.db")
		_, err := Open(ctx, path, store.Options{NoCreate: true}, Options{})
		if !errors.Is(err, store.ErrNoDatabase) || !strings.Contains(err.Error(), path) {
			t.Fatalf("Open(NoCreate) of a missing file = %v", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("NoCreate created the file: %v", err)
		}
		openTest(t, path, Options{}).Close()
		db, err := Open(ctx, path, store.Options{NoCreate: true}, Options{})
		if err != nil {
			t.Fatalf("Open(NoCreate) of an existing file = %v", err)
		}
		db.Close()
	})

	t.Run("invalid agent", func(t *testing.T) {
		_, err := Open(ctx, filepath.Join(t.TempDir(), "swarm.db"), store.Options{}, Options{Agents: []string{"alice", "Bob"}})
		if !errors.Is(err, store.ErrInvalidName) {
			t.Fatalf("Open with agent Bob = %v", err)
		}
	})
}

// TestQueryPlans guards the partial indexes: a query that stops matching its
// index's WHERE silently becomes a table scan.
func TestQueryPlans(t *testing.T) {
	db := openTest(t, "", Options{})
	for q, index := range map[string]string{
		`SELECT id FROM messages WHERE recipient = 'a' AND delivered_at IS NULL ORDER BY id`:               "messages_pending",
		`UPDATE messages SET delivered_at = 'x' WHERE recipient = 'a' AND delivered_at IS NULL`:            "messages_pending",
		`SELECT id FROM messages WHERE delivered_at IS NULL AND urgency = 'urgent' AND id > 5 ORDER BY id`: "messages_pending_urgent",
		`SELECT recipient, COUNT(*) FROM messages WHERE delivered_at IS NULL GROUP BY recipient`:           "messages_pending",
		`UPDATE messages SET delivered_at = NULL, claimed_session = NULL WHERE claimed_session = 's'`:      "messages_claimed",
		// A send's look for an earlier attempt, and for its sender's last
		// urgent mail: by sender, recipient and time, not a scan of all mail.
		insertOnceSQL:  "messages_sent",
		sentBeforeSQL:  "messages_sent",
		interruptedSQL: "messages_sent",
		// An agent's whole inbox, and the start's release of claims.
		inboxAllSQL:         "messages_delivered",
		releaseUnstartedSQL: "messages_claimed_unacked",
	} {
		plan := storetest.Plan(t, db.Store(), q)
		if !strings.Contains(strings.Join(plan, "; "), index) {
			t.Errorf("%s\nplan %q does not use %s", q, plan, index)
		}
	}
}

func TestNewSince(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: []string{"alice", "bob"}})
	n, u, max, err := db.NewSince(ctx, 0)
	if err != nil || n != 0 || u != 0 || max != 0 {
		t.Fatalf("empty: %d %d %d %v", n, u, max, err)
	}
	for _, urgent := range []bool{false, true, true} {
		if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: "x", Urgent: urgent}); err != nil {
			t.Fatal(err)
		}
	}
	n, u, max, err = db.NewSince(ctx, 1)
	if err != nil || n != 0 || u != 2 || max != 3 {
		t.Fatalf("after 1: %d %d %d %v", n, u, max, err)
	}
	if n, u, max, _ = db.NewSince(ctx, 3); n != 0 || u != 0 || max != 3 {
		t.Fatalf("after 3: %d %d %d", n, u, max)
	}
}

func TestReleaseUnstartedClaims(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents})
	j := startJournal(t, db, store.JournalOptions{FlushInterval: never})
	for _, to := range []string{"alice", "alice", "bob"} {
		if _, err := db.Send(ctx, Draft{From: "carol", To: to, Body: "hi " + to}); err != nil {
			t.Fatal(err)
		}
	}
	// alice's session started (and was recorded); bob's never did.
	if ms, err := db.ConsumeForPrompt(ctx, "alice", "alice-1-x"); err != nil || len(ms) != 2 {
		t.Fatalf("consume alice = %d, %v", len(ms), err)
	}
	j.SessionStarted(store.SessionRecord{SessionID: "alice-1-x", Agent: "alice", Seq: 1, Started: t0})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if ms, err := db.ConsumeForPrompt(ctx, "bob", "bob-1-y"); err != nil || len(ms) != 1 {
		t.Fatalf("consume bob = %d, %v", len(ms), err)
	}

	n, err := db.ReleaseUnstartedClaims(ctx, nil)
	if err != nil || n != 1 {
		t.Fatalf("ReleaseUnstartedClaims = %d, %v; want 1 (bob's)", n, err)
	}
	bob, err := db.Inbox(ctx, "bob", false)
	if err != nil || len(bob) != 1 || bob[0].DeliveredAt != nil || bob[0].ClaimedSession != "" {
		t.Fatalf("bob's inbox = %+v, %v; want the message pending again", bob, err)
	}
	alice, err := db.Inbox(ctx, "alice", true)
	if err != nil || len(alice) != 2 {
		t.Fatalf("alice's mail = %+v, %v", alice, err)
	}
	for _, m := range alice {
		if m.ClaimedSession != "alice-1-x" {
			t.Fatalf("alice's message %d released: %+v", m.ID, m)
		}
	}
	if n, err := db.ReleaseUnstartedClaims(ctx, nil); err != nil || n != 0 {
		t.Fatalf("second call = %d, %v; want 0", n, err)
	}
}

// never is a journal flush interval no test waits out: tests flush.
const never = time.Hour

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

// startJournal starts a journal on db's store and closes it when the test
// ends.
func startJournal(t testing.TB, db *Mailbox, opts store.JournalOptions) *store.Journal {
	t.Helper()
	j := db.Store().NewJournal(opts)
	j.Start()
	t.Cleanup(func() { j.Close() })
	return j
}

// A broadcast sent again (Draft.At: the CLI's retry after an attempt whose
// answer was lost) is stored once, even when a recipient has read its copy
// in between: that copy was sent, and another would be the same mail twice.
func TestBroadcastOnceAfterACopyWasRead(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{Agents: testAgents})
	d := Draft{From: "alice", Subject: "freeze", Body: "main is frozen", At: time.Now()}
	first, err := db.Broadcast(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Read(ctx, "bob", first[0].ID); err != nil {
		t.Fatal(err)
	}
	again, err := db.Broadcast(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(first) || again[0].ID != first[0].ID || again[1].ID != first[1].ID {
		t.Fatalf("the same broadcast again = %+v, want the first's copies %+v", again, first)
	}
	if n := countRows(t, db, "1"); n != 2 {
		t.Fatalf("%d rows, want the first broadcast's 2", n)
	}
}
