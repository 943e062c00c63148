package merge

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// A task's line that carries a merge the queue made and the target does
// not hold (a leader cut off before it recorded the merge, which the swarm
// made again; a target rewound since) would bring that task's work in a
// second time: it is rejected before any gate runs, naming the merge. A
// line that merged the target in (its merges held by the target) merges.
func TestLineCarryingAMergeTheTargetLacksRejected(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	q := e.open(e.options(`true`))
	alice, bob := e.worker("alice"), e.worker("bob")

	// Task 7: alice's, merged by the queue.
	commitFile(t, alice, "a.txt", "alice\n", "alice: work")
	if _, err := q.Enqueue(ctx, 7, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged)
	// Bob merges the target into his line, then works: it merges.
	gitT(t, bob, "merge", "-q", "--no-edit", "main")
	commitFile(t, bob, "b.txt", "bob\n", "bob: work")
	if _, err := q.Enqueue(ctx, 8, "bob", "swarm/bob/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged)

	// Carol's line starts on a merge of task 9 that the target lacks.
	carol := e.worker("carol")
	side := commitFile(t, carol, "n.txt", "task 9's work\n", "nina: work")
	gitT(t, carol, "reset", "-q", "--hard", "HEAD~1")
	gitT(t, carol, "merge", "-q", "--no-ff", "-m", "Merge task 9 from swarm/task/9\n\nSwarmd-Task: 9", side)
	lost := gitT(t, carol, "rev-parse", "HEAD")
	commitFile(t, carol, "c.txt", "carol\n", "carol: work")
	before := e.main()
	if _, err := q.Enqueue(ctx, 10, "carol", "swarm/carol/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeRejected)
	if e.main() != before {
		t.Fatalf("main moved to a line carrying a merge it lacks: %s -> %s", before, e.main())
	}
	calls := e.cb.waitCalls(t, 3)
	c := calls[2]
	if c.task != 10 || c.kind != KindCarried || !strings.Contains(c.detail, short(lost)+" (task 9)") {
		t.Fatalf("rejection = %+v; want %s naming %s (task 9)", c, KindCarried, short(lost))
	}
	if _, results, gates := e.metrics.snapshot(); results["carried"] != 1 || gates != 2 {
		t.Errorf("results %v, gate runs %d; want one carried and no gate run for it", results, gates)
	}
}

// TestCarriedMergesNewestFirst: the carried merges are named the newest
// first, a descendant before its ancestors, whatever the committer dates
// say (leaders on machines whose clocks differ): the worker is told to
// replay what the first one named does not hold. Here carol's line started
// on a merge of task 8 (a clock ahead), and she merged in a target that had
// task 9's merge on it since.
func TestCarriedMergesNewestFirst(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	q := e.open(e.options(`true`))
	carol := e.worker("carol")
	at := func(date string) { t.Setenv("GIT_COMMITTER_DATE", date) }
	at("2030-01-01T00:00:00Z")
	gitT(t, carol, "commit", "-q", "--allow-empty", "-m", "Merge task 8\n\nSwarmd-Task: 8")
	older := gitT(t, carol, "rev-parse", "HEAD")
	at("2020-01-01T00:00:00Z")
	gitT(t, carol, "commit", "-q", "--allow-empty", "-m", "Merge task 9\n\nSwarmd-Task: 9")
	newer := gitT(t, carol, "rev-parse", "HEAD")
	gitT(t, carol, "reset", "-q", "--hard", older)
	at("2025-01-01T00:00:00Z")
	commitFile(t, carol, "c.txt", "carol\n", "carol: work")
	at("2020-01-01T00:00:00Z")
	gitT(t, carol, "merge", "-q", "--no-ff", "-m", "carol: merge the target", newer)
	check, err := q.repo.checkChange(ctx, e.main(), gitT(t, carol, "rev-parse", "HEAD"))
	if err != nil {
		t.Fatal(err)
	}
	got := check.carried
	if want := []string{short(newer) + " (task 9)", short(older) + " (task 8)"}; !slices.Equal(got, want) {
		t.Fatalf("carried %q, want %q", got, want)
	}
}
