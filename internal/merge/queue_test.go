package merge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Two workers change the same line: the first merges, the second is
// rejected with the conflicting path, and merges once its worker has merged
// the target and resolved the conflict.
func TestConflictRejectedThenMergedAfterFix(t *testing.T) {
	e := newEnv(t)
	q := e.open(e.options(`grep -q one f.txt || grep -q ONE f.txt`))
	alice, bob := e.worker("alice"), e.worker("bob")
	commitFile(t, alice, "f.txt", "ONE\ntwo\nthree\n", "alice: shout one")
	commitFile(t, bob, "f.txt", "uno\ntwo\nthree\n", "bob: one in Spanish")
	commitFile(t, bob, "bob.txt", "bob\n", "bob: his own file")

	if _, err := q.Enqueue(context.Background(), 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(context.Background(), 2, "bob", "swarm/bob/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged)
	if depth, _, _ := e.metrics.snapshot(); depth != 1 {
		t.Errorf("depth after two enqueues and a merge = %d, want 1", depth)
	}
	afterAlice := e.main()
	if got := e.fileAt(afterAlice, "f.txt"); got != "ONE\ntwo\nthree" {
		t.Fatalf("main's f.txt after alice = %q", got)
	}
	step(t, q, OutcomeRejected)
	if e.main() != afterAlice {
		t.Fatalf("a rejected candidate moved main")
	}
	calls := e.cb.all()
	if len(calls) != 2 || !calls[0].merged || calls[0].commit != afterAlice {
		t.Fatalf("callbacks = %+v, want alice merged at %s first", calls, afterAlice)
	}
	if c := calls[1]; c.task != 2 || c.merged || c.kind != KindConflict || c.detail != "f.txt" {
		t.Fatalf("bob's rejection = %+v, want conflict with detail f.txt", c)
	}
	last, err := q.Store().Latest(context.Background(), 2)
	if err != nil || !slices.Equal(last.Paths(), []string{"f.txt"}) || last.State != Rejected {
		t.Fatalf("bob's entry = %+v (%v), want rejected with paths [f.txt]", last, err)
	}

	// Bob merges main, resolves, and reports DONE again.
	if _, err := gitOut(bob, "merge", "-q", "main"); err == nil {
		t.Fatal("bob's merge of main did not conflict")
	}
	writeFile(t, filepath.Join(bob, "f.txt"), "ONE uno\ntwo\nthree\n")
	gitT(t, bob, "commit", "-qam", "bob: resolve")
	if _, err := q.Enqueue(context.Background(), 2, "bob", "swarm/bob/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged)
	final := e.main()
	if got := e.fileAt(final, "f.txt"); got != "ONE uno\ntwo\nthree" {
		t.Errorf("main's f.txt = %q", got)
	}
	if got := e.fileAt(final, "bob.txt"); got != "bob" {
		t.Errorf("main's bob.txt = %q", got)
	}
	if !isAncestor(t, e.repo, afterAlice, final) {
		t.Errorf("alice's merge %s is not in main %s", afterAlice, final)
	}
	parents := strings.Fields(gitT(t, e.repo, "rev-list", "--parents", "-n1", final))
	if len(parents) != 3 || parents[1] != afterAlice || parents[2] != gitT(t, bob, "rev-parse", "HEAD") {
		t.Errorf("merge commit parents = %v, want main before and bob's head", parents[1:])
	}
	_, results, gates := e.metrics.snapshot()
	if results["merged"] != 2 || results["conflict"] != 1 || gates != 2 {
		t.Errorf("metrics: results %v, gate runs %d; want 2 merged, 1 conflict, 2 gate runs", results, gates)
	}
	step(t, q, OutcomeIdle)
}

func isAncestor(t *testing.T, dir, a, b string) bool {
	t.Helper()
	_, err := gitOut(dir, "merge-base", "--is-ancestor", a, b)
	return err == nil
}

// A red gate rejects the candidate with the tail of its output; the target
// stays where it was, and the gate's log reads like a session's.
func TestRedGateRejectedTargetUnchanged(t *testing.T) {
	e := newEnv(t)
	q := e.open(e.options(`echo checking`, `if grep -q broken f.txt; then echo "f.txt is broken" >&2; exit 3; fi`, `echo never reached`))
	alice := e.worker("alice")
	commitFile(t, alice, "f.txt", "broken\n", "alice: break it")
	before := e.main()
	if _, err := q.Enqueue(context.Background(), 7, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeRejected)
	if e.main() != before {
		t.Fatalf("main moved on a red gate: %s -> %s", before, e.main())
	}
	calls := e.cb.waitCalls(t, 1)
	c := calls[0]
	if c.task != 7 || c.kind != KindGateFailed || !strings.Contains(c.detail, "f.txt is broken") ||
		!strings.Contains(c.detail, "gate command failed with exit status 3") || strings.Contains(c.detail, "never reached") {
		t.Fatalf("rejection = %+v", c)
	}
	ent, err := q.Store().Latest(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := e.logs.Open(LogName, ent.GateSeq)
	if err != nil {
		t.Fatalf("gate log of run %d: %v", ent.GateSeq, err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	log := string(b)
	for _, want := range []string{"=== swarmd session merge-1 seq 1 started", "$ echo checking\nchecking\n",
		"f.txt is broken", "outcome gate_failed: exit status 3 ==="} {
		if !strings.Contains(log, want) {
			t.Errorf("gate log lacks %q:\n%s", want, log)
		}
	}
	if _, results, _ := e.metrics.snapshot(); results["gate_failed"] != 1 {
		t.Errorf("results = %v, want one gate_failed", results)
	}
}

// A commit pushed to the target while the gate runs is kept: the candidate
// is rebuilt on it and the gate runs again.
func TestTargetMovedDuringGateIsKept(t *testing.T) {
	e := newEnv(t)
	flags := t.TempDir()
	// The first run waits for the test's "go"; every run counts itself.
	gate := `echo run >> ` + flags + `/runs; if [ ! -f ` + flags + `/go ]; then touch ` + flags + `/started; ` +
		`while [ ! -f ` + flags + `/go ]; do sleep 0.01; done; fi`
	q := e.open(e.options(gate))
	alice := e.worker("alice")
	commitFile(t, alice, "alice.txt", "alice\n", "alice: add her file")
	if _, err := q.Enqueue(context.Background(), 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out Outcome
		err error
	}
	done := make(chan result, 1)
	go func() { out, err := q.Step(context.Background()); done <- result{out, err} }()
	waitForFile(t, filepath.Join(flags, "started"))

	// A person pushes to main meanwhile (main is checked out nowhere).
	human := filepath.Join(t.TempDir(), "human")
	gitT(t, e.repo, "worktree", "add", "-q", "--detach", human, "main")
	pushed := commitFile(t, human, "human.txt", "mine\n", "human: a push during the gate")
	gitT(t, e.repo, "update-ref", "refs/heads/main", pushed)
	writeFile(t, filepath.Join(flags, "go"), "")

	if r := <-done; r.err != nil || r.out != OutcomeRebuild {
		t.Fatalf("Step during a push = %s, %v; want rebuild", r.out, r.err)
	}
	if e.main() != pushed {
		t.Fatalf("main = %s, want the pushed commit %s untouched", e.main(), pushed)
	}
	step(t, q, OutcomeMerged)
	final := e.main()
	if !isAncestor(t, e.repo, pushed, final) {
		t.Fatalf("the pushed commit %s is not in main %s", pushed, final)
	}
	if e.fileAt(final, "human.txt") != "mine" || e.fileAt(final, "alice.txt") != "alice" {
		t.Errorf("main lacks the push or alice's work")
	}
	if runs := strings.Count(readFile(t, filepath.Join(flags, "runs")), "run"); runs != 2 {
		t.Errorf("gate ran %d times, want 2 (once more on the rebuilt candidate)", runs)
	}
	ent, _ := q.Store().Latest(context.Background(), 1)
	if ent.Attempts != 2 || ent.Target != pushed || ent.Candidate != final {
		t.Errorf("entry = %+v, want 2 attempts, built on %s, merged at %s", ent, pushed, final)
	}
	if evs := strings.Join(e.events(), "\n"); !strings.Contains(evs, "testing --requeued--> queued: rebuild:") {
		t.Errorf("no rebuild event:\n%s", evs)
	}
}

// A person who rewinds main in their own checkout while the gate runs
// (git reset --hard HEAD~1: the last merge was a mistake) moved the target
// as a push does: the candidate is rebuilt on the rewound main and gated
// again. The queue's fast-forward of that checkout took it from the
// rewound commit to the candidate, bringing back what the person dropped.
func TestRewindInCheckoutDuringGateIsKept(t *testing.T) {
	e := newEnv(t)
	gitT(t, e.repo, "checkout", "-q", "main") // the person's own checkout
	flags := t.TempDir()
	// Task 2's first run waits for the test's "go"; every run counts itself.
	gate := `echo run >> ` + flags + `/runs; if [ "$SWARM_MERGE_TASK" = 2 ] && [ ! -f ` + flags + `/go ]; then touch ` + flags +
		`/started; while [ ! -f ` + flags + `/go ]; do sleep 0.01; done; fi`
	q := e.open(e.options(gate))
	e.queueFiles(q, 1, "alice", map[string]string{"alice.txt": "alice\n"})
	e.queueFiles(q, 2, "bob", map[string]string{"bob.txt": "bob\n"}) // from main before alice's merge
	step(t, q, OutcomeMerged)
	dropped := e.main()
	type result struct {
		out Outcome
		err error
	}
	done := make(chan result, 1)
	go func() { out, err := q.Step(context.Background()); done <- result{out, err} }()
	waitForFile(t, filepath.Join(flags, "started"))
	gitT(t, e.repo, "reset", "-q", "--hard", "HEAD~1")
	rewound := e.main()
	writeFile(t, filepath.Join(flags, "go"), "")

	if r := <-done; r.err != nil || r.out != OutcomeRebuild {
		t.Fatalf("Step after a rewind = %s, %v; want rebuild", r.out, r.err)
	}
	if e.main() != rewound {
		t.Fatalf("main = %s, want the rewound %s untouched", short(e.main()), short(rewound))
	}
	step(t, q, OutcomeMerged)
	final := e.main()
	if isAncestor(t, e.repo, dropped, final) {
		t.Errorf("main %s holds %s again, which the person dropped", short(final), short(dropped))
	}
	if !isAncestor(t, e.repo, rewound, final) || e.fileAt(final, "bob.txt") != "bob" {
		t.Errorf("main %s is not bob's work on the rewound %s", short(final), short(rewound))
	}
	if runs := strings.Count(readFile(t, filepath.Join(flags, "runs")), "run"); runs != 3 {
		t.Errorf("gate ran %d times, want 3 (alice, bob, bob again on the rewound main)", runs)
	}
}

// While main is checked out with local changes the queue waits, says why,
// and touches nothing; once the checkout is clean the merge goes in and the
// checkout's files follow.
func TestDirtyCheckoutWaitsAndIsNeverModified(t *testing.T) {
	e := newEnv(t)
	gitT(t, e.repo, "checkout", "-q", "main") // the person's own checkout
	q := e.open(e.options(`true`))
	alice := e.worker("alice")
	commitFile(t, alice, "alice.txt", "alice\n", "alice: add her file")
	commitFile(t, alice, "f.txt", "one\ntwo\nthree\nfour\n", "alice: one more line")
	writeFile(t, filepath.Join(e.repo, "f.txt"), "my local edit\n")
	before := e.main()
	if _, err := q.Enqueue(context.Background(), 3, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}

	step(t, q, OutcomeWaiting)
	step(t, q, OutcomeWaiting) // still, and the reason is not logged twice
	st, err := q.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Waiting, "main is checked out at "+e.repo+" with local changes (1 file: f.txt)") {
		t.Fatalf("Status.Waiting = %q", st.Waiting)
	}
	if len(st.Queued) != 1 || st.Queued[0].Task != 3 {
		t.Fatalf("queued = %+v, want task 3 still queued", st.Queued)
	}
	if got := readFile(t, filepath.Join(e.repo, "f.txt")); got != "my local edit\n" || e.main() != before {
		t.Fatalf("the dirty checkout was modified: f.txt %q, main %s", got, e.main())
	}
	if _, err := os.Stat(filepath.Join(e.repo, "alice.txt")); err == nil {
		t.Fatal("alice.txt appeared in the dirty checkout")
	}
	if evs := e.events(); strings.Count(strings.Join(evs, "\n"), "--waiting-->") != 1 {
		t.Fatalf("want one waiting event, got:\n%s", strings.Join(evs, "\n"))
	}

	gitT(t, e.repo, "stash", "-q")
	step(t, q, OutcomeMerged)
	if got := readFile(t, filepath.Join(e.repo, "alice.txt")); got != "alice\n" {
		t.Errorf("the clean checkout's files were not updated: alice.txt %q", got)
	}
	if head := gitT(t, e.repo, "rev-parse", "HEAD"); head != e.main() || gitT(t, e.repo, "symbolic-ref", "HEAD") != "refs/heads/main" {
		t.Errorf("the checkout is not on the new main")
	}
	if st, _ := q.Status(context.Background()); st.Waiting != "" {
		t.Errorf("Waiting = %q after the merge", st.Waiting)
	}
	if evs := strings.Join(e.events(), "\n"); !strings.Contains(evs, "waiting --unblocked--> running") {
		t.Errorf("no unblocked event:\n%s", evs)
	}
}

// A merge in progress in the checkout holding the target makes the queue
// wait, as local changes do.
func TestOperationInProgressWaits(t *testing.T) {
	e := newEnv(t)
	gitT(t, e.repo, "checkout", "-q", "main")
	q := e.open(e.options())
	alice := e.worker("alice")
	commitFile(t, alice, "alice.txt", "alice\n", "alice")
	writeFile(t, filepath.Join(e.repo, ".git", "MERGE_HEAD"), e.main()+"\n")
	if _, err := q.Enqueue(context.Background(), 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeWaiting)
	if st, _ := q.Status(context.Background()); !strings.Contains(st.Waiting, "with a merge in progress") {
		t.Fatalf("Waiting = %q", st.Waiting)
	}
	os.Remove(filepath.Join(e.repo, ".git", "MERGE_HEAD"))
	step(t, q, OutcomeMerged)
}

// A gate past the timeout is killed with everything it started, setsid
// children included, and the candidate is rejected as a timeout.
func TestGateTimeoutKillsWholeTree(t *testing.T) {
	e := newEnv(t)
	flags := t.TempDir()
	opts := e.options(`sleep 300 & setsid sleep 300 & touch ` + flags + `/started; wait`)
	opts.Timeout = 500 * time.Millisecond
	q := e.open(opts)
	alice := e.worker("alice")
	commitFile(t, alice, "alice.txt", "alice\n", "alice")
	before := e.main()
	if _, err := q.Enqueue(context.Background(), 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeRejected)
	waitForFile(t, filepath.Join(flags, "started"))
	if pids := marked(e.mark); len(pids) > 0 {
		t.Fatalf("gate processes left after the timeout: %v", pids)
	}
	c := e.cb.waitCalls(t, 1)[0]
	if c.kind != KindTimeout || !strings.Contains(c.detail, "longer than 500ms") {
		t.Fatalf("rejection = %+v, want a timeout", c)
	}
	if e.main() != before {
		t.Fatal("main moved on a timed-out gate")
	}
}

// Pause is stored and seen by the loop even when another process (a Store
// on its own connection, as `swarmd merge pause` is) sets it.
func TestPauseResume(t *testing.T) {
	e := newEnv(t)
	q := e.open(e.options())
	alice := e.worker("alice")
	commitFile(t, alice, "alice.txt", "alice\n", "alice")
	if _, err := q.Enqueue(context.Background(), 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	cli := NewStore(e.db, nil)
	if err := cli.Pause(context.Background(), "operator"); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomePaused)
	st, _ := q.Status(context.Background())
	if !st.Paused || st.PausedBy != "operator" || len(st.Queued) != 1 {
		t.Fatalf("status = %+v, want paused by operator with one queued", st)
	}
	if err := q.Pause(context.Background()); err != nil { // already paused: no second event
		t.Fatal(err)
	}
	if err := cli.Resume(context.Background(), "operator"); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged)
	evs := strings.Join(e.events(), "\n")
	if strings.Count(evs, "--paused-->") != 1 || strings.Count(evs, "--resumed-->") != 1 {
		t.Errorf("want one paused and one resumed event:\n%s", evs)
	}
}

// The loop runs as a service: woken by Enqueue (no polling: the recheck is
// an hour), it merges and reports; Stop during a gate kills it and leaves
// the entry first in line; Start and Stop are idempotent.
func TestServiceWakesOnEnqueueAndStopKillsGate(t *testing.T) {
	e := newEnv(t)
	flags := t.TempDir()
	opts := e.options(`if [ -f ` + flags + `/hang ]; then touch ` + flags + `/started; sleep 300; fi`)
	opts.Recheck = time.Hour
	q := e.open(opts)
	q.Start(context.Background())
	q.Start(context.Background())
	alice := e.worker("alice")
	commitFile(t, alice, "alice.txt", "alice\n", "alice")
	if _, err := q.Enqueue(context.Background(), 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	if c := e.cb.waitCalls(t, 1)[0]; !c.merged || c.task != 1 {
		t.Fatalf("callback = %+v", c)
	}

	writeFile(t, filepath.Join(flags, "hang"), "")
	bob := e.worker("bob")
	commitFile(t, bob, "bob.txt", "bob\n", "bob")
	if _, err := q.Enqueue(context.Background(), 2, "bob", "swarm/bob/work", ""); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, filepath.Join(flags, "started"))
	q.Stop()
	q.Stop()
	if pids := marked(e.mark); len(pids) > 0 {
		t.Fatalf("gate processes left after Stop: %v", pids)
	}
	st, _ := q.Status(context.Background())
	if st.Current != nil || len(st.Queued) != 1 || st.Queued[0].Task != 2 {
		t.Fatalf("after Stop: %+v, want task 2 queued (not under test)", st)
	}
}

// A daemon killed at any point resumes from swarm.db: an entry left under
// test is tested again; one whose change is in the target already (killed
// after advancing it) is recorded as merged; a result whose callback
// failed is reported by the next daemon.
func TestRestartResumesFromDB(t *testing.T) {
	e := newEnv(t)
	alice, bob, carol := e.worker("alice"), e.worker("bob"), e.worker("carol")
	commitFile(t, alice, "alice.txt", "alice\n", "alice")
	commitFile(t, bob, "bob.txt", "bob\n", "bob")
	commitFile(t, carol, "carol.txt", "carol\n", "carol")
	q1 := e.open(e.options())
	for i, w := range []string{"alice", "bob", "carol"} {
		if _, err := q1.Enqueue(context.Background(), int64(i+1), w, "swarm/"+w+"/work", ""); err != nil {
			t.Fatal(err)
		}
	}
	// The first daemon merges alice but her callback fails, then it builds
	// bob's candidate, advances main, and dies before recording it.
	e.cb.setFail(errors.New("board busy"))
	step(t, q1, OutcomeMerged)
	e.cb.setFail(nil)
	bobEntry, _ := q1.Store().Latest(context.Background(), 2)
	target, tree, err := q1.repo.tip(context.Background(), "main")
	if err != nil {
		t.Fatal(err)
	}
	cand, err := q1.build(context.Background(), &bobEntry, target, tree)
	if err != nil {
		t.Fatal(err)
	}
	if err := q1.store.begin(context.Background(), &bobEntry, target, cand.commit, 0); err != nil {
		t.Fatal(err)
	}
	gitT(t, e.repo, "update-ref", "refs/heads/main", cand.commit, target)
	q1.Stop()

	q2 := e.open(e.options())
	if st, _ := q2.Status(context.Background()); st.Current == nil || st.Current.Task != 2 || len(st.Queued) != 1 {
		t.Fatalf("status after the crash = %+v, want bob under test and carol queued", st)
	}
	step(t, q2, OutcomeMerged) // bob: the target holds it already
	if e.main() != cand.commit {
		t.Fatalf("main = %s, want bob's candidate %s kept", e.main(), cand.commit)
	}
	step(t, q2, OutcomeMerged) // carol
	step(t, q2, OutcomeIdle)
	calls := e.cb.all()
	var tasks []int64
	for _, c := range calls {
		if !c.merged {
			t.Errorf("callback %+v, want merged", c)
		}
		tasks = append(tasks, c.task)
	}
	if !slices.Equal(tasks, []int64{1, 2, 3}) {
		t.Fatalf("callbacks for tasks %v, want 1, 2, 3 (alice's failed one reported again, once)", tasks)
	}
	if calls[1].commit != cand.commit {
		t.Errorf("bob reported at %s, want %s", calls[1].commit, cand.commit)
	}
	if evs := strings.Join(e.events(), "\n"); !strings.Contains(evs, "testing --requeued--> queued: resumed") {
		t.Errorf("no resume event:\n%s", evs)
	}
}

func TestStrategies(t *testing.T) {
	for _, strategy := range []string{StrategySquash, StrategyRebase} {
		t.Run(strategy, func(t *testing.T) {
			e := newEnv(t)
			opts := e.options(`test -f alice.txt`)
			opts.Strategy = strategy
			q := e.open(opts)
			alice := e.worker("alice")
			commitFile(t, alice, "alice.txt", "alice\n", "alice: first")
			head := commitFile(t, alice, "alice2.txt", "more\n", "alice: second")
			// main moves on, so the result is not a fast-forward.
			human := filepath.Join(t.TempDir(), "human")
			gitT(t, e.repo, "worktree", "add", "-q", "--detach", human, "main")
			base := commitFile(t, human, "human.txt", "mine\n", "human")
			gitT(t, e.repo, "update-ref", "refs/heads/main", base)
			if _, err := q.Enqueue(context.Background(), 5, "alice", "swarm/alice/work", ""); err != nil {
				t.Fatal(err)
			}
			step(t, q, OutcomeMerged)
			final := e.main()
			log := strings.Split(gitT(t, e.repo, "log", "--format=%s|%an", "--first-parent", base+".."+final), "\n")
			switch strategy {
			case StrategySquash:
				if len(log) != 1 || !strings.HasPrefix(log[0], "Task 5 from swarm/alice/work|Test") {
					t.Errorf("squash: commits %q, want one authored by alice's author", log)
				}
				if msg := gitT(t, e.repo, "log", "-1", "--format=%B", final); !strings.Contains(msg, "* alice: second\n* alice: first") {
					t.Errorf("squash message lacks the subjects:\n%s", msg)
				}
			case StrategyRebase:
				if !slices.Equal(log, []string{"alice: second|Test", "alice: first|Test"}) {
					t.Errorf("rebase: commits %q, want alice's two replayed", log)
				}
				if c := gitT(t, e.repo, "log", "-1", "--format=%cn", final); c != DefaultName {
					t.Errorf("rebased commits' committer = %q, want %q", c, DefaultName)
				}
			}
			if isAncestor(t, e.repo, head, final) {
				t.Errorf("%s: alice's own commit is in main; want new commits", strategy)
			}
			if e.fileAt(final, "alice2.txt") != "more" || e.fileAt(final, "human.txt") != "mine" {
				t.Errorf("%s: main lacks a file", strategy)
			}
		})
	}
}

// A rebase that conflicts is rejected with the path and leaves no rebase
// behind in the integration worktree.
func TestRebaseConflict(t *testing.T) {
	e := newEnv(t)
	opts := e.options()
	opts.Strategy = StrategyRebase
	q := e.open(opts)
	alice, bob := e.worker("alice"), e.worker("bob")
	commitFile(t, alice, "f.txt", "ONE\n", "alice")
	commitFile(t, bob, "f.txt", "uno\n", "bob")
	for i, w := range []string{"alice", "bob"} {
		if _, err := q.Enqueue(context.Background(), int64(i+1), w, "swarm/"+w+"/work", ""); err != nil {
			t.Fatal(err)
		}
	}
	step(t, q, OutcomeMerged)
	step(t, q, OutcomeRejected)
	if c := e.cb.waitCalls(t, 2)[1]; c.kind != KindConflict || c.detail != "f.txt" {
		t.Fatalf("rejection = %+v", c)
	}
	if _, err := os.Stat(filepath.Join(e.repo, ".git", "worktrees", ".merge", "rebase-merge")); err == nil {
		t.Error("a rebase is left in progress in the integration worktree")
	}
}

// A branch with nothing new is merged without a commit.
func TestNothingToMerge(t *testing.T) {
	e := newEnv(t)
	q := e.open(e.options(`false`)) // the gate must not even run
	e.worker("alice")
	before := e.main()
	if _, err := q.Enqueue(context.Background(), 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged)
	if e.main() != before {
		t.Fatal("main moved for a branch with no change")
	}
	if c := e.cb.waitCalls(t, 1)[0]; !c.merged || c.commit != before {
		t.Fatalf("callback = %+v, want merged at main", c)
	}
}

func TestEnqueueAndRetryRules(t *testing.T) {
	e := newEnv(t)
	q := e.open(e.options(`false`))
	alice := e.worker("alice")
	first := commitFile(t, alice, "alice.txt", "alice\n", "alice")
	ctx := context.Background()
	a, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", "")
	if err != nil {
		t.Fatal(err)
	}
	again, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", "")
	if err != nil || again.ID != a.ID {
		t.Fatalf("enqueueing the same head again = %+v, %v; want the same entry", again, err)
	}
	second := commitFile(t, alice, "alice.txt", "alice 2\n", "alice again")
	moved, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", second)
	if err != nil || moved.ID != a.ID || moved.Head != second {
		t.Fatalf("a new head while queued = %+v, %v; want the entry updated in place to %s (was %s)", moved, err, second, first)
	}
	if _, err := q.Retry(ctx, 1); !errors.Is(err, ErrState) {
		t.Fatalf("Retry of a queued task: %v, want ErrState", err)
	}
	if _, err := q.Retry(ctx, 99); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Retry of an unknown task: %v, want ErrNotFound", err)
	}
	if _, err := q.Enqueue(ctx, 2, "bob", "swarm/bob/work", ""); !errors.Is(err, ErrNoCommit) {
		t.Fatalf("Enqueue of a missing branch: %v, want ErrNoCommit", err)
	}
	step(t, q, OutcomeRejected)
	r, err := q.Retry(ctx, 1)
	if err != nil || r.ID == a.ID || r.State != Queued || r.Head != second {
		t.Fatalf("Retry = %+v, %v; want a new queued entry at %s", r, err, second)
	}
	es, err := q.List(ctx, 0)
	if err != nil || len(es) != 2 || es[0].State != Rejected || es[1].State != Queued {
		t.Fatalf("List = %+v, %v", es, err)
	}
}

func TestOpenRefusesAMissingTarget(t *testing.T) {
	e := newEnv(t)
	opts := e.options()
	opts.Into = "develop"
	_, err := Open(context.Background(), opts)
	if !errors.Is(err, ErrNoTarget) || !strings.Contains(err.Error(), "merge.into develop") {
		t.Fatalf("Open with a missing target: %v", err)
	}
}

// A task whose merge result has not reached the board yet (its callback
// failed, or has not run) is still DONE there; queueing the same head
// again gets the finished entry, not a second merge of it.
func TestEnqueueOfAnUnreportedResult(t *testing.T) {
	e := newEnv(t)
	q := e.open(e.options(`true`))
	alice := e.worker("alice")
	head := commitFile(t, alice, "alice.txt", "alice\n", "alice")
	ctx := context.Background()
	e.cb.setFail(errors.New("board unavailable"))
	first, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", "")
	if err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged)
	again, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", "")
	if err != nil || again.ID != first.ID || again.State != Merged {
		t.Fatalf("enqueue of the merged, unreported head = %+v, %v; want entry %d, merged", again, err, first.ID)
	}
	if es, err := q.List(ctx, 0); err != nil || len(es) != 1 {
		t.Fatalf("List = %+v, %v; want the one entry", es, err)
	}
	// Reported, the same head is still that entry: a reader that saw the
	// task ready just before it closed must not queue its merge again.
	e.cb.setFail(nil)
	step(t, q, OutcomeIdle)
	e.cb.waitCalls(t, 1)
	if late, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", ""); err != nil || late.ID != first.ID || late.State != Merged {
		t.Fatalf("enqueue of the merged, reported head = %+v, %v; want entry %d, merged", late, err, first.ID)
	}
	// A new head is a new entry.
	second := commitFile(t, alice, "alice.txt", "alice 2\n", "alice again")
	next, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", second)
	if err != nil || next.ID == first.ID || next.Head != second || second == head {
		t.Fatalf("enqueue of a new head after the report = %+v, %v", next, err)
	}
}

// A rebase left in progress in the queue's worktree (the daemon stopped
// while it replayed a branch, or the last gate started one there) is not
// the next task's doing: git refused to start the next rebase, and the
// queue rejected that task as a conflict. It is cleared, and the task
// merges.
func TestRebaseLeftInProgressRejectsNobody(t *testing.T) {
	t.Run("stopped during a rebase", func(t *testing.T) {
		e := newEnv(t)
		opts := e.options(`true`)
		opts.Strategy = StrategyRebase
		q := e.open(opts)
		// A branch long enough that the stop comes while it is replayed.
		e.worker("long")
		var b strings.Builder
		for i := 1; i <= 150; i++ {
			fmt.Fprintf(&b, "commit refs/heads/swarm/long/work\ncommitter T <t@example.com> %d +0000\ndata 2\nc\n", 1700000000+i)
			if i == 1 {
				b.WriteString("from refs/heads/swarm/long/work^0\n")
			}
			fmt.Fprintf(&b, "M 100644 inline long%d.txt\ndata %d\n%d\n\n", i, len(strconv.Itoa(i))+1, i)
		}
		imp := exec.Command("git", "-C", e.repo, "fast-import", "--quiet")
		imp.Stdin = strings.NewReader(b.String())
		if out, err := imp.CombinedOutput(); err != nil {
			t.Fatalf("fast-import: %v: %s", err, out)
		}
		e.commitMain(map[string]string{"m.txt": "m\n"}) // so that the branch is replayed
		if _, err := q.Enqueue(context.Background(), 1, "long", "swarm/long/work", ""); err != nil {
			t.Fatal(err)
		}
		q.Start(context.Background())
		var admin string
		for deadline := time.Now().Add(waitLimit); ; time.Sleep(time.Millisecond) {
			if dir, ok := q.repo.adminOf(q.wt); ok {
				if _, err := os.Stat(filepath.Join(dir, "rebase-merge")); err == nil {
					admin = dir
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no rebase in the integration worktree within %s", waitLimit)
			}
		}
		q.Stop()
		if _, err := os.Stat(filepath.Join(admin, "rebase-merge")); err != nil {
			t.Fatalf("the rebase ended before the stop (%v): the test needs a longer branch", err)
		}

		q2 := e.open(opts) // the restarted daemon's
		step(t, q2, OutcomeMerged)
		if c := e.cb.waitCalls(t, 1)[0]; !c.merged {
			t.Fatalf("task 1 %s after a stop during its rebase: %s", c.kind, firstLines(c.detail, 2))
		}
		if e.fileAt("main", "long150.txt") != "150" {
			t.Error("main lacks the branch's last file")
		}
	})
	t.Run("left by a gate", func(t *testing.T) {
		e := newEnv(t)
		// Task 1's tests leave a rebase stopped at a conflict in their checkout.
		opts := e.options(`if [ -e rebase-test ]; then git checkout -q -b t HEAD && echo x > f.txt && git commit -qam x && ` +
			`git checkout -q HEAD~1 && echo y > f.txt && git commit -qam y && git rebase -q t >/dev/null 2>&1; fi; true`)
		opts.Strategy = StrategyRebase
		q := e.open(opts)
		e.queueFiles(q, 1, "alice", map[string]string{"rebase-test": ""})
		e.queueFiles(q, 2, "bob", map[string]string{"bob.txt": "bob\n"})
		drain(t, q)
		for _, c := range e.cb.waitCalls(t, 2) {
			if !c.merged {
				t.Errorf("task %d %s after the gate before it left a rebase: %s", c.task, c.kind, firstLines(c.detail, 2))
			}
		}
	})
}

// A task queued with no head of its own (the operator reported it done;
// a split parent) is its worker's branch as it stood when it was first
// queued. The daemon queues every ready task again at each change of the
// database; the entry followed the branch, so what the worker committed
// next (on the next task it took, whose line its branch then carries)
// merged as this task, unreviewed.
func TestHeadlessTaskIsReadOnce(t *testing.T) {
	e := newEnv(t)
	q := e.open(e.options(`true`))
	alice := e.worker("alice")
	head := commitFile(t, alice, "parent.txt", "parent\n", "alice: the parent's work")
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	later := commitFile(t, alice, "next.txt", "not reviewed\n", "alice: her next task")
	again, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", "") // the feeder, at the commit's change
	if err != nil || again.Head != head {
		t.Fatalf("queued again = %+v, %v; want the entry at %s, not the branch's new tip %s", again, err, short(head), short(later))
	}
	step(t, q, OutcomeMerged)
	if isAncestor(t, e.repo, later, e.main()) {
		t.Fatalf("main holds %s, committed after the task was queued", short(later))
	}
	if again, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", ""); err != nil || again.State != Merged || again.Head != head {
		t.Fatalf("queued again once merged = %+v, %v; want the merged entry", again, err)
	}
	if es, err := q.List(ctx, 0); err != nil || len(es) != 1 {
		t.Fatalf("entries %+v, %v; want one", es, err)
	}
}
