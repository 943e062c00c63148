package store

import (
	"context"
	"testing"
	"time"
)

// TestBudgetLimitsAndSpendSince: runtime limits are durable, replaced and
// cleared with their events; SpendSince sums the sessions that ended in a
// window, whatever their start, and not the ones still running.
func TestBudgetLimitsAndSpendSince(t *testing.T) {
	ctx := context.Background()
	t0 := t0.Truncate(time.Microsecond)
	path := t.TempDir() + "/swarm.db"
	db := openTest(t, path, Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	end := func(agent, id string, started, ended time.Time, in, out int64, usd float64) {
		j.SessionEnded(SessionRecord{SessionID: id, Agent: agent, Seq: 1, Started: started, Ended: &ended,
			Outcome: OutcomeSuccess, TokensIn: in, TokensOut: out, CostUSD: usd})
	}
	end("alice", "a1", t0.Add(-2*time.Hour), t0.Add(-time.Hour), 100, 10, 1.5) // before the window
	end("alice", "a2", t0.Add(-time.Minute), t0, 200, 20, 2.25)                // started before, ended in it
	end("alice", "a3", t0, t0.Add(time.Minute), 300, 30, 0.25)
	end("bob", "b1", t0, t0.Add(time.Minute), 5, 5, 0)
	j.SessionStarted(SessionRecord{SessionID: "b2", Agent: "bob", Seq: 2, Started: t0})
	e := EventRecord{At: t0, Agent: "alice", From: "Running", Event: EventBudgetSet, To: "Running", Actor: "operator", Reason: "$5"}
	if err := j.SetBudgetLimit(ctx, BudgetLimit{Scope: "alice", USD: 5, Actor: "operator", SetAt: t0}, e); err != nil {
		t.Fatal(err)
	}
	if err := j.SetBudgetLimit(ctx, BudgetLimit{Scope: "alice", USD: 7.5, Actor: "operator", SetAt: t0}, e); err != nil {
		t.Fatal(err)
	}
	if err := j.SetBudgetLimit(ctx, BudgetLimit{Scope: "(swarm)", USD: 50, Actor: "operator", SetAt: t0}, e); err != nil {
		t.Fatal(err)
	}
	sp, err := db.SpendSince(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if a := sp["alice"]; a.Sessions != 2 || a.TokensIn != 500 || a.TokensOut != 50 || a.CostUSD != 2.5 {
		t.Errorf("alice %+v", a)
	}
	if b := sp["bob"]; b.Sessions != 1 || b.CostUSD != 0 {
		t.Errorf("bob %+v", b)
	}
	if found, err := j.ClearBudgetLimit(ctx, "(swarm)", e); err != nil || !found {
		t.Fatalf("clear: %v %v", found, err)
	}
	if found, err := j.ClearBudgetLimit(ctx, "(swarm)", e); err != nil || found {
		t.Fatalf("clear again: %v %v", found, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = openTest(t, path, Options{})
	ls, err := db.BudgetLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls["alice"].USD != 7.5 || ls["alice"].Actor != "operator" || !ls["alice"].SetAt.Equal(t0) {
		t.Fatalf("limits %+v", ls)
	}
	evs, err := db.Events(ctx, EventQuery{Agent: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Event == EventBudgetSet {
			n++
		}
	}
	if n != 4 { // three sets and one clear
		t.Errorf("%d BudgetSet events", n)
	}
}
