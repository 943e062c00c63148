package taskboard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/store/storetest"
)

// TestClaimsAtomicAcrossProcesses: 20 processes claim from one board at
// once; every task is claimed, worked and closed exactly once. On both
// engines.
func TestClaimsAtomicAcrossProcesses(t *testing.T) {
	storetest.Engines(t, "claimrace", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		target := fresh(t)
		const tasks, procs = 60, 20
		db := storetest.OpenTarget(t, target)
		board := New(db, Options{AutoClose: true})
		for i := range tasks {
			if _, err := board.Add(ctx, NewTask{Title: fmt.Sprint("task ", i), CreatedBy: "operator"}); err != nil {
				t.Fatal(err)
			}
		}
		if w, err := board.Work(ctx, "p0"); err != nil || !w.Claimable {
			t.Fatalf("before the race: work %+v, %v; want claimable", w, err)
		}
		storetest.Race(t, "TestClaimRaceChild", target, "claims", procs, tasks)
		if w, err := board.Work(ctx, "p0"); err != nil || w.Any() {
			t.Errorf("after the race: work %+v, %v; want none (all closed)", w, err)
		}
		seen := map[int64]string{}
		for i := range procs {
			v, _, err := db.Setting(ctx, fmt.Sprint("claimed.p", i))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range strings.Fields(v) {
				id, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					t.Fatalf("id %q: %v", f, err)
				}
				if prev, dup := seen[id]; dup {
					t.Errorf("task %d claimed twice: by %s and p%d", id, prev, i)
				}
				seen[id] = fmt.Sprint("p", i)
			}
		}
		if len(seen) != tasks {
			t.Errorf("%d tasks claimed, want %d", len(seen), tasks)
		}
		ts, err := board.List(ctx, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			if tk.StateName != "CLOSED" {
				t.Errorf("task %d is %s, want CLOSED", tk.ID, tk.StateName)
			}
		}
	})
}

// TestClaimRaceChild is one process of TestClaimsAtomicAcrossProcesses: it
// claims, starts and finishes tasks until none is left (of the "each" it
// is told there are), and records what it claimed.
func TestClaimRaceChild(t *testing.T) {
	target, _, agent, tasks, ok := storetest.ChildArgs()
	if !ok {
		t.Skip("run by TestClaimsAtomicAcrossProcesses")
	}
	ctx := context.Background()
	board := New(storetest.OpenTarget(t, target), Options{AutoClose: true})
	var got []string
	for k := 0; ; k++ {
		if k > tasks { // a claim that does not take its task must not loop
			t.Fatalf("%s still claiming after %d claims of %d tasks", agent, k, tasks)
		}
		session := fmt.Sprint(agent, "-", k)
		tk, ok, err := board.ClaimNext(ctx, agent, session)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, strconv.FormatInt(tk.ID, 10))
		h := Holder{Agent: agent, Session: session}
		if _, err := board.Start(ctx, tk.ID, h); err != nil {
			t.Fatal(err)
		}
		if _, err := board.Done(ctx, tk.ID, h, "done"); err != nil {
			t.Fatal(err)
		}
	}
	if err := board.db.(*store.DB).SetSetting(ctx, "claimed."+agent, strings.Join(got, " ")); err != nil {
		t.Fatal(err)
	}
}
