package taskboard

import (
	"context"
	"errors"
	"testing"
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
	if _, err := b.Verdict(ctx, tk.ID, "rita", true, "looks right\nPASS"); err != nil {
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
