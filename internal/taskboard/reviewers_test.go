package taskboard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/task"
)

// Reviewers review: an agent that only reviews claims no unassigned task
// (by ClaimNext or by id), though one assigned to it it may; and nobody,
// reviewer or worker, claims a task it is to review.
func TestReviewersReviewAndNobodyReviewsTheirOwnWork(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{ReviewOnly: func(a string) bool { return a == "rita" }})
	open := add(t, b, NewTask{Title: "anyone's"})
	if ok, err := b.HasClaimable(ctx, "rita"); err != nil || ok {
		t.Fatalf("HasClaimable(rita) = %v, %v; want false: she only reviews", ok, err)
	}
	if tk, ok, err := b.ClaimNext(ctx, "rita", "rita-1-a"); err != nil || ok {
		t.Fatalf("ClaimNext(rita) = %+v, %v, %v; want nothing", tk, ok, err)
	}
	if _, err := b.Claim(ctx, open.ID, "rita", "rita-1-a"); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Claim of an unassigned task by a reviewer = %v, want ErrNotHolder", err)
	}
	if w, err := b.Work(ctx, "rita"); err != nil || w.Any() {
		t.Fatalf("Work(rita) = %+v, %v; want none", w, err)
	}
	mine := add(t, b, NewTask{Title: "for rita", Assignee: "rita"})
	if tk, ok, err := b.ClaimNext(ctx, "rita", "rita-2-b"); err != nil || !ok || tk.ID != mine.ID {
		t.Fatalf("ClaimNext(rita) = %+v, %v, %v; want the task assigned to her", tk, ok, err)
	}

	// A task alice is to review: alice never claims it, bob does.
	own := add(t, b, NewTask{Title: "reviewed by alice", Reviewer: "alice", Priority: 9})
	if _, err := b.Claim(ctx, own.ID, "alice", "alice-1-a"); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Claim by its own reviewer = %v, want ErrNotHolder", err)
	}
	tk, ok, err := b.ClaimNext(ctx, "alice", "alice-1-a")
	if err != nil || !ok || tk.ID != open.ID {
		t.Fatalf("ClaimNext(alice) = %+v, %v, %v; want task %d (not %d, hers to review, though it ranks first)", tk, ok, err, open.ID, own.ID)
	}
	if tk, ok, err := b.ClaimNext(ctx, "bob", "bob-1-a"); err != nil || !ok || tk.ID != own.ID {
		t.Fatalf("ClaimNext(bob) = %+v, %v, %v; want task %d", tk, ok, err, own.ID)
	}
}

// Every verdict is a line of the task's history: a PASS that moves no
// state (the merge queue closes the task once merged) too, naming the
// reviewer and the round.
func TestVerdictsAreInTheHistory(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{}) // no AutoClose: a merge queue closes tasks
	tk := add(t, b, NewTask{Title: "reviewed", Reviewer: "rita"})
	if _, err := b.Claim(ctx, tk.ID, "alice", "alice-1-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, tk.ID, Holder{Agent: "alice", Session: "alice-1-a"}, "did it"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verdict(ctx, tk.ID, "rita", "", true, "looks right\nPASS"); err != nil {
		t.Fatal(err)
	}
	evs, err := b.History(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.TransitionReason != eventReviewPass || last.Actor != "agent:rita" || last.From != "DONE" || last.To != "DONE" ||
		last.Reason != "review PASS by rita (round 1): looks right …" {
		t.Fatalf("last history line after a PASS = %+v", last)
	}
}

// Passed work sent back by the merge queue is reviewed again: the loop is
// reopened at the next iteration, by a rejection and by the operator's
// retry of a task the queue gave up on.
func TestPassedWorkSentBackIsReviewedAgain(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{}) // no AutoClose: a merge queue closes tasks
	tk := add(t, b, NewTask{Title: "reviewed", Reviewer: "rita"})
	alice := Holder{Agent: "alice", Session: "alice-1-a"}
	passed := func(session string, iteration int) {
		t.Helper()
		alice.Session = session
		if _, err := b.Claim(ctx, tk.ID, "alice", session); err != nil {
			t.Fatal(err)
		}
		got, err := b.DoneAt(ctx, tk.ID, alice, "did it", "0123456789abcdef0123456789abcdef01234567")
		if err != nil || got.ReviewState != "reviewing" || got.Iteration != iteration {
			t.Fatalf("the DONE of iteration %d: %s at %d, %v; want reviewing", iteration, got.ReviewState, got.Iteration, err)
		}
		if got, err := b.Verdict(ctx, tk.ID, "rita", "0123456789abcdef0123456789abcdef01234567", true, "PASS"); err != nil || got.ReviewState != "complete" {
			t.Fatalf("PASS: %+v, %v", got, err)
		}
	}
	passed("alice-1-a", 1)
	got, gaveUp, err := b.Rejected(ctx, tk.ID, "0123456789abcdef0123456789abcdef01234567", "gate_failed", "red", 2)
	if err != nil || gaveUp || got.ReviewState != "working" || got.Iteration != 2 {
		t.Fatalf("rejected: %s at %d, gave up %v, %v; want working at 2", got.ReviewState, got.Iteration, gaveUp, err)
	}
	passed("alice-2-a", 2)
	if got, gaveUp, err = b.Rejected(ctx, tk.ID, "0123456789abcdef0123456789abcdef01234567", "gate_failed", "red again", 1); err != nil || !gaveUp || got.State.String() != "FAILED" {
		t.Fatalf("the last rejection: %+v, %v, %v", got, gaveUp, err)
	}
	if got, err = b.Retry(ctx, tk.ID); err != nil || got.ReviewState != "working" || got.Iteration != 3 {
		t.Fatalf("retried: %s at %d, %v; want working at 3", got.ReviewState, got.Iteration, err)
	}
	if rounds, err := b.Rounds(ctx, tk.ID); err != nil || len(rounds) != 2 {
		t.Errorf("rounds: %d, %v; want both PASSes kept", len(rounds), err)
	}
}

// A worker with a reviewer splits its task and reports the subtask done:
// the subtask waits for its reviewer, and so does the parent, which is
// not closed (its dependent not opened) on a DONE nobody reviewed. Once
// the subtask passes, the parent's DONE goes to its reviewer.
func TestASplitParentIsReviewed(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{AutoClose: true,
		ReviewerOf: func(a string) (string, int) {
			if a == "alice" {
				return "rita", 3
			}
			return "", 0
		},
		ReviewOnly: func(a string) bool { return a == "rita" }})
	parent := add(t, b, NewTask{Title: "the feature", Assignee: "alice"})
	after := add(t, b, NewTask{Title: "ship it", After: []int64{parent.ID}})
	h := Holder{Agent: "alice", Session: "alice-1-a"}
	if _, err := b.Claim(ctx, parent.ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	kids, err := b.Split(ctx, parent.ID, h, []string{"part"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, kids[0].ID, "alice", h.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, kids[0].ID, h, "done"); err != nil {
		t.Fatal(err)
	}
	state := func(id int64) (string, string) {
		t.Helper()
		tk, err := b.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return tk.StateName, tk.ReviewState
	}
	if st, rs := state(parent.ID); st != "WAITING_FOR_SUBTASKS" {
		t.Fatalf("the parent is %s (review %q) while its subtask waits for review", st, rs)
	}
	if _, err := b.Verdict(ctx, kids[0].ID, "rita", "", true, "PASS"); err != nil {
		t.Fatal(err)
	}
	if st, rs := state(parent.ID); st != "DONE" || rs != "reviewing" {
		t.Fatalf("the parent once its subtask passed: %s, review %q; want DONE and reviewing", st, rs)
	}
	if st, _ := state(after.ID); st == "OPEN" {
		t.Error("the parent's dependent opened before the parent's review")
	}
	if _, err := b.Verdict(ctx, parent.ID, "rita", "", true, "PASS"); err != nil {
		t.Fatal(err)
	}
	if st, _ := state(parent.ID); st != "CLOSED" {
		t.Errorf("the parent after its PASS: %s, want CLOSED", st)
	}
	if st, _ := state(after.ID); st != "OPEN" {
		t.Errorf("the parent's dependent after its PASS: %s, want OPEN", st)
	}
}

// A task that fails or is cancelled under its review loop fails the loop
// too (seed 002's rows into failed), for the reason that ended it: the
// worker's FAIL, a cancel, an agent error (its retries used up).
func TestTheLoopFailsWithItsTask(t *testing.T) {
	ctx := context.Background()
	b, _ := openBoard(t, "", Options{})
	wantLoop := func(t *testing.T, id int64, state review.State, failure review.FailureReason) Task {
		t.Helper()
		got, err := b.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.ReviewState != state.String() || got.ReviewFailure != string(failure) {
			t.Fatalf("task %d (%s): review %q (%q), want %s (%q)", id, got.State, got.ReviewState, got.ReviewFailure, state, failure)
		}
		return got
	}
	t.Run("worker FAIL", func(t *testing.T) {
		tk := add(t, b, NewTask{Title: "fail it", Reviewer: "rita"})
		h := Holder{Agent: "bob", Session: "bob-1-s"}
		if _, err := b.Claim(ctx, tk.ID, "bob", h.Session); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Fail(ctx, tk.ID, h, "cannot"); err != nil {
			t.Fatal(err)
		}
		wantLoop(t, tk.ID, review.Failed, review.ReasonFailSignal)
		// Retried, the loop works again, its next DONE reviewed.
		if _, err := b.Retry(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		if got := wantLoop(t, tk.ID, review.Working, ""); got.Iteration != 2 {
			t.Fatalf("retried loop at iteration %d, want 2", got.Iteration)
		}
	})
	t.Run("cancel before the worker started", func(t *testing.T) {
		tk := add(t, b, NewTask{Title: "never started", Reviewer: "rita"})
		wantLoop(t, tk.ID, review.Init, "")
		if _, err := b.Cancel(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		wantLoop(t, tk.ID, review.Failed, review.ReasonCancelled)
	})
	t.Run("retries used up", func(t *testing.T) {
		tk := add(t, b, NewTask{Title: "fragile", Reviewer: "rita", MaxRetries: 1})
		for i, want := range []task.State{task.Open, task.Failed} {
			h := Holder{Agent: "bob", Session: fmt.Sprintf("bob-3%d-s", i)}
			if _, err := b.Claim(ctx, tk.ID, "bob", h.Session); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Start(ctx, tk.ID, h); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Orphan(ctx, "bob", "agent bob stopped"); err != nil {
				t.Fatal(err)
			}
			wantState(t, b, tk.ID, want)
			if want == task.Open {
				wantLoop(t, tk.ID, review.Working, "") // a retry left: whoever claims it works on
			}
		}
		wantLoop(t, tk.ID, review.Failed, review.ReasonAgentError)
	})
}

// A reviewed worker got unreviewed code merged by adding a task for its
// reviewer, which reviews no work of its own and did what the task asked
// (cherry-pick the worker's commit). A task an agent adds now gets the
// adder's reviewer wherever nobody else would review it, and one for the
// adder's own reviewer is refused.
func TestAnAgentsTaskIsReviewedWhoeverDoesIt(t *testing.T) {
	ctx := context.Background()
	reviewers := map[string]string{"mallory": "rev", "bob": "rita"} // rev, rita and lead: nobody reviews them
	b, _ := openBoard(t, "", Options{AutoClose: true,
		ReviewerOf: func(a string) (string, int) {
			if r := reviewers[a]; r != "" {
				return r, 2
			}
			return "", 0
		},
		ReviewOnly: func(a string) bool { return a == "rev" || a == "rita" }})

	_, err := b.Add(ctx, NewTask{Title: "apply the hotfix", Assignee: "rev", CreatedBy: "agent:mallory"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "rev reviews your work") {
		t.Errorf("mallory's task for her reviewer: %v; want refused", err)
	}
	for _, c := range []struct {
		n                NewTask
		reviewer         string
		maxIterationsSet bool
	}{
		{NewTask{Title: "for lead", Assignee: "lead", CreatedBy: "agent:mallory"}, "rev", true},
		{NewTask{Title: "for anyone", CreatedBy: "agent:mallory"}, "rev", true},
		{NewTask{Title: "for bob", Assignee: "bob", CreatedBy: "agent:mallory"}, "", false}, // bob's reviewer reviews it at his claim
		{NewTask{Title: "lead's", Assignee: "rev", CreatedBy: "agent:lead"}, "", false},     // nobody reviews lead's own work either
		{NewTask{Title: "the operator's", Assignee: "rev"}, "", false},
	} {
		tk := add(t, b, c.n)
		if tk.Reviewer != c.reviewer || (c.maxIterationsSet && tk.MaxIterations != 2) {
			t.Errorf("%q: reviewer %q (max %d), want %q", c.n.Title, tk.Reviewer, tk.MaxIterations, c.reviewer)
		}
	}
	// lead does mallory's task, and rev must pass it.
	tasks, err := b.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var forLead Task
	for _, tk := range tasks {
		if tk.Title == "for lead" {
			forLead = tk
		}
	}
	h := Holder{Agent: "lead", Session: "lead-1-a"}
	if _, err := b.Claim(ctx, forLead.ID, "lead", h.Session); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Done(ctx, forLead.ID, h, "applied"); err != nil || got.State == task.Closed || got.Reviewer != "rev" {
		t.Errorf("lead's DONE on mallory's task: %s for %q, %v; want it waiting for rev's verdict", got.State, got.Reviewer, err)
	}
}
