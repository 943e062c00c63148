package taskboard

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
)

func openBoard(t *testing.T, path string, opts Options) (*Board, *store.DB) {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "swarm.db")
	}
	db, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return New(db, opts), db
}

func add(t *testing.T, b *Board, n NewTask) Task {
	t.Helper()
	tk, err := b.Add(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func wantState(t *testing.T, b *Board, id int64, want task.State) Task {
	t.Helper()
	tk, err := b.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != want {
		t.Fatalf("task %d is %s, want %s", id, tk.State, want)
	}
	return tk
}

func TestClaimOrderAndLifecycle(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{AutoClose: true})
	low := add(t, b, NewTask{Title: "low"})
	high := add(t, b, NewTask{Title: "high", Priority: 5})
	forBob := add(t, b, NewTask{Title: "bob's", Priority: 9, Assignee: "bob"})

	got, ok, err := b.ClaimNext(ctx, "alice", "alice-1-x")
	if err != nil || !ok || got.ID != high.ID || got.State != task.Claimed || got.ClaimSession == "" {
		t.Fatalf("alice's claim = %+v, %v, %v; want %d CLAIMED (bob's task is not hers)", got, ok, err, high.ID)
	}
	if got, _, _ := b.ClaimNext(ctx, "bob", "bob-1-y"); got.ID != forBob.ID {
		t.Fatalf("bob claimed %d, want his own %d", got.ID, forBob.ID)
	}
	// A claimant may not claim a second task while holding one.
	if _, err := b.Claim(ctx, low.ID, "alice", "alice-1-x"); !errors.Is(err, ErrState) {
		t.Fatalf("second claim = %v, want ErrState", err)
	}
	// Reports are fenced: another agent, or a stale session, is refused.
	if _, err := b.Done(ctx, high.ID, Holder{Agent: "bob"}, "x"); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("bob finishing alice's task = %v", err)
	}
	if _, err := b.Start(ctx, high.ID, Holder{Agent: "alice", Session: "alice-2-z"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, high.ID, Holder{Agent: "alice", Session: "alice-1-x"}, "x"); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("stale session's report = %v, want ErrNotHolder", err)
	}
	done, err := b.Done(ctx, high.ID, Holder{Agent: "alice", Session: "alice-2-z"}, "all good")
	if err != nil || done.State != task.Closed {
		t.Fatalf("done = %+v, %v; want CLOSED (auto-close)", done, err)
	}
	// A request the state forbids names the state.
	if _, err := b.Start(ctx, high.ID, Holder{Agent: "alice"}); !errors.Is(err, ErrState) {
		t.Fatalf("start of a closed task = %v", err)
	}
	h, err := b.History(ctx, high.ID)
	if err != nil {
		t.Fatal(err)
	}
	var path string
	for _, e := range h {
		path += e.To + " "
	}
	if path != "OPEN CLAIMED IN_PROGRESS DONE CLOSED " || h[3].TransitionReason != "completed" || h[3].Actor != "agent:alice" {
		t.Fatalf("history %q %+v", path, h)
	}
}

func TestDependenciesAndSubtasks(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{AutoClose: true})
	first := add(t, b, NewTask{Title: "first"})
	second := add(t, b, NewTask{Title: "second", After: []int64{first.ID}})
	wantState(t, b, second.ID, task.Blocked)
	if got, _, _ := b.ClaimNext(ctx, "a", "a-1-s"); got.ID != first.ID {
		t.Fatalf("claimed %d, want %d (the other is blocked)", got.ID, first.ID)
	}
	if _, err := b.Done(ctx, first.ID, Holder{Agent: "a"}, ""); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, second.ID, task.Open) // by itself, when first CLOSED

	parent := add(t, b, NewTask{Title: "parent"})
	if _, err := b.Claim(ctx, parent.ID, "p", "p-1-s"); err != nil {
		t.Fatal(err)
	}
	kids, err := b.Split(ctx, parent.ID, Holder{Agent: "p"}, []string{"k1", "k2"})
	if err != nil || len(kids) != 2 || kids[0].Parent != parent.ID {
		t.Fatalf("split = %+v, %v", kids, err)
	}
	if p := wantState(t, b, parent.ID, task.WaitingForSubtasks); p.Claimant != "" || p.ClaimSession != "" {
		t.Fatalf("split parent keeps claimant %q, session %q; want both released", p.Claimant, p.ClaimSession)
	}
	for i, k := range kids {
		agent := fmt.Sprint("k", i)
		if _, err := b.Claim(ctx, k.ID, agent, agent+"-1-s"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Done(ctx, k.ID, Holder{Agent: agent}, ""); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			wantState(t, b, parent.ID, task.WaitingForSubtasks)
		}
	}
	wantState(t, b, parent.ID, task.Closed)

	// A blocked task is nobody's: its claim token goes with its claimant.
	blocker := add(t, b, NewTask{Title: "blocker"})
	blocked := add(t, b, NewTask{Title: "blocked"})
	if _, err := b.Claim(ctx, blocked.ID, "q", "q-1-s"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Block(ctx, blocked.ID, Holder{Agent: "q"}, blocker.ID, ""); err != nil {
		t.Fatal(err)
	}
	if bt := wantState(t, b, blocked.ID, task.Blocked); bt.Claimant != "" || bt.ClaimSession != "" {
		t.Fatalf("blocked task keeps claimant %q, session %q; want both released", bt.Claimant, bt.ClaimSession)
	}
}

func TestOrphansRequeueThenFail(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{})
	tk := add(t, b, NewTask{Title: "fragile", MaxRetries: 1})
	claimed := add(t, b, NewTask{Title: "claimed only"})
	if _, err := b.Claim(ctx, tk.ID, "a", "a-1-s"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Start(ctx, tk.ID, Holder{Agent: "a", Session: "a-1-s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, claimed.ID, "b", "b-1-s"); err != nil {
		t.Fatal(err)
	}
	moved, err := b.Orphan(ctx, "", "swarmd restarted")
	if err != nil || len(moved) != 2 {
		t.Fatalf("orphan = %d, %v", len(moved), err)
	}
	got := wantState(t, b, tk.ID, task.Open)
	if got.Retries != 1 || got.Claimant != "" {
		t.Fatalf("after orphan recovery %+v", got)
	}
	wantState(t, b, claimed.ID, task.Open)
	h, _ := b.History(ctx, tk.ID)
	if last := h[len(h)-1]; last.From != "ORPHANED" || last.TransitionReason != "orphan_recovered" {
		t.Fatalf("last event %+v", last)
	}
	// Again: past max_retries it FAILS instead.
	if _, err := b.Claim(ctx, tk.ID, "a", "a-2-s"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Start(ctx, tk.ID, Holder{Agent: "a", Session: "a-2-s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Orphan(ctx, "a", "agent a stopped"); err != nil {
		t.Fatal(err)
	}
	if got := wantState(t, b, tk.ID, task.Failed); got.Retries != 1 {
		t.Fatalf("retries %d exceed max 1", got.Retries)
	}
}

func TestRequestsTheStateForbids(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{})
	planned := add(t, b, NewTask{Title: "later", Plan: true})
	if got, ok, _ := b.ClaimNext(ctx, "a", "s"); ok {
		t.Fatalf("claimed a PLANNED task: %+v", got)
	}
	if _, err := b.Retry(ctx, planned.ID); !errors.Is(err, ErrState) {
		t.Fatalf("retry of PLANNED = %v", err)
	}
	if _, err := b.Approve(ctx, planned.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Approve(ctx, planned.ID); !errors.Is(err, ErrState) {
		t.Fatalf("second approve = %v", err)
	}
	if _, err := b.Get(ctx, 999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id = %v", err)
	}
	for _, n := range []NewTask{{Title: ""}, {Title: "a\nb"}, {Title: "x", After: []int64{999}}, {Title: "x", Parent: 999}} {
		if _, err := b.Add(ctx, n); err == nil {
			t.Errorf("Add(%+v) accepted", n)
		}
	}
}

// TestConcurrentClaimsOncePerTask: many claimants, each with its own
// connections (as separate processes have), on one file: every task is
// claimed exactly once and no "database is locked" surfaces.
func TestConcurrentClaimsOncePerTask(t *testing.T) {
	const tasks, claimants = 200, 20
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	b, _ := openBoard(t, path, Options{})
	for i := range tasks {
		add(t, b, NewTask{Title: fmt.Sprint("t", i)})
	}
	var mu sync.Mutex
	claimedBy := map[int64]string{}
	var errs []error
	var wg sync.WaitGroup
	for c := range claimants {
		wg.Go(func() {
			db, err := store.Open(ctx, path, store.Options{})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer db.Close()
			mine := New(db, Options{})
			agent := fmt.Sprint("c", c)
			// One claimant claims at most every task: a claim more means
			// claims do not take tasks off the board, and must not loop.
			for i := 0; ; i++ {
				if i > tasks {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s still claiming after %d claims of %d tasks", agent, i, tasks))
					mu.Unlock()
					return
				}
				tk, ok, err := mine.ClaimNext(ctx, agent, fmt.Sprint(agent, "-", i, "-s"))
				if err == nil && ok {
					// Release the agent's hold so it can claim again.
					_, err = mine.Done(ctx, tk.ID, Holder{Agent: agent}, "")
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if ok {
					if prev, dup := claimedBy[tk.ID]; dup {
						errs = append(errs, fmt.Errorf("task %d claimed by %s and %s", tk.ID, prev, agent))
					}
					claimedBy[tk.ID] = agent
				}
				mu.Unlock()
				if err != nil || !ok {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(claimedBy) != tasks {
		t.Fatalf("%d tasks claimed, want %d", len(claimedBy), tasks)
	}
}

// TestReviewLoop: worker DONE waits for the reviewer; FAIL returns the task
// to the same worker with the feedback; PASS closes it; past
// max_iterations it fails.
func TestReviewLoop(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{AutoClose: true,
		ReviewerOf: func(agent string) (string, int) {
			if agent == "alice" {
				return "rita", 2
			}
			return "", 0
		}})
	tk := add(t, b, NewTask{Title: "feature"})
	// claim by alice starts the loop with her config's reviewer.
	got, err := b.Claim(ctx, tk.ID, "alice", "a-1")
	if err != nil || got.ReviewState != "working" || got.Reviewer != "rita" || got.Iteration != 1 || got.Worker != "alice" {
		t.Fatalf("claim = %+v, %v", got, err)
	}
	if _, err := b.Done(ctx, tk.ID, Holder{Agent: "alice"}, "first try"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, tk.ID, task.Done) // not closed: waiting for rita
	if r, ok, _ := b.ReviewFor(ctx, "rita"); !ok || r.ID != tk.ID {
		t.Fatalf("rita has no review request")
	}
	if _, err := b.Verdict(ctx, tk.ID, "bob", "", true, ""); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("bob's verdict = %v", err)
	}
	back, err := b.Verdict(ctx, tk.ID, "rita", "", false, "tests missing")
	if err != nil || back.State != task.Open || back.Assignee != "alice" || back.Result != "tests missing" || back.Iteration != 2 {
		t.Fatalf("after FAIL = %+v, %v", back, err)
	}
	if back.Retries != 0 {
		t.Errorf("a review round used a retry: %d", back.Retries)
	}
	// Only alice may take it back.
	if _, ok, _ := b.ClaimNext(ctx, "bob", "b-1"); ok {
		t.Fatal("bob claimed alice's rework")
	}
	if _, ok, _ := b.ClaimNext(ctx, "alice", "a-2"); !ok {
		t.Fatal("alice cannot claim her rework")
	}
	if _, err := b.Done(ctx, tk.ID, Holder{Agent: "alice"}, "with tests"); err != nil {
		t.Fatal(err)
	}
	closed, err := b.Verdict(ctx, tk.ID, "rita", "", true, "good")
	if err != nil || closed.State != task.Closed || closed.ReviewState != "complete" {
		t.Fatalf("after PASS = %+v, %v", closed, err)
	}
	rs, _ := b.Rounds(ctx, tk.ID)
	if len(rs) != 2 || rs[0].Feedback != "tests missing" || rs[1].Verdict.String() != "pass" {
		t.Fatalf("rounds %+v", rs)
	}

	// max_iterations 2: two FAILs fail the task.
	tk2 := add(t, b, NewTask{Title: "hard", Reviewer: "rita", MaxIterations: 2})
	for i := range 2 {
		if _, err := b.Claim(ctx, tk2.ID, "bob", fmt.Sprint("b-", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Done(ctx, tk2.ID, Holder{Agent: "bob"}, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Verdict(ctx, tk2.ID, "rita", "", false, "no"); err != nil {
			t.Fatal(err)
		}
	}
	if got := wantState(t, b, tk2.ID, task.Failed); got.ReviewFailure != "max_iterations" {
		t.Fatalf("after the last FAIL: %+v", got)
	}
}

// TestMergeHandOff: DONE tasks that need no more review are ready to merge;
// a merge closes one, a rejection sends it back to its worker with why.
func TestMergeHandOff(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{}) // a merge queue closes tasks: no auto-close
	plain := add(t, b, NewTask{Title: "plain"})
	reviewed := add(t, b, NewTask{Title: "reviewed", Reviewer: "rita"})
	for _, id := range []int64{plain.ID, reviewed.ID} {
		if _, err := b.Claim(ctx, id, "alice", fmt.Sprint("a-", id)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Done(ctx, id, Holder{Agent: "alice"}, "done"); err != nil {
			t.Fatal(err)
		}
	}
	ready, err := b.ReadyToMerge(ctx, nil)
	if err != nil || len(ready) != 1 || ready[0].ID != plain.ID || ready[0].Worker != "alice" {
		t.Fatalf("ready = %+v, %v; want only the unreviewed task (the other waits for rita)", ready, err)
	}
	if _, err := b.Verdict(ctx, reviewed.ID, "rita", "", true, "ok"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, reviewed.ID, task.Done) // passed, waiting for the merge
	if ready, _ = b.ReadyToMerge(ctx, func(id int64) bool { return id == plain.ID }); len(ready) != 1 || ready[0].ID != reviewed.ID {
		t.Fatalf("ready = %+v; want the reviewed task, the other skipped", ready)
	}
	if got, err := b.Merged(ctx, plain.ID, "", "0123456789abcdef"); err != nil || got.State != task.Closed {
		t.Fatalf("merged = %+v, %v", got, err)
	}
	back, _, err := b.Rejected(ctx, reviewed.ID, "", "merge conflict", "parser.go", 5)
	if err != nil || back.State != task.Open || back.Assignee != "alice" || !strings.Contains(back.Result, "parser.go") || back.Retries != 0 {
		t.Fatalf("rejected = %+v, %v", back, err)
	}
	if _, _, err := b.Rejected(ctx, reviewed.ID, "", "again", "", 5); !errors.Is(err, ErrState) {
		t.Fatalf("rejecting an OPEN task = %v", err)
	}
}

// A task the merge queue rejects goes back to its worker max times; the
// next rejection fails it (merge_rejected), for good.
func TestMergeRejectionsBounded(t *testing.T) {
	b, _ := openBoard(t, "", Options{})
	ctx := context.Background()
	tk, err := b.Add(ctx, NewTask{Title: "never merges", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	const max = 2
	for round := 1; round <= max; round++ {
		h := Holder{Agent: "alice", Session: fmt.Sprintf("alice-%d-%012x", round, round)}
		if _, err := b.Claim(ctx, tk.ID, "alice", h.Session); err != nil {
			t.Fatalf("round %d: claim: %v", round, err)
		}
		head := fmt.Sprintf("%040d", round)
		if _, err := b.DoneAt(ctx, tk.ID, h, "done", head); err != nil {
			t.Fatalf("round %d: done: %v", round, err)
		}
		// The queue is given the head frozen at this DONE, not an earlier one.
		if ready, err := b.ReadyToMerge(ctx, nil); err != nil || len(ready) != 1 || ready[0].Head != head {
			t.Fatalf("round %d: ready to merge %+v, %v; want head %s", round, ready, err, head)
		}
		got, gaveUp, err := b.Rejected(ctx, tk.ID, head, "the merge queue rejected it: conflict", "a.txt", max)
		if err != nil {
			t.Fatalf("round %d: rejected: %v", round, err)
		}
		if want := round == max; gaveUp != want {
			t.Fatalf("round %d: gave up %v, want %v", round, gaveUp, want)
		}
		if gaveUp && got.State != task.Failed || !gaveUp && got.State != task.Open {
			t.Fatalf("round %d: task %s after the rejection", round, got.State)
		}
	}
	h, err := b.History(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1]; last.To != "FAILED" || !strings.HasPrefix(last.Reason, "merge_rejected: 2 rejections") {
		t.Fatalf("last event %+v, want FAILED with merge_rejected", last)
	}
}

// TestWorkAgreesWithTheReads: each of Work's answers is what ReviewFor,
// Held and HasClaimable say, as a board moves through reviews, claims,
// assignments and dependencies.
func TestWorkAgreesWithTheReads(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{AutoClose: true,
		ReviewerOf: func(agent string) (string, int) {
			if agent == "alice" {
				return "rita", 2
			}
			return "", 0
		}})
	agents := []string{"alice", "bob", "rita"}
	check := func(when string, want map[string]bool) {
		t.Helper()
		for _, a := range agents {
			w, err := b.Work(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			_, review, err1 := b.ReviewFor(ctx, a)
			_, held, err2 := b.Held(ctx, a)
			claim, err3 := b.HasClaimable(ctx, a)
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Fatal(err)
			}
			if w != (Work{Review: review, Held: held, Claimable: claim}) || w.Any() != want[a] {
				t.Errorf("%s: Work(%s) = %+v; review %v, held %v, claimable %v; want anything: %v",
					when, a, w, review, held, claim, want[a])
			}
		}
	}
	check("empty board", nil)
	first := add(t, b, NewTask{Title: "first", Assignee: "alice"})
	later := add(t, b, NewTask{Title: "later", After: []int64{first.ID}})
	check("alice's task, one waiting on it", map[string]bool{"alice": true})
	if _, err := b.Claim(ctx, first.ID, "alice", "a-1"); err != nil {
		t.Fatal(err)
	}
	check("alice holds hers", map[string]bool{"alice": true})
	if _, err := b.Done(ctx, first.ID, Holder{Agent: "alice"}, "done"); err != nil {
		t.Fatal(err)
	}
	check("rita reviews it", map[string]bool{"rita": true})
	if _, err := b.Verdict(ctx, first.ID, "rita", "", true, "good"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, later.ID, task.Open)
	check("closed: the next one is open to all", map[string]bool{"alice": true, "bob": true, "rita": true})
}

// A task whose dependency is not CLOSED is never claimed, even once it is
// OPEN (a requeue out of BLOCKED, an approved plan): not by ClaimNext, not
// counted by HasClaimable or Claimable. Once the dependency closes, it is.
func TestDependentTaskWaitsForItsDependency(t *testing.T) {
	b, _ := openBoard(t, "", Options{AutoClose: true})
	ctx := context.Background()
	first := add(t, b, NewTask{Title: "first", Assignee: "alice"})
	second := add(t, b, NewTask{Title: "second", After: []int64{first.ID}})
	if _, err := b.Requeue(ctx, second.ID); err != nil { // BLOCKED -> OPEN, the dependency still open
		t.Fatal(err)
	}
	wantState(t, b, second.ID, task.Open)
	if tk, ok, err := b.ClaimNext(ctx, "bob", "bob-1-000000000001"); err != nil || ok {
		t.Fatalf("bob claimed %+v (%v) while its dependency %d is OPEN", tk, err, first.ID)
	}
	if has, err := b.HasClaimable(ctx, "bob"); err != nil || has {
		t.Fatalf("HasClaimable(bob) = %v, %v; want false", has, err)
	}
	if anyone, _, err := b.Claimable(ctx, 10); err != nil || anyone != 0 {
		t.Fatalf("Claimable: anyone = %d, %v; want 0", anyone, err)
	}
	h := Holder{Agent: "alice", Session: "alice-1-000000000001"}
	if _, err := b.Claim(ctx, first.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, first.ID, h, "done"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, first.ID, task.Closed)
	if tk, ok, err := b.ClaimNext(ctx, "bob", "bob-2-000000000002"); err != nil || !ok || tk.ID != second.ID {
		t.Fatalf("after its dependency closed: claimed %+v, %v, %v; want task %d", tk, ok, err, second.ID)
	}
}

// The tasks table's column default for max_iterations (a row written
// without one) is the review loop's default, the one owner.
func TestMaxIterationsDefaultHasOneOwner(t *testing.T) {
	_, db := openBoard(t, "", Options{})
	var dflt string
	if err := db.ReadSQL().QueryRowContext(context.Background(),
		`SELECT dflt_value FROM pragma_table_info('tasks') WHERE name = 'max_iterations'`).Scan(&dflt); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(review.DefaultMaxIterations); dflt != want {
		t.Fatalf("tasks.max_iterations DEFAULT %s, review.DefaultMaxIterations %s", dflt, want)
	}
}

// With a merge queue a split task has no change of its own: it is never
// ready to merge (the queue would take its worker's branch as it stands
// then, the worker's next task on it), and it closes once its review
// passed and every subtask is merged, opening what waited for it.
func TestSplitParentClosesWhenItsSubtasksMerge(t *testing.T) {
	for _, reviewed := range []bool{false, true} {
		t.Run(fmt.Sprint("reviewed=", reviewed), func(t *testing.T) {
			ctx := context.Background()
			b, _ := openBoard(t, "", Options{}) // a merge queue closes tasks
			n := NewTask{Title: "the feature"}
			if reviewed {
				n.Reviewer = "rita"
			}
			parent := add(t, b, n)
			after := add(t, b, NewTask{Title: "ship it", After: []int64{parent.ID}})
			h := Holder{Agent: "alice", Session: "alice-1-a"}
			if _, err := b.Claim(ctx, parent.ID, "alice", h.Session); err != nil {
				t.Fatal(err)
			}
			kids, err := b.Split(ctx, parent.ID, h, []string{"one", "two"})
			if err != nil {
				t.Fatal(err)
			}
			for i, k := range kids {
				kh := Holder{Agent: fmt.Sprint("k", i), Session: fmt.Sprintf("k%d-1-s", i)}
				if _, err := b.Claim(ctx, k.ID, kh.Agent, kh.Session); err != nil {
					t.Fatal(err)
				}
				if _, err := b.DoneAt(ctx, k.ID, kh, "done", fmt.Sprintf("%040d", i+1)); err != nil {
					t.Fatal(err)
				}
				if !reviewed {
					continue
				}
				// A subtask has its task's reviewer: it carries the task's work.
				if got := wantState(t, b, k.ID, task.Done); got.Reviewer != "rita" || got.ReviewState != review.Reviewing.String() {
					t.Fatalf("subtask %d: reviewer %q, review %q; want rita's, reviewing", k.ID, got.Reviewer, got.ReviewState)
				}
				if _, err := b.Verdict(ctx, k.ID, "rita", fmt.Sprintf("%040d", i+1), true, "ok"); err != nil {
					t.Fatal(err)
				}
			}
			p := wantState(t, b, parent.ID, task.Done)
			if reviewed {
				if p.ReviewState != review.Reviewing.String() {
					t.Fatalf("parent's review = %q, want reviewing", p.ReviewState)
				}
				if _, err := b.Verdict(ctx, parent.ID, "rita", "", true, "ok"); err != nil {
					t.Fatal(err)
				}
			}
			ready, err := b.ReadyToMerge(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for _, r := range ready {
				ids = append(ids, r.ID)
			}
			if want := []int64{kids[0].ID, kids[1].ID}; !slices.Equal(ids, want) {
				t.Fatalf("ready to merge = %v, want the subtasks %v only", ids, want)
			}
			if _, err := b.Merged(ctx, kids[0].ID, fmt.Sprintf("%040d", 1), "0123456789abcdef"); err != nil {
				t.Fatal(err)
			}
			wantState(t, b, parent.ID, task.Done) // one subtask is not merged yet
			wantState(t, b, after.ID, task.Blocked)
			if _, err := b.Merged(ctx, kids[1].ID, fmt.Sprintf("%040d", 2), "fedcba9876543210"); err != nil {
				t.Fatal(err)
			}
			wantState(t, b, parent.ID, task.Closed)
			wantState(t, b, after.ID, task.Open)
		})
	}
}

// A split task's review that passes after its subtasks merged closes it.
func TestSplitParentClosesAtItsLateVerdict(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{})
	parent := add(t, b, NewTask{Title: "the feature", Reviewer: "rita"})
	h := Holder{Agent: "alice", Session: "alice-1-a"}
	if _, err := b.Claim(ctx, parent.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	kids, err := b.Split(ctx, parent.ID, h, []string{"one"})
	if err != nil {
		t.Fatal(err)
	}
	kh := Holder{Agent: "bob", Session: "bob-1-s"}
	if _, err := b.Claim(ctx, kids[0].ID, kh.Agent, kh.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DoneAt(ctx, kids[0].ID, kh, "done", fmt.Sprintf("%040d", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verdict(ctx, kids[0].ID, "rita", fmt.Sprintf("%040d", 1), true, "ok"); err != nil { // the subtask's review
		t.Fatal(err)
	}
	if _, err := b.Merged(ctx, kids[0].ID, fmt.Sprintf("%040d", 1), "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, parent.ID, task.Done) // waiting for rita
	if _, err := b.Verdict(ctx, parent.ID, "rita", "", true, "ok"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, parent.ID, task.Closed)
}

// The operator's retry of a task its review failed (max_iterations)
// reviews it again, with as many more rounds: its next DONE waits for the
// reviewer. Before, the loop stayed failed and the DONE went unreviewed:
// closed at once without a merge queue, and with one never ready to merge
// (only a passed review is), so what waited for it never opened.
func TestRetryAfterTheReviewFailedReviewsAgain(t *testing.T) {
	for _, autoClose := range []bool{true, false} {
		t.Run(fmt.Sprint("autoclose=", autoClose), func(t *testing.T) {
			ctx := context.Background()
			b, _ := openBoard(t, "", Options{AutoClose: autoClose})
			tk := add(t, b, NewTask{Title: "hard", Reviewer: "rita", MaxIterations: 1})
			h := Holder{Agent: "bob", Session: "bob-1-s"}
			if _, err := b.Claim(ctx, tk.ID, "bob", h.Session); err != nil {
				t.Fatal(err)
			}
			if _, err := b.DoneAt(ctx, tk.ID, h, "done", fmt.Sprintf("%040d", 1)); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Verdict(ctx, tk.ID, "rita", fmt.Sprintf("%040d", 1), false, "no"); err != nil {
				t.Fatal(err)
			}
			wantState(t, b, tk.ID, task.Failed)
			if _, err := b.Retry(ctx, tk.ID); err != nil {
				t.Fatal(err)
			}
			got := wantState(t, b, tk.ID, task.Open)
			if got.ReviewState != review.Working.String() || got.Iteration != 2 || got.MaxIterations != 2 || got.ReviewFailure != "" {
				t.Fatalf("retried: review %q round %d of %d (%q); want working, round 2 of 2", got.ReviewState, got.Iteration, got.MaxIterations, got.ReviewFailure)
			}
			h = Holder{Agent: "bob", Session: "bob-2-s"}
			if _, err := b.Claim(ctx, tk.ID, "bob", h.Session); err != nil {
				t.Fatal(err)
			}
			if _, err := b.DoneAt(ctx, tk.ID, h, "done again", fmt.Sprintf("%040d", 2)); err != nil {
				t.Fatal(err)
			}
			if got := wantState(t, b, tk.ID, task.Done); got.ReviewState != review.Reviewing.String() {
				t.Fatalf("the retried task's DONE: review %q, want reviewing", got.ReviewState)
			}
			if ready, err := b.ReadyToMerge(ctx, nil); err != nil || len(ready) != 0 {
				t.Fatalf("ready to merge before the review = %+v, %v; want none", ready, err)
			}
			if _, err := b.Verdict(ctx, tk.ID, "rita", fmt.Sprintf("%040d", 2), true, "ok"); err != nil {
				t.Fatal(err)
			}
			if autoClose {
				wantState(t, b, tk.ID, task.Closed)
				return
			}
			if ready, err := b.ReadyToMerge(ctx, nil); err != nil || len(ready) != 1 || ready[0].ID != tk.ID {
				t.Fatalf("ready to merge after the PASS = %+v, %v; want the task", ready, err)
			}
		})
	}
}

// A split task whose review FAILs goes back to its worker, who changes it
// as the reviewer asked and reports it done at a frozen head: that change
// is its own, and the merge queue merges it (once every subtask is
// merged) instead of the task closing with it unmerged.
func TestSplitParentReworkIsMerged(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{FrozenHead: true})
	parent := add(t, b, NewTask{Title: "the feature", Reviewer: "rita"})
	after := add(t, b, NewTask{Title: "ship it", After: []int64{parent.ID}})
	h := Holder{Agent: "alice", Session: "alice-1-a"}
	if _, err := b.Claim(ctx, parent.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	kids, err := b.Split(ctx, parent.ID, h, []string{"one"})
	if err != nil {
		t.Fatal(err)
	}
	kh := Holder{Agent: "bob", Session: "bob-1-s"}
	if _, err := b.Claim(ctx, kids[0].ID, kh.Agent, kh.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DoneAt(ctx, kids[0].ID, kh, "done", fmt.Sprintf("%040d", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verdict(ctx, kids[0].ID, "rita", fmt.Sprintf("%040d", 1), true, "ok"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, parent.ID, task.Done)
	if _, err := b.Verdict(ctx, parent.ID, "rita", "", false, "the parts are not wired together"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, parent.ID, task.Open)
	h = Holder{Agent: "alice", Session: "alice-2-a"}
	if _, err := b.Claim(ctx, parent.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	rework := fmt.Sprintf("%040d", 2)
	if _, err := b.DoneAt(ctx, parent.ID, h, "wired", rework); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verdict(ctx, parent.ID, "rita", rework, true, "ok now"); err != nil {
		t.Fatal(err)
	}
	ready := func() []Ready {
		t.Helper()
		r, err := b.ReadyToMerge(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// The subtask first: the rework builds on it.
	if r := ready(); len(r) != 1 || r[0].ID != kids[0].ID {
		t.Fatalf("ready to merge = %+v, want the subtask %d only", r, kids[0].ID)
	}
	if _, err := b.Merged(ctx, kids[0].ID, fmt.Sprintf("%040d", 1), "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, parent.ID, task.Done) // its rework is not merged yet
	wantState(t, b, after.ID, task.Blocked)
	if r := ready(); len(r) != 1 || r[0].ID != parent.ID || r[0].Head != rework {
		t.Fatalf("ready to merge = %+v, want task %d at %s", r, parent.ID, rework)
	}
	if _, err := b.Merged(ctx, parent.ID, rework, "fedcba9876543210"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, after.ID, task.Open)
}

// GaveUpSince tells a settlement whose COMMIT's answer was lost whether its
// verdict failed the task for good. A FAIL that sent the task back to its
// worker did not, though the task is FAILED when it asks: its worker
// failed it since.
func TestGaveUpSinceIsTheVerdictsOwnFailure(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{FrozenHead: true})
	tk := add(t, b, NewTask{Title: "the feature", Reviewer: "rita", MaxIterations: 3})
	h := Holder{Agent: "alice", Session: "alice-1-a"}
	if _, err := b.Claim(ctx, tk.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DoneAt(ctx, tk.ID, h, "done", fmt.Sprintf("%040d", 1)); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	if _, err := b.Verdict(ctx, tk.ID, "rita", fmt.Sprintf("%040d", 1), false, "not yet"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.GaveUpSince(ctx, tk.ID, "rita", since); err != nil || ok {
		t.Fatalf("gave up after a FAIL that sent the task back = %v, %v; want not", ok, err)
	}
	h = Holder{Agent: "alice", Session: "alice-2-a"}
	if _, err := b.Claim(ctx, tk.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Fail(ctx, tk.ID, h, "cannot be done"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, tk.ID, task.Failed)
	if _, ok, err := b.GaveUpSince(ctx, tk.ID, "rita", since); err != nil || ok {
		t.Fatalf("gave up once the worker failed the task = %v, %v; want not: rita's FAIL sent it back", ok, err)
	}
}

// A claim of a task by its id waits for its dependencies as a claim of the
// best one does: an approved PLANNED task is OPEN before the tasks it
// depends on are CLOSED, and claimed then its work would start on a base
// without theirs.
func TestClaimByIDWaitsForDependencies(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{AutoClose: true})
	first := add(t, b, NewTask{Title: "the parser"})
	then := add(t, b, NewTask{Title: "its tests", After: []int64{first.ID}, Plan: true})
	if _, err := b.Approve(ctx, then.ID); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, then.ID, task.Open)
	_, err := b.Claim(ctx, then.ID, "alice", "alice-1")
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), fmt.Sprintf("waits for task %d (OPEN)", first.ID)) {
		t.Fatalf("claim of a task whose dependency is OPEN = %v; want ErrState naming it", err)
	}
	wantState(t, b, then.ID, task.Open)

	h := Holder{Agent: "bob", Session: "bob-1"}
	if _, err := b.Claim(ctx, first.ID, h.Agent, h.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Start(ctx, first.ID, h); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, first.ID, h, "parsed"); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, first.ID, task.Closed)
	if got, err := b.Claim(ctx, then.ID, "alice", "alice-1"); err != nil || got.State != task.Claimed {
		t.Fatalf("claim once the dependency is CLOSED = %+v, %v", got, err)
	}
}
