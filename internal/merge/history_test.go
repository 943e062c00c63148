package merge

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// diffNames lists the paths git diff names for args, sorted.
func diffNames(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	out := gitT(t, dir, append([]string{"diff", "--name-only"}, args...)...)
	names := strings.Fields(out)
	slices.Sort(names)
	return names
}

// mainMerges makes main hold a merge of branch's tip while main moved on
// meanwhile (a merge with two parents): the queue's, with the merge
// strategy, or else a person's merge.
func (e *env) mainMerges(q *Queue, task int64, agent, branch string) {
	e.t.Helper()
	if q.opts.Strategy == StrategyMerge {
		if _, err := q.Enqueue(context.Background(), task, agent, branch, ""); err != nil {
			e.t.Fatal(err)
		}
		step(e.t, q, OutcomeMerged)
		return
	}
	gitT(e.t, e.repo, "checkout", "-q", "main")
	gitT(e.t, e.repo, "merge", "-q", "--no-ff", "--no-edit", branch)
	gitT(e.t, e.repo, "checkout", "-q", "--detach")
}

// A head with several merge bases with the target is refused before any
// gate, whatever the strategy: its reviewer was shown `git diff
// main...HEAD`, against the one base git picks, and merge-tree merges
// against a virtual base of them all. The probe's history: bob's task
// (SECURITY_CHECK) went into main as a merge of T1 and H1; alice's line
// starts there, and she puts her branch on a commit with parents T1 and H1
// whose tree is the base the review diff uses plus DOCS. Her reviewer sees
// DOCS alone; merged, it would also drop bob's or main's work. Once she
// merges main into it, the review diff shows all of it, and it merges as
// shown.
func TestCrissCrossHeadRejected(t *testing.T) {
	for _, strategy := range []string{StrategyMerge, StrategySquash, StrategyRebase} {
		t.Run(strategy, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			opts := e.options(`true`)
			opts.Strategy = strategy
			q := e.open(opts)
			bob := e.worker("bob")
			t1 := commitFile(t, bob, "SECURITY_CHECK", "check\n", "bob: security check")
			e.commitMain(map[string]string{"OTHER": "other\n"})
			h1 := e.main()
			e.mainMerges(q, 1, "bob", "swarm/bob/work")
			if ps := strings.Fields(gitT(t, e.repo, "log", "-1", "--format=%P", "main")); len(ps) != 2 {
				t.Fatalf("main's tip has parents %q, want two", ps)
			}

			alice := e.worker("alice") // her line starts at main's merge
			// Which of the two bases git picks for the review diff depends
			// on the commits' dates (ties within a second are common here):
			// the commit is built on each until the review diff is taken
			// from the one it was built on. Its date is main's, the same
			// for both, so the clock ticking between the two cannot change
			// git's pick under the test.
			date := "GIT_COMMITTER_DATE=" + gitT(t, e.repo, "log", "-1", "--format=%cd", "--date=raw", "main")
			var w string
			for _, pick := range []string{t1, h1} {
				gitT(t, alice, "reset", "-q", "--hard", pick)
				writeFile(t, filepath.Join(alice, "DOCS"), "docs\n")
				gitT(t, alice, "add", "DOCS")
				tree := gitT(t, alice, "write-tree")
				w = gitEnvT(t, alice, []string{date, strings.Replace(date, "COMMITTER", "AUTHOR", 1)},
					"commit-tree", "-p", t1, "-p", h1, "-m", "alice: docs", tree)
				if slices.Equal(diffNames(t, e.repo, "main..."+w), []string{"DOCS"}) {
					break
				}
			}
			gitT(t, alice, "reset", "-q", "--hard", w)
			if got := diffNames(t, e.repo, "main..."+w); !slices.Equal(got, []string{"DOCS"}) {
				t.Fatalf("the review diff names %q, want DOCS alone (the probe's history)", got)
			}
			merged := strings.Fields(gitT(t, e.repo, "merge-tree", "--write-tree", "main", w))[0]
			if got := diffNames(t, e.repo, "main", merged); slices.Equal(got, []string{"DOCS"}) {
				t.Fatalf("merge-tree adds DOCS alone: not the probe's history")
			}

			before := e.main()
			_, _, gatesBefore := e.metrics.snapshot()
			if _, err := q.Enqueue(ctx, 2, "alice", "swarm/alice/work", w); err != nil {
				t.Fatal(err)
			}
			step(t, q, OutcomeRejected)
			if e.main() != before {
				t.Fatalf("main moved to a change that was not reviewed: %s -> %s", before, e.main())
			}
			calls := e.cb.all()
			c := calls[len(calls)-1]
			if c.task != 2 || c.kind != KindHistory || !strings.Contains(c.detail, "2 merge bases with main") ||
				!strings.Contains(c.detail, "`git merge main`") {
				t.Fatalf("rejection = %+v; want %s, naming the 2 merge bases and what to do", c, KindHistory)
			}
			if _, results, gates := e.metrics.snapshot(); results["history"] != 1 || gates != gatesBefore {
				t.Errorf("results %v, gate runs %d then %d; want one history rejection and no gate run for it", results, gatesBefore, gates)
			}

			// The way out: merge main into it. The review diff now shows
			// what merging it does, and that is what main gets.
			gitT(t, alice, "merge", "-q", "--no-edit", "main")
			if strategy == StrategyRebase {
				// Its history is now two merges, nothing a rebase replays:
				// one commit with the whole change.
				gitT(t, alice, "reset", "-q", "--soft", gitT(t, alice, "merge-base", "main", "HEAD"))
				gitT(t, alice, "commit", "-q", "-m", "alice: docs, as one commit")
			}
			head := gitT(t, alice, "rev-parse", "HEAD")
			reviewed := diffNames(t, e.repo, "main..."+head)
			if len(reviewed) < 2 {
				t.Fatalf("after the merge of main the review diff names %q; want DOCS and what it drops", reviewed)
			}
			if _, err := q.Enqueue(ctx, 2, "alice", "swarm/alice/work", head); err != nil {
				t.Fatal(err)
			}
			step(t, q, OutcomeMerged)
			if got := diffNames(t, e.repo, before, "main"); !slices.Equal(got, reviewed) {
				t.Errorf("main changed %q, the reviewer was shown %q", got, reviewed)
			}
		})
	}
}

// With the rebase strategy, a merge commit's own changes are not replayed
// (git rebase drops merges and replays the side's commits): the probe's
// branch merged a side branch that adds feature.txt and EVIL, leaving EVIL
// out of the merge. Its reviewer saw feature.txt alone; replayed, main
// would get EVIL. It is refused before any gate, naming EVIL and the
// merge; made one commit, as the rejection says, it merges as reviewed.
func TestRebaseDroppingAMergesOwnChangeRejected(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	opts := e.options(`true`)
	opts.Strategy = StrategyRebase
	q := e.open(opts)
	alice := e.worker("alice")
	gitT(t, alice, "checkout", "-q", "-b", "wip")
	commitFile(t, alice, "feature.txt", "feature\n", "alice: feature")
	commitFile(t, alice, "EVIL", "evil\n", "alice: evil")
	gitT(t, alice, "checkout", "-q", "swarm/alice/work")
	gitT(t, alice, "merge", "-q", "--no-ff", "--no-commit", "wip")
	gitT(t, alice, "rm", "-q", "-f", "EVIL")
	gitT(t, alice, "commit", "-q", "-m", "alice: merge wip")
	evilMerge := gitT(t, alice, "rev-parse", "HEAD")
	e.commitMain(map[string]string{"OTHER": "other\n"})
	if got := diffNames(t, e.repo, "main..."+evilMerge); !slices.Equal(got, []string{"feature.txt"}) {
		t.Fatalf("the review diff names %q, want feature.txt alone (the probe's history)", got)
	}

	before := e.main()
	if _, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", evilMerge); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeRejected)
	if e.main() != before {
		t.Fatalf("main moved to a replay that was not reviewed: %s -> %s", before, e.main())
	}
	c := e.cb.waitCalls(t, 1)[0]
	for _, want := range []string{"1 file: EVIL", short(evilMerge), "git reset --soft"} {
		if c.task != 1 || c.kind != KindHistory || !strings.Contains(c.detail, want) {
			t.Fatalf("rejection = %+v; want %s with %q", c, KindHistory, want)
		}
	}
	if _, results, gates := e.metrics.snapshot(); results["history"] != 1 || gates != 0 {
		t.Errorf("results %v, gate runs %d; want one history rejection and no gate run", results, gates)
	}

	// The way out the rejection gives: one commit with the whole change.
	gitT(t, alice, "reset", "-q", "--soft", gitT(t, alice, "merge-base", "main", "HEAD"))
	gitT(t, alice, "commit", "-q", "-m", "alice: feature")
	head := gitT(t, alice, "rev-parse", "HEAD")
	if _, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", head); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged)
	if got := diffNames(t, e.repo, before, "main"); !slices.Equal(got, []string{"feature.txt"}) {
		t.Errorf("main changed %q, want feature.txt alone", got)
	}
}

// Ordinary histories merge, by every strategy: a line with one merge base,
// a line that starts at a merge commit of main, and a line that merged
// main in once (for rebase: replayed without its merge, to the same tree).
func TestOrdinaryHistoriesMerge(t *testing.T) {
	for _, strategy := range []string{StrategyMerge, StrategySquash, StrategyRebase} {
		t.Run(strategy, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			opts := e.options(`true`)
			opts.Strategy = strategy
			q := e.open(opts)
			// One merge base; main's tip becomes a merge of two parents.
			bob := e.worker("bob")
			commitFile(t, bob, "bob.txt", "bob\n", "bob: work")
			e.commitMain(map[string]string{"OTHER": "other\n"})
			e.mainMerges(q, 1, "bob", "swarm/bob/work")

			// Alice's line starts at that merge; carol's before it.
			alice, carol := e.worker("alice"), e.worker("carol")
			gitT(t, carol, "reset", "-q", "--hard", "main~1")
			commitFile(t, alice, "alice.txt", "alice\n", "alice: work")
			commitFile(t, carol, "carol.txt", "carol\n", "carol: work")
			if _, err := q.Enqueue(ctx, 2, "alice", "swarm/alice/work", ""); err != nil {
				t.Fatal(err)
			}
			step(t, q, OutcomeMerged)

			// Carol merges main in once, then works on.
			gitT(t, carol, "merge", "-q", "--no-edit", "main")
			commitFile(t, carol, "carol2.txt", "more\n", "carol: more")
			before := e.main()
			reviewed := diffNames(t, e.repo, "main...swarm/carol/work")
			if _, err := q.Enqueue(ctx, 3, "carol", "swarm/carol/work", ""); err != nil {
				t.Fatal(err)
			}
			step(t, q, OutcomeMerged)
			if got := diffNames(t, e.repo, before, "main"); !slices.Equal(got, reviewed) || !slices.Equal(got, []string{"carol.txt", "carol2.txt"}) {
				t.Errorf("main changed %q, the reviewer was shown %q; want carol's two files", got, reviewed)
			}
			for _, f := range []string{"bob.txt", "OTHER", "alice.txt", "carol.txt", "carol2.txt"} {
				e.fileAt("main", f)
			}
			if _, results, _ := e.metrics.snapshot(); results["history"] != 0 {
				t.Errorf("results %v, want no history rejection", results)
			}
		})
	}
}
