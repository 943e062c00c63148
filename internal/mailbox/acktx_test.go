package mailbox

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestAckTxDeliversTheSessionsClaims is the acknowledgement a settlement
// makes: in the caller's transaction, the mail s1's prompt claimed is
// delivered (acknowledged by s1), and mail that came after its prompt is
// not s1's to acknowledge. A skipped or misdirected ack fails here, at
// once, rather than as mail shown to session after session.
func TestAckTxDeliversTheSessionsClaims(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	send := func(body string) Message {
		t.Helper()
		m, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: body})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := send("one"), send("two")
	if ms, err := db.ConsumeForPrompt(ctx, "bob", "s1"); err != nil || !slices.Equal(ids(ms), []int64{a.ID, b.ID}) {
		t.Fatalf("s1's prompt = %v, %v", ids(ms), err)
	}
	c := send("three") // after s1's prompt
	tx, err := db.Store().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ended := time.Now()
	n, err := db.AckTx(ctx, tx.Tx, "s1", ended)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	all, err := db.Inbox(ctx, "bob", true)
	if err != nil {
		t.Fatal(err)
	}
	var delivered []int64
	for _, m := range all {
		if m.DeliveredAt != nil {
			delivered = append(delivered, m.ID)
			if m.AckedBy != AckSession {
				t.Errorf("message %d acknowledged by %q, want %q", m.ID, m.AckedBy, AckSession)
			}
		}
	}
	if n != 2 || !slices.Equal(delivered, []int64{a.ID, b.ID}) {
		t.Fatalf("AckTx(s1) = %d, delivered %v; want 2, [%d %d] (not %d, sent after s1's prompt)", n, delivered, a.ID, b.ID, c.ID)
	}
	if in, err := db.Inbox(ctx, "bob", false); err != nil || !slices.Equal(ids(in), []int64{c.ID}) {
		t.Fatalf("pending after s1's ack = %v, %v; want [%d]", ids(in), err, c.ID)
	}
}
