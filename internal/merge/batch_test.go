package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/store"
)

// badGate fails a candidate that holds a file named bad-*: a task's marker
// that it is the one to fail.
const badGate = `for f in bad-*; do test ! -e "$f" || { echo "bad task: $f"; exit 1; }; done`

// batchTask is one queued task of a batch test: its worker's head.
type batchTask struct {
	id   int64
	head string
}

// queueTasks queues n tasks, each adding a file of its own on a branch of
// its own; those in bad also add a bad-N marker, which badGate fails.
func (e *env) queueTasks(q *Queue, n int, bad ...int64) []batchTask {
	e.t.Helper()
	var ts []batchTask
	for i := int64(1); i <= int64(n); i++ {
		agent := fmt.Sprintf("w%d", i)
		dir := e.worker(agent)
		writeFile(e.t, filepath.Join(dir, fmt.Sprintf("t%d.txt", i)), fmt.Sprintf("task %d\n", i))
		if slices.Contains(bad, i) {
			writeFile(e.t, filepath.Join(dir, fmt.Sprintf("bad-%d", i)), "")
		}
		gitT(e.t, dir, "add", "-A")
		gitT(e.t, dir, "commit", "-q", "-m", fmt.Sprintf("task %d", i))
		head := gitT(e.t, dir, "rev-parse", "HEAD")
		if _, err := q.Enqueue(context.Background(), i, agent, "swarm/"+agent+"/work", head); err != nil {
			e.t.Fatal(err)
		}
		ts = append(ts, batchTask{id: i, head: head})
	}
	return ts
}

// drain steps the queue until it is idle and returns the outcomes.
func drain(t *testing.T, q *Queue) []Outcome {
	t.Helper()
	var outs []Outcome
	for range 100 {
		out, err := q.Step(context.Background())
		if err != nil {
			t.Fatalf("Step after %v: %v", outs, err)
		}
		if out == OutcomeIdle {
			return outs
		}
		outs = append(outs, out)
	}
	t.Fatalf("queue not idle after 100 steps: %v", outs)
	return nil
}

// checkHistory checks that main's first-parent history since base is one
// merge commit per task of want, in order, each with the task's head as
// second parent and its Swarmd-Task trailer.
func (e *env) checkHistory(base string, want []batchTask) {
	e.t.Helper()
	commits := strings.Fields(gitT(e.t, e.repo, "rev-list", "--first-parent", "--reverse", base+"..main"))
	if len(commits) != len(want) {
		e.t.Fatalf("main has %d commits since %s, want %d", len(commits), short(base), len(want))
	}
	for i, c := range commits {
		parents := strings.Fields(gitT(e.t, e.repo, "rev-list", "--parents", "-n1", c))
		trailer := gitT(e.t, e.repo, "log", "-1", "--format=%(trailers:key=Swarmd-Task,valueonly)", c)
		if len(parents) != 3 || parents[2] != want[i].head || trailer != strconv.FormatInt(want[i].id, 10) {
			e.t.Errorf("commit %d of main (%s): parents %v, trailer %q; want task %d's head %s as second parent and its trailer",
				i, short(c), parents[1:], trailer, want[i].id, short(want[i].head))
		}
	}
}

// A batch of 8 green tasks: one gate run, one compare-and-swap, 8 merge
// commits in queue order, each with its trailer, each task reported merged
// at its own commit.
func TestBatchAllGreen(t *testing.T) {
	e := newEnv(t)
	opts := e.options(badGate)
	opts.Batch = 8
	q := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q, 8)

	step(t, q, OutcomeMerged)
	step(t, q, OutcomeIdle)
	if _, results, gates := e.metrics.snapshot(); gates != 1 || results[ResultMerged] != 8 {
		t.Fatalf("gate runs %d, results %v; want 1 run and 8 merged", gates, results)
	}
	e.checkHistory(base, ts)
	commits := strings.Fields(gitT(t, e.repo, "rev-list", "--first-parent", "--reverse", base+"..main"))
	calls := e.cb.all()
	for i, c := range calls {
		if !c.merged || c.task != ts[i].id || c.commit != commits[i] {
			t.Errorf("callback %d = %+v, want task %d merged at %s", i, c, ts[i].id, short(commits[i]))
		}
	}
	// One move of the target: its reflog has one entry since the start.
	if n := len(strings.Fields(gitT(t, e.repo, "reflog", "--format=%H", "refs/heads/main"))); n > 2 {
		t.Errorf("main moved %d times, want once (one compare-and-swap for the batch)", n-1)
	}
	es, err := q.List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range es {
		if en.GateSeq != es[0].GateSeq || en.Attempts != 1 {
			t.Errorf("entry of task %d: gate_seq %d, attempts %d; want all in gate run %d, 1 attempt", en.Task, en.GateSeq, en.Attempts, es[0].GateSeq)
		}
	}
}

// One bad task among 8, at each place in the batch: it is isolated within
// 1 + 2·log2(8) gate runs and rejected with the gate's output, and the
// other 7 merge, in order.
func TestBatchBisectsOneBadTask(t *testing.T) {
	for _, bad := range []int64{1, 3, 6, 8} {
		t.Run(fmt.Sprintf("bad=%d", bad), func(t *testing.T) {
			e := newEnv(t)
			opts := e.options(badGate)
			opts.Batch = 8
			q := e.open(opts)
			base := e.main()
			ts := e.queueTasks(q, 8, bad)

			outs := drain(t, q)
			_, results, gates := e.metrics.snapshot()
			if gates > 7 || results[ResultMerged] != 7 || results[string(KindGateFailed)] != 1 {
				t.Fatalf("gate runs %d, results %v (steps %v); want at most 7 runs, 7 merged, 1 gate_failed", gates, results, outs)
			}
			t.Logf("bad task %d: %d gate runs, steps %v", bad, gates, outs)
			good := slices.DeleteFunc(slices.Clone(ts), func(bt batchTask) bool { return bt.id == bad })
			e.checkHistory(base, good)
			var rejected []call
			for _, c := range e.cb.all() {
				if !c.merged {
					rejected = append(rejected, c)
				}
			}
			if len(rejected) != 1 || rejected[0].task != bad || rejected[0].kind != KindGateFailed ||
				!strings.Contains(rejected[0].detail, fmt.Sprintf("bad task: bad-%d", bad)) {
				t.Fatalf("rejections %+v, want task %d's gate_failed with the gate's output", rejected, bad)
			}
			last, err := q.Store().Latest(context.Background(), bad)
			if err != nil || last.GateSeq == 0 {
				t.Fatalf("bad task's entry %+v (%v), want it to name the gate run that failed it", last, err)
			}
			if log := readFile(t, e.logs.LogPath(LogName, last.GateSeq)); !strings.Contains(log, fmt.Sprintf("bad-%d", bad)) {
				t.Errorf("gate run %d's log does not show the failure:\n%s", last.GateSeq, log)
			}
		})
	}
}

// A task that conflicts with one before it in the batch is rejected as a
// conflict by merge-tree before the gate runs; the batch goes on without it.
func TestBatchConflictFoundBeforeGate(t *testing.T) {
	e := newEnv(t)
	runs := filepath.Join(t.TempDir(), "runs")
	opts := e.options(`echo "$SWARM_MERGE_TASKS" >> ` + runs)
	opts.Batch = 8
	q := e.open(opts)
	base := e.main()
	var ts []batchTask
	for i, content := range []string{"ONE\ntwo\nthree\n", "", "uno\ntwo\nthree\n", ""} {
		task := int64(i + 1)
		agent := fmt.Sprintf("w%d", task)
		dir := e.worker(agent)
		file, text := fmt.Sprintf("t%d.txt", task), fmt.Sprintf("task %d\n", task)
		if content != "" {
			file, text = "f.txt", content
		}
		head := commitFile(t, dir, file, text, fmt.Sprintf("task %d", task))
		if _, err := q.Enqueue(context.Background(), task, agent, "swarm/"+agent+"/work", head); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, batchTask{id: task, head: head})
	}

	step(t, q, OutcomeMerged)
	step(t, q, OutcomeIdle)
	if got := strings.TrimSpace(readFile(t, runs)); got != "1 2 4" {
		t.Errorf("gate runs on tasks %q, want one run on \"1 2 4\"", got)
	}
	e.checkHistory(base, []batchTask{ts[0], ts[1], ts[3]})
	calls := e.cb.all()
	i := slices.IndexFunc(calls, func(c call) bool { return c.task == 3 })
	if i < 0 || calls[i].merged || calls[i].kind != KindConflict || calls[i].detail != "f.txt" {
		t.Fatalf("callbacks %+v, want task 3 rejected as a conflict on f.txt", calls)
	}
	// Rejected before the batch was under test.
	evs := e.events()
	rej := slices.IndexFunc(evs, func(s string) bool { return strings.HasPrefix(s, "queued --rejected--> rejected: conflict") })
	test := slices.IndexFunc(evs, func(s string) bool { return strings.Contains(s, "--testing-->") })
	if rej < 0 || test < 0 || rej > test {
		t.Errorf("want the conflict rejected before the batch's test:\n%s", strings.Join(evs, "\n"))
	}
}

// merge.batch 1 is the queue as it was: one entry per step, one gate run
// each.
func TestBatchOfOneIsOneAtATime(t *testing.T) {
	e := newEnv(t)
	opts := e.options(badGate)
	opts.Batch = 1
	q := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q, 3, 2)
	step(t, q, OutcomeMerged)
	step(t, q, OutcomeRejected)
	step(t, q, OutcomeMerged)
	step(t, q, OutcomeIdle)
	if _, results, gates := e.metrics.snapshot(); gates != 3 || results[ResultMerged] != 2 {
		t.Fatalf("gate runs %d, results %v; want 3 runs, 2 merged", gates, results)
	}
	e.checkHistory(base, []batchTask{ts[0], ts[2]})
}

// The adaptive size: a red gate on a new batch halves it, the red gates of
// its bisection do not, a green gate doubles it back up to the most.
func TestBatchSizeAdapts(t *testing.T) {
	b := newBatchState(8)
	if b.want() != 8 {
		t.Fatalf("want %d at start, want 8", b.want())
	}
	es := []*Entry{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 5}, {ID: 6}, {ID: 7}, {ID: 8}}
	b.split(es, "tree8", redGate{})
	if b.size != 4 || b.want() != 8 {
		t.Errorf("after a red batch of 8: size %d, want %d; want 4 and the 8 suspects", b.size, b.want())
	}
	b.split(es[:4], "tree4", redGate{})
	if b.size != 4 || b.want() != 4 || !b.isRed("tree8") || !b.isRed("tree4") {
		t.Errorf("after a red half: size %d, want %d; want 4, the 4 suspects, both trees red", b.size, b.want())
	}
	for _, e := range es[:4] {
		b.found(e)
	}
	if b.want() != 4 || b.isRed("tree8") {
		t.Errorf("bisection over: want %d, red %v; want the size, 4, and no red trees", b.want(), b.red)
	}
	b.failed()
	b.failed()
	b.failed()
	if b.size != 1 {
		t.Errorf("size after red runs = %d, want 1", b.size)
	}
	for range 5 {
		b.green(nil)
	}
	if b.size != 8 {
		t.Errorf("size after greens = %d, want 8 (the most)", b.size)
	}
	if b0 := newBatchState(0); b0.want() != 1 {
		t.Errorf("batch 0: want %d, want 1", b0.want())
	}
}

// helperEnv names the helper process's options (TestMain runs the queue
// there instead of the tests).
const helperEnv = "MERGE_TEST_HELPER"

type helperOptions struct {
	Repo, StateDir, DB string
	Gate               []string
	Batch, Parallel    int
	Env                []string
}

// runHelper is the helper process: it opens the queue on the test's
// repository and swarm.db, as a daemon would, and steps it once; the test
// kills it with SIGKILL during the gate.
func runHelper(spec string) int {
	var o helperOptions
	if err := json.Unmarshal([]byte(spec), &o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	db, err := store.Open(ctx, o.DB, store.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sup, err := proc.NewSupervisor(o.StateDir, zap.NewNop())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	q, err := Open(ctx, Options{Repo: o.Repo, StateDir: o.StateDir, Into: "main", Gate: o.Gate, Batch: o.Batch,
		Parallel: o.Parallel, DB: db, Procs: sup, Logs: logs.New(o.StateDir, 0, 0, nil), Env: o.Env})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out, err := q.Step(ctx)
	fmt.Fprintln(os.Stderr, "helper step:", out, err)
	return 1 // the test kills it before
}

// blockingGate is a gate command that touches flags/started (a name the
// shell expands) once it runs and then blocks until killed, reading a fifo
// in flags that nothing writes.
func blockingGate(t *testing.T, started string) (cmd, flags string) {
	t.Helper()
	flags = t.TempDir()
	fifo := filepath.Join(flags, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return "touch " + flags + "/" + started + "; cat " + fifo, flags
}

// killHelperDuringGate runs the helper process (runHelper) on this env's
// repository, state dir and swarm.db with o's gate, batch and parallel,
// kills it with SIGKILL once every file in started exists (written by its
// gates), and then kills its orphaned gates, as a restarted daemon's
// supervisor would.
func (e *env) killHelperDuringGate(o helperOptions, started ...string) {
	e.t.Helper()
	o.Repo, o.StateDir, o.DB = e.repo, e.stateDir, e.db.Path()
	spec, err := json.Marshal(o)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	for _, f := range started {
		waitForFile(e.t, f)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		e.t.Fatalf("helper: %v, want killed\n%s", err, stderr.String())
	}
	killMarked(e.mark)
}

// A daemon killed with SIGKILL during a batch's gate leaves the target
// before the batch and every entry of it under test; the next one tests
// them again and merges them all, each once.
func TestBatchSurvivesSIGKILLMidGate(t *testing.T) {
	e := newEnv(t)
	block, flags := blockingGate(t, "started")
	opts := e.options(badGate)
	opts.Batch = 8
	q := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q, 8)

	e.killHelperDuringGate(helperOptions{Batch: 8, Gate: []string{badGate, block}, Env: opts.Env},
		filepath.Join(flags, "started"))

	if e.main() != base {
		t.Fatalf("main moved to %s during the killed batch's gate", short(e.main()))
	}
	es, err := q.List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range es {
		if en.State != Testing || en.GateSeq != es[0].GateSeq || en.GateSeq == 0 {
			t.Fatalf("entry of task %d: %s in gate run %d, want all 8 under test in one run", en.Task, en.State, en.GateSeq)
		}
	}

	step(t, q, OutcomeMerged)
	step(t, q, OutcomeIdle)
	e.checkHistory(base, ts)
	if calls := e.cb.all(); len(calls) != 8 {
		t.Errorf("callbacks %+v, want 8 merged", calls)
	}
	if evs := strings.Join(e.events(), "\n"); strings.Count(evs, "testing --requeued--> queued: resumed") != 8 {
		t.Errorf("want the 8 entries resumed:\n%s", evs)
	}
}

// A daemon that dies after the batch's compare-and-swap, before it records
// the result (simulated: the queue's own steps up to the swap, then a new
// queue on the same store), leaves the target after the batch: the next
// one records every entry merged at its own commit, with no gate run.
func TestBatchCrashAfterSwapRecordsEachMerged(t *testing.T) {
	e := newEnv(t)
	opts := e.options(badGate)
	opts.Batch = 8
	q1 := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q1, 4)
	ctx := context.Background()
	front, err := q1.store.front(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	es := make([]*Entry, len(front))
	for i := range front {
		es[i] = &front[i]
	}
	target, tree, err := q1.repo.tip(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	var res outcomes
	line, err := q1.line(ctx, es, target, tree, &res)
	if err != nil || len(line) != 4 || res.any() {
		t.Fatalf("line %d, results %+v: %v", len(line), res.results, err)
	}
	cands := make([]string, len(line))
	for i, l := range line {
		cands[i] = l.commit
	}
	if err := q1.store.beginBatch(ctx, es, cands, target, 0); err != nil {
		t.Fatal(err)
	}
	gitT(t, e.repo, "update-ref", "refs/heads/main", cands[3], target)
	q1.Stop()

	q2 := e.open(opts)
	step(t, q2, OutcomeMerged)
	step(t, q2, OutcomeIdle)
	if e.main() != cands[3] {
		t.Fatalf("main = %s, want the batch's last candidate %s", short(e.main()), short(cands[3]))
	}
	e.checkHistory(base, ts)
	if _, _, gates := e.metrics.snapshot(); gates != 0 {
		t.Errorf("%d gate runs, want none", gates)
	}
	for i, c := range e.cb.all() {
		if !c.merged || c.task != ts[i].id || c.commit != cands[i] {
			t.Errorf("callback %d = %+v, want task %d merged at its candidate %s", i, c, ts[i].id, short(cands[i]))
		}
	}
}

// A batch whose gate passed while the person's checkout of the target got
// local changes waits; once the checkout is clean the same candidates go in
// without a second gate run, and the checkout's files follow.
func TestBatchPassedWaitsForDirtyCheckout(t *testing.T) {
	e := newEnv(t)
	gitT(t, e.repo, "checkout", "-q", "main") // the person's own checkout
	flags := t.TempDir()
	opts := e.options(`echo run >> ` + flags + `/runs; if [ ! -e ` + flags + `/dirtied ]; then touch ` + flags +
		`/dirtied; echo edit > ` + filepath.Join(e.repo, "f.txt") + `; fi`)
	opts.Batch = 8
	q := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q, 3)

	step(t, q, OutcomeWaiting)
	if e.main() != base {
		t.Fatal("main moved under a dirty checkout")
	}
	gitT(t, e.repo, "checkout", "--", "f.txt")
	step(t, q, OutcomeMerged)
	step(t, q, OutcomeIdle)
	if runs := strings.Count(readFile(t, filepath.Join(flags, "runs")), "run"); runs != 1 {
		t.Errorf("%d gate runs, want 1 (the passed batch goes in untested again)", runs)
	}
	e.checkHistory(base, ts)
	if got := readFile(t, filepath.Join(e.repo, "t3.txt")); got != "task 3\n" {
		t.Errorf("the checkout's t3.txt = %q", got)
	}
}

// Two bad tasks in one batch: each is isolated and rejected, the other 6
// merge in order.
func TestBatchBisectsTwoBadTasks(t *testing.T) {
	e := newEnv(t)
	opts := e.options(badGate)
	opts.Batch = 8
	q := e.open(opts)
	base := e.main()
	ts := e.queueTasks(q, 8, 2, 7)
	outs := drain(t, q)
	_, results, gates := e.metrics.snapshot()
	if results[ResultMerged] != 6 || results[string(KindGateFailed)] != 2 {
		t.Fatalf("results %v (steps %v, %d gate runs); want 6 merged, 2 gate_failed", results, outs, gates)
	}
	t.Logf("%d gate runs, steps %v", gates, outs)
	e.checkHistory(base, []batchTask{ts[0], ts[2], ts[3], ts[4], ts[5], ts[7]})
}
