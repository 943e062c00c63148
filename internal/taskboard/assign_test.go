package taskboard

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/store/storetest"
	"github.com/swarmd/swarmd/internal/task"
)

// wantAssignedEvent checks that task id's last event is the operator's
// change of its assignee, in state (no move), with reason why.
func wantAssignedEvent(t *testing.T, b *Board, id int64, state, why string) {
	t.Helper()
	e := lastEvent(t, b, id)
	if e.From != state || e.To != state || e.TransitionReason != EventAssigned || e.Actor != "operator" ||
		e.Reason != why || e.Session != "" || e.AbortReason != "" {
		t.Fatalf("task %d's last event %+v; want %s --assigned--> %s by operator: %s", id, e, state, state, why)
	}
}

// A task assigned to an agent that is gone is given to another agent, then
// to any: each change is an event that moves no state, moves the open
// board's version (the router wakes idle agents on it) and the claimable
// counts, and only the new assignee may claim it. The same assignee again
// records nothing. The task's reviewer is refused, and so are a held task,
// a DONE one and a final one, changing nothing. On both engines.
func TestAssignChangesWhoMayClaim(t *testing.T) {
	storetest.Engines(t, "assign", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		b := New(storetest.OpenTarget(t, fresh(t)), Options{AutoClose: true})
		tk := add(t, b, NewTask{Title: "for a removed agent", Assignee: "ghost", Reviewer: "rita"})
		version := func() string {
			t.Helper()
			v, err := b.OpenVersion(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		claimable := func(agent string) bool {
			t.Helper()
			ok, err := b.HasClaimable(ctx, agent)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if claimable("bob") || claimable("alice") {
			t.Fatal("ghost's task is claimable by another agent")
		}

		v := version()
		if _, err := b.Assign(ctx, tk.ID, "rita"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cannot review its own work") {
			t.Fatalf("assign to its reviewer = %v; want ErrInvalid, nobody reviews their own work", err)
		}
		if got := wantState(t, b, tk.ID, task.Open); got.Assignee != "ghost" || len(mustHistory(t, b, tk.ID)) != 1 || version() != v {
			t.Fatalf("a refused assign changed the task: %+v", got)
		}

		got, err := b.Assign(ctx, tk.ID, "bob")
		if err != nil || got.Assignee != "bob" || got.State != task.Open || got.Retries != 0 {
			t.Fatalf("assign to bob = %+v, %v; want OPEN for bob, no retry", got, err)
		}
		wantAssignedEvent(t, b, tk.ID, "OPEN", "assigned to bob (was ghost)")
		if version() == v {
			t.Error("the assign of an OPEN task did not move the open version: idle agents are not woken")
		}
		if _, mine, err := b.Claimable(ctx, 10); err != nil || mine["bob"] != 1 || mine["ghost"] != 0 {
			t.Errorf("Claimable after the assign: %v, %v; want bob's 1, ghost's none", mine, err)
		}
		if !claimable("bob") || claimable("alice") {
			t.Error("after the assign to bob: want bob, and only bob, to have it to claim")
		}

		v, n := version(), len(mustHistory(t, b, tk.ID))
		if got, err := b.Assign(ctx, tk.ID, "bob"); err != nil || got.Assignee != "bob" {
			t.Fatalf("assign to bob again = %+v, %v", got, err)
		}
		if len(mustHistory(t, b, tk.ID)) != n || version() != v {
			t.Error("assigning a task to its assignee recorded an event or moved the open version")
		}

		if _, ok, err := b.ClaimNext(ctx, "alice", "alice-1"); err != nil || ok {
			t.Fatalf("alice's claim = %v, %v; want nothing, the task is bob's", ok, err)
		}
		if claimed, ok, err := b.ClaimNext(ctx, "bob", "bob-1"); err != nil || !ok || claimed.ID != tk.ID {
			t.Fatalf("bob's claim = %+v, %v, %v; want task %d", claimed, ok, err, tk.ID)
		}
		_, err = b.Assign(ctx, tk.ID, "alice")
		if !errors.Is(err, ErrState) || err.Error() != "task 1 is CLAIMED, held by bob: requeue it first ('swarmd task requeue 1'), then assign it: "+ErrState.Error() {
			t.Fatalf("assign of a held task = %v; want ErrState saying to requeue it first", err)
		}
		if got := wantState(t, b, tk.ID, task.Claimed); got.Assignee != "bob" || got.Claimant != "bob" {
			t.Fatalf("a refused assign changed the held task: %+v", got)
		}

		// Requeued, it stays bob's; --anyone opens it to every agent but
		// its reviewer.
		if _, err := b.Requeue(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Assign(ctx, tk.ID, ""); err != nil || got.Assignee != "" {
			t.Fatalf("assign to any agent = %+v, %v", got, err)
		}
		wantAssignedEvent(t, b, tk.ID, "OPEN", "assigned to any agent (was bob)")
		if !claimable("alice") || claimable("rita") {
			t.Error("after the assign to any agent: want alice to have it to claim, and rita, its reviewer, not")
		}

		// DONE, waiting for rita's verdict: refused.
		if _, err := b.Claim(ctx, tk.ID, "alice", "alice-2"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.DoneAt(ctx, tk.ID, Holder{Agent: "alice"}, "done", "abc123"); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, tk.ID, task.Done)
		_, err = b.Assign(ctx, tk.ID, "bob")
		if !errors.Is(err, ErrState) || err.Error() != "task 1 is DONE, alice's work under review or waiting to merge: it changes hands "+
			"only once a review FAIL or a merge rejection sends it back OPEN; assign it then: "+ErrState.Error() {
			t.Fatalf("assign of a DONE task = %v; want ErrState saying to assign it once it is back OPEN", err)
		}
		if got := wantState(t, b, tk.ID, task.Done); got.Assignee != "" || got.Worker != "alice" {
			t.Fatalf("a refused assign changed the DONE task: %+v", got)
		}
		// Its PASS closes it: final, refused.
		if _, err := b.Verdict(ctx, tk.ID, "rita", "abc123", true, "good"); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, tk.ID, task.Closed)
		if _, err := b.Assign(ctx, tk.ID, "bob"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "CLOSED, a final state") {
			t.Fatalf("assign of a CLOSED task = %v; want ErrState", err)
		}
		if got := wantState(t, b, tk.ID, task.Closed); got.Assignee != "" {
			t.Fatalf("a refused assign changed the closed task: %+v", got)
		}
		if _, err := b.Assign(ctx, 99, "bob"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("assign of an unknown task = %v; want ErrNotFound", err)
		}
	})
}

// Work sent back to its worker, by a review's FAIL or by the merge queue,
// is OPEN for that worker alone; when the worker is gone the operator
// gives it to another, who continues it: its line (work_head) is kept, the
// review loop goes on with the new worker, and its DONE is reviewed again.
func TestAssignReworkToAnotherWorker(t *testing.T) {
	for _, c := range []struct {
		name     string
		reviewer string
		sendBack func(t *testing.T, b *Board, id int64)
	}{
		{"review FAIL", "rita", func(t *testing.T, b *Board, id int64) {
			if _, err := b.Verdict(context.Background(), id, "rita", "abc123", false, "add a test"); err != nil {
				t.Fatal(err)
			}
		}},
		{"merge conflict", "", func(t *testing.T, b *Board, id int64) {
			if _, _, err := b.Rejected(context.Background(), id, "abc123", "conflict", "in parser.go", 3); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			// No AutoClose: a merge queue takes DONE tasks.
			b, _ := openBoard(t, "", Options{})
			tk := add(t, b, NewTask{Title: "rework", Reviewer: c.reviewer})
			if _, err := b.Claim(ctx, tk.ID, "carol", "carol-1"); err != nil {
				t.Fatal(err)
			}
			if _, err := b.DoneAt(ctx, tk.ID, Holder{Agent: "carol", Session: "carol-1"}, "first try", "abc123"); err != nil {
				t.Fatal(err)
			}
			c.sendBack(t, b, tk.ID)
			back := wantState(t, b, tk.ID, task.Open)
			if back.Assignee != "carol" {
				t.Fatalf("sent back to %q, want carol, its worker", back.Assignee)
			}
			// carol is removed from the swarm: nobody else may claim it.
			if _, ok, err := b.ClaimNext(ctx, "bob", "bob-1"); err != nil || ok {
				t.Fatalf("bob's claim of carol's rework = %v, %v; want nothing", ok, err)
			}
			got, err := b.Assign(ctx, tk.ID, "bob")
			if err != nil || got.Assignee != "bob" || got.WorkHead != "abc123" || got.Retries != 0 {
				t.Fatalf("assign = %+v, %v; want bob's, its line kept at abc123, no retry", got, err)
			}
			wantAssignedEvent(t, b, tk.ID, "OPEN", "assigned to bob (was carol)")
			claimed, ok, err := b.ClaimNext(ctx, "bob", "bob-1")
			if err != nil || !ok || claimed.ID != tk.ID {
				t.Fatalf("bob's claim = %+v, %v, %v", claimed, ok, err)
			}
			if _, err := b.DoneAt(ctx, tk.ID, Holder{Agent: "bob", Session: "bob-1"}, "second try", "def456"); err != nil {
				t.Fatal(err)
			}
			got = wantState(t, b, tk.ID, task.Done)
			if c.reviewer != "" && (got.Worker != "bob" || got.ReviewState != "reviewing" || got.Iteration != 2) {
				t.Errorf("after bob's DONE: worker %q, review %q round %d; want bob's work reviewed again, round 2",
					got.Worker, got.ReviewState, got.Iteration)
			}
			if got.Head != "def456" {
				t.Errorf("head %q, want bob's def456", got.Head)
			}
		})
	}
}

// Every state nobody holds and that can be claimed again takes a new
// assignee (PLANNED, BLOCKED, FAILED here, as OPEN above); outside the open
// set, the change moves no version, and the task goes to its new assignee
// once it is OPEN.
func TestAssignUnheldStates(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{AutoClose: true})
	planned := add(t, b, NewTask{Title: "planned", Plan: true, Assignee: "ghost"})
	gate := add(t, b, NewTask{Title: "gate"})
	blocked := add(t, b, NewTask{Title: "blocked", After: []int64{gate.ID}, Assignee: "ghost"})
	failed := add(t, b, NewTask{Title: "failed", Assignee: "ghost"})
	if _, err := b.Claim(ctx, failed.ID, "ghost", "ghost-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Fail(ctx, failed.ID, Holder{Agent: "ghost"}, "gave up"); err != nil {
		t.Fatal(err)
	}
	v, err := b.OpenVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id    int64
		state string
	}{{planned.ID, "PLANNED"}, {blocked.ID, "BLOCKED"}, {failed.ID, "FAILED"}} {
		got, err := b.Assign(ctx, c.id, "bob")
		if err != nil || got.Assignee != "bob" || got.StateName != c.state {
			t.Fatalf("assign of the %s task = %+v, %v; want it %s, bob's", c.state, got, err, c.state)
		}
		wantAssignedEvent(t, b, c.id, c.state, "assigned to bob (was ghost)")
	}
	if now, _ := b.OpenVersion(ctx); now != v {
		t.Errorf("assigning tasks outside the open set moved the open version %s -> %s", v, now)
	}
	if _, err := b.Approve(ctx, planned.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Retry(ctx, failed.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, gate.ID, "alice", "alice-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, gate.ID, Holder{Agent: "alice"}, "open the blocked one"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{planned.ID, blocked.ID, failed.ID} {
		if _, err := b.Claim(ctx, id, "alice", "alice-2"); !errors.Is(err, ErrNotHolder) {
			t.Errorf("alice's claim of task %d = %v; want it refused, the task is bob's", id, err)
		}
		claimed, ok, err := b.ClaimNext(ctx, "bob", "bob-1")
		if err != nil || !ok {
			t.Fatalf("bob's claim = %v, %v", ok, err)
		}
		if _, err := b.Done(ctx, claimed.ID, Holder{Agent: "bob"}, "ok"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []int64{planned.ID, blocked.ID, failed.ID} {
		if got := wantState(t, b, id, task.Closed); got.Claimant != "bob" {
			t.Errorf("task %d closed by %q, want bob", id, got.Claimant)
		}
	}
}

func mustHistory(t *testing.T, b *Board, id int64) []Event {
	t.Helper()
	h, err := b.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A parent waiting for its subtasks is held by nobody, but its review
// loop's worker is still the agent that split it, alice: when every
// subtask is done the parent is DONE for its reviewer, and a FAIL sends
// the rework to that worker. Assigned by the operator while it waits
// (alice left the swarm), the rework is the new assignee's instead: bob's,
// or, with --anyone, any agent's but the reviewer's. Whoever takes it is
// its worker from then on: its DONE is reviewed as theirs, merged from
// their line, and a merge rejection sends it back to them. Assigning it to
// no one new while the rework is still alice's (--anyone of a task that
// was for any agent) is a change too. On both engines.
func TestAssignWaitingParentReworkGoesToTheAssignee(t *testing.T) {
	storetest.Engines(t, "assignparent", func(t *testing.T, fresh func(t *testing.T) string) {
		for _, c := range []struct{ name, to, why string }{
			{"to bob", "bob", "assigned to bob (was any agent), its review's rework too (was alice's)"},
			{"to anyone", "", "assigned to any agent (was any agent), its review's rework too (was alice's)"},
		} {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				// No AutoClose: a merge queue takes DONE tasks.
				b := New(storetest.OpenTarget(t, fresh(t)), Options{FrozenHead: true})
				parent := add(t, b, NewTask{Title: "the feature", Reviewer: "rita"})
				h := Holder{Agent: "alice", Session: "alice-1-a"}
				if _, err := b.Claim(ctx, parent.ID, h.Agent, h.Session); err != nil {
					t.Fatal(err)
				}
				kids, err := b.Split(ctx, parent.ID, h, []string{"one"})
				if err != nil {
					t.Fatal(err)
				}
				if p := wantState(t, b, parent.ID, task.WaitingForSubtasks); p.Worker != "alice" || p.Assignee != "" {
					t.Fatalf("split parent: worker %q, assignee %q; want alice's loop, for any agent", p.Worker, p.Assignee)
				}

				got, err := b.Assign(ctx, parent.ID, c.to)
				if err != nil || got.State != task.WaitingForSubtasks || got.Assignee != c.to {
					t.Fatalf("assign = %+v, %v; want it WAITING_FOR_SUBTASKS, assignee %q", got, err, c.to)
				}

				// Its subtask is done and passed: the parent is DONE, for
				// rita, who fails it.
				kh := Holder{Agent: "carol", Session: "carol-1-a"}
				if _, err := b.Claim(ctx, kids[0].ID, kh.Agent, kh.Session); err != nil {
					t.Fatal(err)
				}
				kidHead := fmt.Sprintf("%040d", 1)
				if _, err := b.DoneAt(ctx, kids[0].ID, kh, "done", kidHead); err != nil {
					t.Fatal(err)
				}
				if _, err := b.Verdict(ctx, kids[0].ID, "rita", kidHead, true, "ok"); err != nil {
					t.Fatal(err)
				}
				wantState(t, b, parent.ID, task.Done)
				if _, err := b.Verdict(ctx, parent.ID, "rita", "", false, "the parts are not wired together"); err != nil {
					t.Fatal(err)
				}
				back := wantState(t, b, parent.ID, task.Open)
				if back.Assignee != c.to {
					t.Fatalf("the review FAIL sent the rework to %q, want %q, whom the operator assigned it to", back.Assignee, c.to)
				}
				evs := mustHistory(t, b, parent.ID)
				if !slices.ContainsFunc(evs, func(e Event) bool { return e.TransitionReason == EventAssigned && e.Reason == c.why }) {
					t.Errorf("the history lacks the assign %q: %+v", c.why, evs)
				}
				if e, want := evs[len(evs)-1], "back to "+orAnyAgent(c.to)+" with the review"; e.Reason != want {
					t.Errorf("the FAIL's move back is %q, want %q", e.Reason, want)
				}
				if c.to != "" {
					if _, err := b.Claim(ctx, parent.ID, "alice", "alice-2-a"); !errors.Is(err, ErrNotHolder) {
						t.Fatalf("alice's claim of the rework = %v; want it refused, it is %s's", err, c.to)
					}
				}
				if ok, err := b.HasClaimable(ctx, "rita"); err != nil || ok {
					t.Fatalf("rita has the rework to claim (%v, %v): nobody reviews their own work", ok, err)
				}

				bh := Holder{Agent: "bob", Session: "bob-1-a"}
				if tk, ok, err := b.ClaimNext(ctx, bh.Agent, bh.Session); err != nil || !ok || tk.ID != parent.ID {
					t.Fatalf("bob's claim = %+v, %v, %v; want the rework, task %d", tk, ok, err, parent.ID)
				}
				rework := fmt.Sprintf("%040d", 2)
				if _, err := b.DoneAt(ctx, parent.ID, bh, "wired", rework); err != nil {
					t.Fatal(err)
				}
				if got := wantState(t, b, parent.ID, task.Done); got.Worker != "bob" || got.ReviewState != "reviewing" || got.Iteration != 2 {
					t.Fatalf("after bob's DONE: worker %q, review %q round %d; want bob's work reviewed, round 2", got.Worker, got.ReviewState, got.Iteration)
				}
				if _, err := b.Verdict(ctx, parent.ID, "rita", rework, true, "wired now"); err != nil {
					t.Fatal(err)
				}
				if _, err := b.Merged(ctx, kids[0].ID, kidHead, "0123456789abcdef"); err != nil {
					t.Fatal(err)
				}
				ready, err := b.ReadyToMerge(ctx, nil)
				if err != nil || len(ready) != 1 || ready[0] != (Ready{ID: parent.ID, Worker: "bob", Head: rework}) {
					t.Fatalf("ready to merge = %+v, %v; want task %d, bob's, at his rework", ready, err, parent.ID)
				}
				if _, _, err := b.Rejected(ctx, parent.ID, rework, "conflict", "in wire.go", 3); err != nil {
					t.Fatal(err)
				}
				if back := wantState(t, b, parent.ID, task.Open); back.Assignee != "bob" {
					t.Fatalf("the merge rejection sent the rework to %q, want bob, its worker", back.Assignee)
				}
			})
		}
	})
}

// WorkerUnknown flags the task whose next rework waits for a worker that
// left: a parent waiting for its subtasks, split by carol (no agent of
// the swarm), whose review's FAIL sends the rework to her though the task
// is for any agent. It flags nothing else: the parent of an agent of the
// swarm, any task when the agents are not known, the parent once assigned
// (to alice, or to any agent), a DONE parent under review (nobody may
// give it to another before its verdict), nor the rework that FAIL sent
// back OPEN for carol: that waits for its assignee (AssigneeUnknown). On
// both engines.
func TestWorkerUnknownFlagsTheReworkOfAWorkerThatLeft(t *testing.T) {
	storetest.Engines(t, "workerunknown", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		b := New(storetest.OpenTarget(t, fresh(t)), Options{FrozenHead: true})
		swarm := []string{"alice", "bob", "rita"}
		split := func(worker string) (Task, Task) {
			t.Helper()
			p := add(t, b, NewTask{Title: worker + "'s feature", Reviewer: "rita"})
			h := Holder{Agent: worker, Session: worker + "-split"}
			if _, err := b.Claim(ctx, p.ID, h.Agent, h.Session); err != nil {
				t.Fatal(err)
			}
			kids, err := b.Split(ctx, p.ID, h, []string{"part one"})
			if err != nil {
				t.Fatal(err)
			}
			return wantState(t, b, p.ID, task.WaitingForSubtasks), kids[0]
		}
		flags := func(id int64) (assignee, worker bool) {
			t.Helper()
			tk, err := b.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return AssigneeUnknown(tk, swarm), WorkerUnknown(tk, swarm)
		}

		carols, kid := split("carol")
		if !WorkerUnknown(carols, swarm) || AssigneeUnknown(carols, swarm) || WorkerUnknown(carols, nil) {
			t.Fatalf("carol's waiting parent (worker %q, assignee %q): want its worker flagged, and only when the agents are known",
				carols.Worker, carols.Assignee)
		}
		if bobs, _ := split("bob"); WorkerUnknown(bobs, swarm) {
			t.Fatalf("bob's waiting parent is flagged: %+v", bobs)
		}

		// Its subtask done and passed, the parent is DONE under review.
		kh := Holder{Agent: "alice", Session: "alice-kid"}
		if _, err := b.Claim(ctx, kid.ID, kh.Agent, kh.Session); err != nil {
			t.Fatal(err)
		}
		kidHead := fmt.Sprintf("%040d", 1)
		if _, err := b.DoneAt(ctx, kid.ID, kh, "done", kidHead); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Verdict(ctx, kid.ID, "rita", kidHead, true, "ok"); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, carols.ID, task.Done)
		if a, w := flags(carols.ID); a || w {
			t.Fatalf("the DONE parent under review: assignee flagged %v, worker flagged %v; want neither", a, w)
		}
		if _, err := b.Verdict(ctx, carols.ID, "rita", "", false, "wire it in"); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, carols.ID, task.Open)
		if a, w := flags(carols.ID); !a || w {
			t.Fatalf("the rework back OPEN for carol: assignee flagged %v, worker flagged %v; want its assignee", a, w)
		}

		for _, to := range []string{"alice", ""} {
			p, _ := split("carol")
			if _, err := b.Assign(ctx, p.ID, to); err != nil {
				t.Fatal(err)
			}
			if a, w := flags(p.ID); a || w {
				t.Fatalf("the waiting parent assigned to %q: assignee flagged %v, worker flagged %v; want neither", to, a, w)
			}
		}
	})
}

// A waiting parent given to any agent (--anyone) has no worker for its
// rework; assigned again, to bob, its history says the rework was for any
// agent, not "was 's".
func TestAssignWaitingParentAgainNamesTheReworkItHad(t *testing.T) {
	ctx := context.Background()
	b := New(storetest.OpenTarget(t, filepath.Join(t.TempDir(), "swarm.db")), Options{FrozenHead: true})
	parent := add(t, b, NewTask{Title: "the feature", Reviewer: "rita"})
	h := Holder{Agent: "alice", Session: "alice-1-a"}
	if _, err := b.Claim(ctx, parent.ID, h.Agent, h.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Split(ctx, parent.ID, h, []string{"one"}); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"", "bob"} {
		if _, err := b.Assign(ctx, parent.ID, to); err != nil {
			t.Fatal(err)
		}
	}
	hist := mustHistory(t, b, parent.ID)
	got := hist[len(hist)-1].Reason
	if want := "assigned to bob (was any agent), its review's rework too (was any agent's)"; got != want {
		t.Fatalf("history of the second assign: %q, want %q", got, want)
	}
}
