package mailbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// An agent's urgent mail interrupts one recipient at most once every
// UrgentEvery: more in that time is stored as normal mail (read at the
// recipient's next session), and says so. The bound is per sender and
// recipient, the operator's urgent mail has none, and the bound the daemon
// recorded holds for a mailbox that names none (a session's command).
func TestAnAgentsUrgentMailInterruptsOnceAWhile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	clock := fakeClock() // a second a reading
	mb := openTest(t, path, Options{Agents: testAgents, UrgentEvery: time.Minute}, clock)
	if err := mb.RecordLimits(ctx); err != nil {
		t.Fatal(err)
	}
	send := func(mb *Mailbox, from, to string) Message {
		t.Helper()
		m, err := mb.Send(ctx, Draft{From: from, To: to, Body: "stop", Urgent: true})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := send(mb, "alice", "bob"); !m.Urgent || m.Calmed {
		t.Fatalf("alice's first urgent mail to bob: urgent %v, calmed %v", m.Urgent, m.Calmed)
	}
	if m := send(mb, "alice", "bob"); m.Urgent || !m.Calmed {
		t.Fatalf("alice's second, seconds later: urgent %v, calmed %v; want normal mail", m.Urgent, m.Calmed)
	}
	if m := send(mb, "carol", "bob"); !m.Urgent {
		t.Error("carol's urgent mail to bob was calmed by alice's")
	}
	if m := send(mb, "alice", "carol"); !m.Urgent {
		t.Error("alice's urgent mail to carol was calmed by hers to bob")
	}
	for range 3 {
		if m := send(mb, Operator, "bob"); !m.Urgent {
			t.Error("the operator's urgent mail was calmed")
		}
	}
	if got, err := mb.PendingUrgent(ctx, 0); err != nil || len(got) != 6 {
		t.Errorf("urgent mail pending: %d, %v; want 6 (not alice's second)", len(got), err)
	}

	// A session's command opens the mailbox with no bound of its own: the
	// recorded one holds.
	session := openTest(t, path, Options{Agents: testAgents}, clock)
	if m := send(session, "carol", "bob"); m.Urgent {
		t.Error("a session's mailbox did not follow the recorded bound")
	}
	for range 60 {
		clock()
	}
	if m := send(session, "alice", "bob"); !m.Urgent {
		t.Error("alice's urgent mail to bob a minute later was calmed")
	}
}
