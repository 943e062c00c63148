package merge

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// aheadGate is a gate for runs ahead: it appends the tasks it tests to
// flags/runs, and, while asked to (flags/pair), waits until a second run
// has started beside it, up to 20 s, then says whether one had (flags/
// overlap-TASK). It then fails a candidate with a bad-* file, as badGate.
func aheadGate(flags string) []string {
	return []string{
		`echo "$SWARM_MERGE_TASKS" >> ` + flags + `/runs; : > ` + flags + `/started-$SWARM_MERGE_TASK
if [ -e ` + flags + `/pair ]; then
  i=0
  while [ "$(ls ` + flags + ` | grep -c '^started-')" -lt 2 ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
  ls ` + flags + ` | grep -c '^started-' > ` + flags + `/overlap-$SWARM_MERGE_TASK
fi`,
		badGate,
	}
}

// runs are the task lists the gate tested, one per run, in order.
func runs(t *testing.T, flags string) []string {
	t.Helper()
	return strings.Split(strings.TrimSpace(readFile(t, filepath.Join(flags, "runs"))), "\n")
}

// With merge.parallel 2 and every run green, the next batch is gated on the
// front batch's candidate at the same time, and goes in with no run of its
// own: 16 tasks in batches of 8, two gate runs that overlap, and each task
// one merge commit of its own, in order, the second batch's entries naming
// the run ahead.
func TestAheadTwoBatchesPerRun(t *testing.T) {
	e := newEnv(t)
	flags := t.TempDir()
	writeFile(t, filepath.Join(flags, "pair"), "")
	opts := e.options(aheadGate(flags)...)
	opts.Batch, opts.Parallel = 8, 2
	q := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q, 16)

	step(t, q, OutcomeMerged) // the first 8; the next 8 tested beside them
	ctx := context.Background()
	st, err := q.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := st.Ahead; a == nil || !slices.Equal(a.Tasks, []int64{9, 10, 11, 12, 13, 14, 15, 16}) || a.GateSeq == 0 || a.Since.IsZero() {
		t.Fatalf("status while the run ahead is unsettled: ahead %+v, want tasks 9-16 with their gate run", st.Ahead)
	}
	aheadSeq := st.Ahead.GateSeq
	step(t, q, OutcomeMerged) // the next 8, on the run ahead's result
	step(t, q, OutcomeIdle)
	if st, err := q.Status(ctx); err != nil || st.Ahead != nil {
		t.Fatalf("status once settled: ahead %+v (%v), want none", st.Ahead, err)
	}
	if _, results, gates := e.metrics.snapshot(); gates != 2 || results[ResultMerged] != 16 {
		t.Fatalf("gate runs %d, results %v; want 2 runs and 16 merged", gates, results)
	}
	if got := e.metrics.runsAhead(); !maps.Equal(got, map[string]int{"passed": 1}) {
		t.Errorf("runs ahead by result %v, want one passed", got)
	}
	if got, want := runs(t, flags), []string{"1 2 3 4 5 6 7 8", "9 10 11 12 13 14 15 16"}; !slices.Equal(got, want) {
		t.Fatalf("gate runs tested %q, want %q", got, want)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(flags, "overlap-8"))); got != "2" {
		t.Errorf("the front batch's gate saw %s runs started, want 2: the run ahead did not run beside it", got)
	}
	e.checkHistory(base, ts)
	es, err := q.List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(es, func(a, b Entry) int { return int(a.Task - b.Task) })
	if es[8].GateSeq != aheadSeq {
		t.Errorf("the second batch names gate run %d, status said the run ahead was %d", es[8].GateSeq, aheadSeq)
	}
	for _, en := range es {
		want := es[0].GateSeq
		if en.Task > 8 {
			want = es[8].GateSeq
		}
		if en.GateSeq != want || en.Attempts != 1 {
			t.Errorf("entry of task %d: gate_seq %d, attempts %d; want gate run %d, 1 attempt", en.Task, en.GateSeq, en.Attempts, want)
		}
	}
	if es[0].GateSeq == es[8].GateSeq {
		t.Errorf("both batches name gate run %d, want the run ahead's own", es[0].GateSeq)
	}
	if log := readFile(t, e.logs.LogPath(LogName, es[8].GateSeq)); !strings.Contains(log, "a batch of 8") || !strings.Contains(log, "task 16") {
		t.Errorf("the run ahead's log does not show its batch:\n%s", log)
	}
}

// A red batch at the front: the run ahead, built on a candidate that will
// not go in, counts for nothing; the bad task is found and rejected, and
// every other task merges once, in order.
func TestAheadDroppedWhenTheFrontBatchFails(t *testing.T) {
	e := newEnv(t)
	flags := t.TempDir()
	opts := e.options(aheadGate(flags)...)
	opts.Batch, opts.Parallel = 8, 2
	q := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q, 16, 3)

	outs := drain(t, q)
	_, results, gates := e.metrics.snapshot()
	if results[ResultMerged] != 15 || results[string(KindGateFailed)] != 1 {
		t.Fatalf("results %v (steps %v), want 15 merged, 1 gate_failed", results, outs)
	}
	good := slices.DeleteFunc(slices.Clone(ts), func(bt batchTask) bool { return bt.id == 3 })
	e.checkHistory(base, good)
	rs := runs(t, flags)
	// The red batch is bisected as without runs ahead: the run ahead of it
	// (killed, perhaps before its gate logged) is no step of the bisection.
	if i := slices.Index(rs, "1 2 3 4"); i < 1 || i > 2 || (i == 2 && rs[1] != "9 10 11 12 13 14 15 16") {
		t.Errorf("gate runs %q: want the red batch, perhaps the run ahead of it, then its first half", rs)
	}
	t.Logf("%d gate runs: %q; runs ahead %v", gates, rs, e.metrics.runsAhead())
	if n := e.metrics.runsAhead()["failed"]; n != 0 {
		t.Errorf("%d runs ahead failed, want none: the bad task was at the front", n)
	}
	for _, c := range e.cb.all() {
		if !c.merged && c.task != 3 {
			t.Errorf("task %d rejected: %+v", c.task, c)
		}
	}
}

// A red run ahead: once the front batch goes in, the bisection of the batch
// ahead starts with no new run on the whole batch (its line rebuilt on the
// target has the tree that failed), and the bad task is rejected with the
// output of a run that failed on it.
func TestAheadRedRunBisectsWithoutRerun(t *testing.T) {
	e := newEnv(t)
	flags := t.TempDir()
	writeFile(t, filepath.Join(flags, "pair"), "") // the two first runs together
	opts := e.options(aheadGate(flags)...)
	opts.Batch, opts.Parallel = 8, 2
	q := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q, 16, 12)

	step(t, q, OutcomeMerged) // 1-8; 9-16 red ahead
	if err := os.Remove(filepath.Join(flags, "pair")); err != nil {
		t.Fatal(err)
	}
	outs := drain(t, q)
	_, results, gates := e.metrics.snapshot()
	if results[ResultMerged] != 15 || results[string(KindGateFailed)] != 1 {
		t.Fatalf("results %v (steps %v), want 15 merged, 1 gate_failed", results, outs)
	}
	rs := runs(t, flags)
	if n := slices.Index(rs, "9 10 11 12 13 14 15 16"); n < 0 || strings.Count(strings.Join(rs, "\n"), "9 10 11 12 13 14 15 16") != 1 {
		t.Errorf("batch 9-16 tested %q, want once (ahead)", rs)
	}
	if n := e.metrics.runsAhead()["failed"]; n != 1 {
		t.Errorf("%d runs ahead failed, want the one on tasks 9-16", n)
	}
	// As a red batch of 8 at the front bisects: at most 2·log2(8) more runs.
	if gates > 2+6 {
		t.Errorf("%d gate runs (%q), want at most 8", gates, rs)
	}
	good := slices.DeleteFunc(slices.Clone(ts), func(bt batchTask) bool { return bt.id == 12 })
	e.checkHistory(base, good)
	last, err := q.Store().Latest(context.Background(), 12)
	if err != nil || last.Result != string(KindGateFailed) {
		t.Fatalf("task 12's entry %+v (%v), want gate_failed", last, err)
	}
	if log := readFile(t, e.logs.LogPath(LogName, last.GateSeq)); !strings.Contains(log, "bad task: bad-12") {
		t.Errorf("gate run %d named by task 12 does not show its failure:\n%s", last.GateSeq, log)
	}
}

// A daemon killed with SIGKILL while the front batch's gate and the run
// ahead both run: the target stays before the front batch, whose entries
// are under test; the entries ahead are still queued (nothing of a run
// ahead is stored). The next queue merges all 16, each once.
func TestAheadSurvivesSIGKILL(t *testing.T) {
	e := newEnv(t)
	block, flags := blockingGate(t, "started-$SWARM_MERGE_TASK")
	opts := e.options(badGate)
	opts.Batch, opts.Parallel = 8, 2
	q := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q, 16)

	e.killHelperDuringGate(helperOptions{Batch: 8, Parallel: 2, Gate: []string{badGate, block},
		Env: opts.Env}, filepath.Join(flags, "started-8"), filepath.Join(flags, "started-16"))

	if e.main() != base {
		t.Fatalf("main moved to %s during the killed gates", short(e.main()))
	}
	es, err := q.List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range es {
		want := Queued
		if en.Task <= 8 {
			want = Testing
		}
		if en.State != want {
			t.Errorf("entry of task %d: %s, want %s", en.Task, en.State, want)
		}
	}

	if st, err := q.Status(context.Background()); err != nil || st.Ahead == nil {
		t.Fatalf("status after the kill: ahead %+v (%v), want the killed daemon's run ahead still named", st.Ahead, err)
	}
	drain(t, q)
	if st, err := q.Status(context.Background()); err != nil || st.Ahead != nil {
		t.Errorf("status after the next queue's steps: ahead %+v (%v), want the stale record cleared", st.Ahead, err)
	}
	e.checkHistory(base, ts)
	if calls := e.cb.all(); len(calls) != 16 {
		t.Errorf("callbacks %+v, want 16 merged", calls)
	}
}

// merge.parallel outside 1..2 is refused by name.
func TestParallelOption(t *testing.T) {
	e := newEnv(t)
	for _, n := range []int{-1, 3} {
		opts := e.options()
		opts.Parallel = n
		if _, err := Open(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "parallel") {
			t.Errorf("Parallel %d: Open = %v, want an error naming parallel", n, err)
		}
	}
}

// The target moves under the front batch's gate (someone pushes): the
// front batch is rebuilt on the new target and gated again, and the run
// ahead, built on a candidate that never became the target, counts for
// nothing. Every task merges once, after the push.
func TestAheadDroppedWhenTheTargetMoves(t *testing.T) {
	e := newEnv(t)
	flags := t.TempDir()
	push := `if [ ! -e ` + flags + `/pushed ]; then : > ` + flags + `/pushed
  c=$(git -C ` + e.repo + ` commit-tree -p main -m 'pushed by hand' 'main^{tree}') && git -C ` + e.repo + ` update-ref refs/heads/main "$c"
fi`
	opts := e.options(append([]string{push}, aheadGate(flags)...)...)
	opts.Batch, opts.Parallel = 8, 2
	q := e.open(opts)
	base := e.main()
	e.queueTasks(q, 16)

	outs := drain(t, q)
	if _, results, _ := e.metrics.snapshot(); results[ResultMerged] != 16 {
		t.Fatalf("results %v (steps %v), want 16 merged", results, outs)
	}
	if !slices.Contains(outs, OutcomeRebuild) {
		t.Errorf("steps %v: want the front batch rebuilt on the pushed target", outs)
	}
	subjects := strings.Split(gitT(t, e.repo, "log", "--first-parent", "--reverse", "--format=%s", base+"..main"), "\n")
	if len(subjects) != 17 || subjects[0] != "pushed by hand" {
		t.Fatalf("main since the start: %q, want the push then one merge per task", subjects)
	}
	for i, s := range subjects[1:] {
		if want := "Merge task " + strconv.Itoa(i+1) + " "; !strings.HasPrefix(s, want) {
			t.Errorf("commit %d after the push: %q, want %q...", i+1, s, want)
		}
	}
}

// With the rebase strategy the run ahead replays its branches in its own
// worktree while the front batch's gate runs in the first: both batches go
// in on two overlapping runs, every task's commit replayed once.
func TestAheadRebase(t *testing.T) {
	e := newEnv(t)
	flags := t.TempDir()
	writeFile(t, filepath.Join(flags, "pair"), "")
	opts := e.options(aheadGate(flags)...)
	opts.Batch, opts.Parallel, opts.Strategy = 8, 2, StrategyRebase
	q := e.open(opts)
	base := e.main()
	e.queueTasks(q, 16)

	outs := drain(t, q)
	if _, results, gates := e.metrics.snapshot(); gates != 2 || results[ResultMerged] != 16 {
		t.Fatalf("gate runs %d, results %v (steps %v); want 2 runs, 16 merged", gates, results, outs)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(flags, "overlap-8"))); got != "2" {
		t.Errorf("the front batch's gate saw %s runs started, want 2", got)
	}
	subjects := strings.Split(gitT(t, e.repo, "log", "--reverse", "--format=%s", base+"..main"), "\n")
	if len(subjects) != 16 {
		t.Fatalf("main since the start: %q, want the 16 tasks' commits", subjects)
	}
	for i, s := range subjects {
		if want := "task " + strconv.Itoa(i+1); s != want {
			t.Errorf("commit %d: %q, want %q", i+1, s, want)
		}
	}
}

// TestGateLoggedOnceLogsAreComplete: the queue tells Options.GateLogged a
// gate run's seq once its log and those of every run before it are
// complete, a run ahead that ends first included, so that the daemon's
// rotation never archives a log still written.
func TestGateLoggedOnceLogsAreComplete(t *testing.T) {
	e := newEnv(t)
	flags := t.TempDir()
	writeFile(t, filepath.Join(flags, "pair"), "")
	opts := e.options(aheadGate(flags)...)
	opts.Batch, opts.Parallel = 8, 2
	var told []uint32
	opts.GateLogged = func(upTo uint32) { // in the gate's goroutine
		told = append(told, upTo)
		for seq := uint32(1); seq <= upTo; seq++ {
			if log := readFile(t, e.logs.LogPath(LogName, seq)); !strings.Contains(log, fmt.Sprintf("seq %d ended", seq)) {
				t.Errorf("told %d while gate run %d's log is not complete:\n%s", upTo, seq, log)
			}
		}
	}
	q := e.open(opts)
	e.queueTasks(q, 16)
	step(t, q, OutcomeMerged)
	step(t, q, OutcomeMerged)
	step(t, q, OutcomeIdle)
	q.Stop()
	if len(told) == 0 || told[len(told)-1] != 2 || !slices.IsSorted(told) {
		t.Fatalf("told %v; want rising seqs, up to the 2 gate runs", told)
	}
}

func TestGateLogsEnded(t *testing.T) {
	var g gateLogs
	g.started(1)
	g.started(2) // a run ahead
	for _, c := range []struct {
		end, want uint32
	}{{2, 0}, {1, 2}} {
		if got := g.ended(c.end); got != c.want {
			t.Fatalf("ended(%d) = %d, want %d", c.end, got, c.want)
		}
	}
	g.started(3)
	if got := g.ended(3); got != 3 {
		t.Fatalf("ended(3) = %d, want 3", got)
	}
}
