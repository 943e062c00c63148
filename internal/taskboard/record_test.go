package taskboard

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// TestSpendAndVerdicts: a task's spend sums exactly the sessions whose
// settlement recorded it (the claiming one, one that continued without
// reporting, the reporting one, the rework after a FAIL, the reviewer
// sessions on it); sessions of the same agents before the claim or on
// other tasks, and the reviewer's session on another task, are not
// counted. Its verdicts name
// reviewer, round, PASS or FAIL and text.
func TestSpendAndVerdicts(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	tick := func() time.Time { clock = clock.Add(time.Minute); return clock }
	b, db := openBoard(t, "", Options{Now: now})
	seqs := map[string]uint32{}
	// taskOf is the task each session worked on or reviewed, as its
	// settlement records it (package settle).
	taskOf := map[string]int64{}
	// session records a session of agent that ran from start to end
	// (nil: still running) and used in/out tokens and usd.
	session := func(agent, id string, start time.Time, end *time.Time, in, out int64, usd float64) {
		t.Helper()
		seqs[agent]++
		rec := store.SessionRecord{SessionID: id, Agent: agent, Seq: seqs[agent], Started: start}
		if err := db.BeginSession(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if end == nil {
			return
		}
		rec.Ended, rec.TokensIn, rec.TokensOut, rec.CostUSD, rec.Outcome, rec.Task = end, in, out, usd, "success", taskOf[id]
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := db.SettleSessionTx(ctx, tx.Tx, rec, *end); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	at := func() *time.Time { t := tick(); return &t }

	// alice's session before the task: not counted.
	session("alice", "alice-0", tick(), at(), 1000, 1000, 10)
	tk := add(t, b, NewTask{Title: "the feature", Reviewer: "rita"})
	other := add(t, b, NewTask{Title: "another", Reviewer: "rita"})
	for _, id := range []string{"alice-1", "alice-2", "alice-2b", "alice-3", "rita-1", "rita-3"} {
		taskOf[id] = tk.ID
	}
	taskOf["bob-1"], taskOf["rita-2"] = other.ID, other.ID
	tick()
	if _, err := b.Claim(ctx, tk.ID, "alice", "alice-1"); err != nil {
		t.Fatal(err)
	}
	session("alice", "alice-1", tick(), at(), 100, 10, 1) // claimed it, ended without a report
	if err := b.Continue(ctx, tk.ID, "alice", "alice-2"); err != nil {
		t.Fatal(err)
	}
	session("alice", "alice-2", tick(), at(), 200, 20, 2) // continued it, no report: no event names it
	if err := b.Continue(ctx, tk.ID, "alice", "alice-2b"); err != nil {
		t.Fatal(err)
	}
	session("alice", "alice-2b", tick(), nil, 0, 0, 0) // continued it...
	tick()
	if _, err := b.Done(ctx, tk.ID, Holder{Agent: "alice", Session: "alice-2b"}, "first try"); err != nil {
		t.Fatal(err)
	}
	settle := func(id, agent string, start time.Time, in, out int64, usd float64) {
		t.Helper()
		end := tick()
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		rec := store.SessionRecord{SessionID: id, Agent: agent, Seq: seqs[agent], Started: start, Ended: &end,
			TokensIn: in, TokensOut: out, CostUSD: usd, Outcome: "success", Task: taskOf[id]}
		if _, err := db.SettleSessionTx(ctx, tx.Tx, rec, end); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	settle("alice-2b", "alice", clock.Add(-3*time.Minute), 300, 30, 3) // ...and reported it DONE

	// bob works on the other task meanwhile: not counted.
	if _, err := b.Claim(ctx, other.ID, "bob", "bob-1"); err != nil {
		t.Fatal(err)
	}
	session("bob", "bob-1", tick(), at(), 5000, 5000, 50)
	// rita's review: FAIL, in her session rita-1.
	session("rita", "rita-1", tick(), at(), 30, 3, 0.5)
	tick()
	if _, err := b.Verdict(ctx, tk.ID, "rita", "", false, "tests missing"); err != nil {
		t.Fatal(err)
	}
	// alice claims it again (the FAIL assigned it back to her) and
	// finishes it in alice-3.
	tick()
	if _, err := b.Claim(ctx, tk.ID, "alice", "alice-3"); err != nil {
		t.Fatal(err)
	}
	session("alice", "alice-3", tick(), at(), 400, 40, 4)
	tick()
	if _, err := b.Done(ctx, tk.ID, Holder{Agent: "alice", Session: "alice-3"}, "with tests"); err != nil {
		t.Fatal(err)
	}
	// rita reviews the other task first (rita-2), then this one (rita-3).
	if _, err := b.Done(ctx, other.ID, Holder{Agent: "bob", Session: "bob-1"}, "done"); err != nil {
		t.Fatal(err)
	}
	session("rita", "rita-2", tick(), at(), 7000, 7000, 70)
	tick()
	if _, err := b.Verdict(ctx, other.ID, "rita", "", true, "fine"); err != nil {
		t.Fatal(err)
	}
	session("rita", "rita-3", tick(), at(), 60, 6, 0.25)
	tick()
	if _, err := b.Verdict(ctx, tk.ID, "rita", "", true, "good now"); err != nil {
		t.Fatal(err)
	}
	// alice's next session, after the task left her: not counted.
	session("alice", "alice-4", tick(), at(), 9000, 9000, 90)

	sp, err := b.Spend(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	ids := slices.Clone(sp.IDs)
	slices.Sort(ids)
	want := Spend{Sessions: 6, TokensIn: 100 + 200 + 300 + 30 + 400 + 60, TokensOut: 10 + 20 + 30 + 3 + 40 + 6, CostUSD: 1 + 2 + 3 + 0.5 + 4 + 0.25}
	if sp.Sessions != want.Sessions || sp.TokensIn != want.TokensIn || sp.TokensOut != want.TokensOut || sp.CostUSD != want.CostUSD ||
		!slices.Equal(ids, []string{"alice-1", "alice-2", "alice-2b", "alice-3", "rita-1", "rita-3"}) {
		t.Fatalf("spend = %+v, want %+v of alice-1, alice-2, alice-2b, alice-3, rita-1, rita-3", sp, want)
	}
	if sp, err := b.Spend(ctx, other.ID); err != nil || sp.Sessions != 2 || sp.TokensIn != 12000 {
		t.Fatalf("spend of the other task = %+v, %v; want bob-1 and rita-2", sp, err)
	}

	vs, err := b.Verdicts(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || vs[0] != (Verdict{Round: 1, Reviewer: "rita", Verdict: "FAIL", Text: "tests missing", At: vs[0].At}) ||
		vs[1] != (Verdict{Round: 2, Reviewer: "rita", Verdict: "PASS", Text: "good now", At: vs[1].At}) || !vs[0].At.Before(vs[1].At) {
		t.Fatalf("verdicts = %+v", vs)
	}
	if sp, err := b.Spend(ctx, 999); err != nil || sp.Sessions != 0 || sp.IDs == nil {
		t.Fatalf("spend of no task = %+v, %v", sp, err)
	}
}
