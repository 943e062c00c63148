package budget

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func levels(cs []Crossing) []Level {
	var out []Level
	for _, c := range cs {
		out = append(out, c.Level)
	}
	return out
}

func TestWindowStart(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		w    time.Duration
		want time.Time
	}{
		{t0, 24 * time.Hour, time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)},
		{t0.Add(90 * time.Minute), time.Hour, time.Date(2026, 3, 4, 11, 0, 0, 0, time.UTC)},
		{t0.In(time.FixedZone("X", 5*3600)), 24 * time.Hour, time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)},
		{t0, 0, time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)},
	} {
		if got := WindowStart(c.at, c.w); !got.Equal(c.want) {
			t.Errorf("WindowStart(%v, %v) = %v, want %v", c.at, c.w, got, c.want)
		}
	}
}

// TestMarks: each of 80%, 95% and 100% is reported once per window, by
// whichever spend reaches it first (a running session's or an ended one's);
// the larger share of USD and tokens counts.
func TestMarks(t *testing.T) {
	l := New()
	if cs := l.SetLimit("alice", Limit{USD: 10, Tokens: 1000, Window: time.Hour}, Spend{USD: 2}, t0); cs != nil {
		t.Fatalf("a new budget at 20%% reported %v", levels(cs))
	}
	if cs := l.Live("alice", "s1", Spend{USD: 5.9}, t0); cs != nil {
		t.Fatalf("79%%: %v", levels(cs))
	}
	if cs := l.Live("alice", "s1", Spend{USD: 6.1}, t0); len(cs) != 1 || cs[0].Level != Warn80 || cs[0].Scope != "alice" {
		t.Fatalf("81%%: %v", cs)
	}
	if cs := l.Live("alice", "s1", Spend{USD: 6.2}, t0); cs != nil {
		t.Fatalf("82%% again: %v", levels(cs))
	}
	// Tokens are the larger share: 96%.
	if cs := l.Live("alice", "s2", Spend{Tokens: 960}, t0); len(cs) != 1 || cs[0].Level != Warn95 {
		t.Fatalf("96%% of tokens: %v", levels(cs))
	}
	// The final cost replaces s1's spend so far: 2 + 8.1 = 101%.
	cs := l.Commit("alice", "s1", Spend{USD: 8.1}, t0.Add(time.Minute))
	if len(cs) != 1 || cs[0].Level != Exhausted || cs[0].Spent != (Spend{USD: 10.1, Tokens: 960}) {
		t.Fatalf("commit: %+v", cs)
	}
	st, ok := l.Exhausted("alice", t0.Add(time.Minute))
	if !ok || st.WindowEnd != t0.Add(time.Hour) {
		t.Fatalf("Exhausted: %+v %v", st, ok)
	}
	if left, ok := l.LeftUSD("alice", t0); !ok || left > -0.099 || left < -0.101 {
		t.Errorf("LeftUSD %v %v", left, ok)
	}
	if next := l.NextRollover(t0); !next.Equal(t0.Add(time.Hour)) {
		t.Errorf("NextRollover %v", next)
	}
	// The window rolls over: nothing ended in the new one yet, but the
	// running session s2's spend so far counts there.
	later := t0.Add(time.Hour)
	if _, ok := l.Exhausted("alice", later); ok {
		t.Fatal("still exhausted in the next window")
	}
	st, _ = l.Status("alice", later)
	if st.Spent != (Spend{Tokens: 960}) || st.Level != Warn95 || !st.WindowStart.Equal(later) {
		t.Fatalf("new window: %+v", st)
	}
	if !l.NextRollover(later).IsZero() {
		t.Error("a rollover while nothing is exhausted")
	}
	// Its marks were reset with the window: 95% is not reported again
	// (the roll found it there), 100% is.
	if cs := l.Commit("alice", "s2", Spend{Tokens: 1000}, later); len(cs) != 1 || cs[0].Level != Exhausted {
		t.Fatalf("new window, 100%%: %v", levels(cs))
	}
}

// TestRaiseAndLower: raising a spent budget ends the exhaustion with no
// event; lowering it reports the mark it is past; a removed budget limits
// nothing.
func TestRaiseAndLower(t *testing.T) {
	l := New()
	l.SetLimit("bob", Limit{USD: 1}, Spend{}, t0)
	if cs := l.Commit("bob", "s1", Spend{USD: 1.5}, t0); len(cs) != 1 || cs[0].Level != Exhausted {
		t.Fatalf("%v", levels(cs))
	}
	// The ledger's own count goes on: the committed argument is for new
	// budgets.
	if cs := l.SetLimit("bob", Limit{USD: 5}, Spend{USD: 99}, t0); cs != nil {
		t.Fatalf("raise reported %v", levels(cs))
	}
	if st, _ := l.Status("bob", t0); st.Level != Under || st.Spent.USD != 1.5 {
		t.Fatalf("after raise: %+v", st)
	}
	if cs := l.SetLimit("bob", Limit{USD: 1.6}, Spend{}, t0); len(cs) != 1 || cs[0].Level != Warn80 {
		t.Fatalf("lower to 94%%: %v", levels(cs))
	}
	// No limit: the spend is still counted, and holds nothing.
	if cs := l.SetLimit("bob", Limit{}, Spend{}, t0); cs != nil {
		t.Fatal(cs)
	}
	if cs := l.Commit("bob", "s2", Spend{USD: 100}, t0); cs != nil {
		t.Fatalf("spend without a budget: %v", levels(cs))
	}
	if st, ok := l.Status("bob", t0); !ok || st.Spent.USD != 101.5 || st.Level != Under {
		t.Fatalf("bob without a limit: %+v %v", st, ok)
	}
	if _, ok := l.Exhausted("bob", t0); ok || !l.NextRollover(t0).IsZero() {
		t.Fatal("a scope without a limit is exhausted")
	}
	if _, ok := l.LeftUSD("bob", t0); ok {
		t.Fatal("USD left without a USD limit")
	}
	l.Remove("bob")
	if _, ok := l.Status("bob", t0); ok {
		t.Fatal("removed scope still there")
	}
	// A new budget that starts spent reports nothing, but is exhausted.
	l.SetLimit("carol", Limit{USD: 1}, Spend{USD: 3}, t0)
	if _, ok := l.Exhausted("carol", t0); !ok {
		t.Fatal("carol starts spent")
	}
}

// TestSwarmBudget: every agent's spend counts against the swarm's budget,
// and an agent with a budget of its own is held by whichever is spent.
func TestSwarmBudget(t *testing.T) {
	l := New()
	l.SetLimit(Swarm, Limit{USD: 10, Window: 7 * 24 * time.Hour}, Spend{USD: 1}, t0)
	l.SetLimit("alice", Limit{USD: 100}, Spend{}, t0)
	if got := l.Scopes(); len(got) != 2 || got[0] != "alice" || got[1] != Swarm {
		t.Fatalf("scopes %v", got)
	}
	cs := l.Commit("bob", "b1", Spend{USD: 8}, t0) // bob has no budget of his own
	if len(cs) != 1 || cs[0].Scope != Swarm || cs[0].Level != Warn80 {
		t.Fatalf("%+v", cs)
	}
	cs = l.Live("alice", "a1", Spend{USD: 1.5}, t0)
	if len(cs) != 1 || cs[0].Scope != Swarm || cs[0].Level != Exhausted {
		t.Fatalf("%+v", cs)
	}
	for _, a := range []string{"alice", "bob"} {
		if st, ok := l.Exhausted(a, t0); !ok || st.Scope != Swarm {
			t.Errorf("%s: %+v %v", a, st, ok)
		}
	}
	if st, _ := l.Tightest("alice", t0); st.Scope != Swarm {
		t.Errorf("tightest %+v", st)
	}
	if left, _ := l.LeftUSD("alice", t0); left != -0.5 {
		t.Errorf("alice's least left %v", left)
	}
	// The swarm's window is a week (epoch-aligned: a Thursday).
	if next := l.NextRollover(t0); next.Weekday() != time.Thursday || next.Sub(t0) > 7*24*time.Hour {
		t.Errorf("next rollover %v", next)
	}
}
