package merge

import (
	"context"
	"slices"
	"testing"
)

// The watcher's look and the queue's own moves of the target, in each
// order that matters: every move someone else made is reported once (by a
// claim or as found), and the queue's own never.
func TestOwnedLookAndQueueMoves(t *testing.T) {
	at := func(tip string) func() (string, error) { return func() (string, error) { return tip, nil } }
	sight := func(t *testing.T, o *owned, tip string) Sighting {
		t.Helper()
		s, err := o.sight(at(tip))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	start := func() *owned { o := &owned{}; o.set("R"); return o }

	t.Run("the queue builds on a move sighted and not yet claimed", func(t *testing.T) {
		o := start()
		s := sight(t, o, "F") // an agent moved R to F
		if s.Own || s.Last != "R" {
			t.Fatalf("sighting %+v, want F not the queue's, from R", s)
		}
		o.advancing("M") // the queue merges onto F meanwhile
		o.moved("F", "M")
		if o.claim(s) {
			t.Fatal("a stale sighting claimed: the queue's merge M would be reported as someone else's")
		}
		if f := o.takeFound(); !slices.Equal(f, []Move{{From: "R", To: "F"}}) {
			t.Fatalf("found %v, want the move R to F once", f)
		}
		if s := sight(t, o, "M"); !s.Own {
			t.Fatalf("the queue's merge M sighted as someone else's: %+v", s)
		}
		if f := o.takeFound(); len(f) != 0 {
			t.Fatalf("found %v again", f)
		}
	})
	t.Run("the queue begins a move while a look claims", func(t *testing.T) {
		o := start()
		s := sight(t, o, "F")
		o.advancing("M") // built on R: its compare-and-swap fails
		if o.claim(s) {
			t.Fatal("claimed while the queue was moving the target: its pending move would be forgotten")
		}
		o.done()
		s = sight(t, o, "F")
		if s.Own || !o.claim(s) {
			t.Fatalf("sighting %+v not claimed once the queue's move failed", s)
		}
		if f := o.takeFound(); len(f) != 0 {
			t.Fatalf("found %v: the claim reported it", f)
		}
	})
	t.Run("a claim before the queue builds on the move", func(t *testing.T) {
		o := start()
		s := sight(t, o, "F")
		if !o.claim(s) {
			t.Fatal("not claimed")
		}
		o.advancing("M")
		if s := sight(t, o, "M"); !s.Own { // moved, not yet set
			t.Fatalf("the queue's move in progress sighted as someone else's: %+v", s)
		}
		o.moved("F", "M")
		if f := o.takeFound(); len(f) != 0 {
			t.Fatalf("found %v: claimed already", f)
		}
		if s := sight(t, o, "M"); !s.Own || s.Last != "M" {
			t.Fatalf("sighting %+v, want M the queue's", s)
		}
	})
}

// A move of the target the daemon makes for the queue (a follow of the
// remote's target: Taking, the ref moved, then Took) is the queue's from
// Taking on: a look between the move and Took (a session's end) does not
// report it as someone else's. One Taking began and the daemon did not
// make (NotTaken) is anyone's again.
func TestTakingIsTheQueuesMove(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	q := e.open(e.options("true"))
	old := e.main()
	commit := func(parent, msg string) string {
		return gitT(t, e.repo, "commit-tree", "-p", parent, "-m", msg, parent+"^{tree}")
	}
	sight := func() Sighting {
		t.Helper()
		s, err := q.Sight(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	theirs := commit(old, "the remote's")
	if err := q.Taking(ctx, old, theirs); err != nil {
		t.Fatal(err)
	}
	gitT(t, e.repo, "update-ref", "refs/heads/main", theirs)
	if s := sight(); !s.Own {
		t.Fatalf("the target taken, before Took, sighted as someone else's move: %+v", s)
	}
	if err := q.Took(ctx, old, theirs); err != nil {
		t.Fatal(err)
	}
	if s := sight(); !s.Own || len(q.Found()) != 0 {
		t.Fatalf("after Took: %+v, found %v; want the queue's, nothing found", s, q.Found())
	}

	next := commit(theirs, "not taken")
	if err := q.Taking(ctx, theirs, next); err != nil {
		t.Fatal(err)
	}
	q.NotTaken()
	gitT(t, e.repo, "update-ref", "refs/heads/main", next) // someone else, later
	if s := sight(); s.Own {
		t.Fatalf("a move to the tip a dropped Taking named sighted as the queue's: %+v", s)
	}
}
