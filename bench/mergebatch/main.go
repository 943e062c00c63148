// Command mergebatch measures the merge queue's batches (issue 31): N ready
// tasks, each a branch adding a file of its own, merged into main through
// the real queue (swarm.db, merge-tree, commit-tree, update-ref, the gate
// as a process tree) with a gate that sleeps, once with merge.batch 1 and
// once batched, all green and then with one failing task among them, in
// the same run. Reported per run: gate runs, wall time, tasks merged and
// rejected; then every merged task is checked to be one merge commit of its
// own on main's first-parent line, in queue order, with its Swarmd-Task
// trailer and the task's head as second parent.
//
// Goals (issue 31, for 40 tasks and batch 8): all merged in at most 8 gate
// runs when all pass; one failing task isolated and rejected in at most
// 8 + log2(8) = 11 runs, the other 39 merged.
//
//	go run ./bench/mergebatch -tasks 40 -gate-sleep 2s -batch 8 -bad 20
//
// With -parallel 2 the batched runs are made a second time with
// merge.parallel 2 (the next batch gated beside the front one), in the same
// run: gate runs started (a killed run ahead counts) and wall time against
// the batched runs one gate at a time.
//
//	go run ./bench/mergebatch -tasks 40 -gate-sleep 2s -batch 8 -bad 20 -parallel 2
//
// With -engines sqlite,postgres every run is made on both stores (the
// PostgreSQL server durable, started here), one after the other, and the
// merge rates compared: issue 28 asks the PostgreSQL merge leader for at
// least half a SQLite daemon's merges per second with a `true` gate
// (-gate-sleep 0).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/store"
)

type config struct {
	tasks    int
	sleep    time.Duration
	batch    int
	bad      int
	goal     int
	one      bool
	parallel int
	dir      string
	engines  []string
}

func main() {
	var cfg config
	flag.IntVar(&cfg.tasks, "tasks", 40, "ready tasks in the queue")
	flag.DurationVar(&cfg.sleep, "gate-sleep", 2*time.Second, "how long the gate sleeps")
	flag.IntVar(&cfg.batch, "batch", merge.DefaultBatch, "merge.batch of the batched runs")
	flag.IntVar(&cfg.bad, "bad", 20, "the failing task of the second scenario (1 to -tasks)")
	flag.IntVar(&cfg.goal, "goal", 8, "the most gate runs of the batched run when all pass (plus log2(batch) with a failing task)")
	flag.BoolVar(&cfg.one, "baseline", true, "also run merge.batch 1, for comparison")
	flag.IntVar(&cfg.parallel, "parallel", 1, "2: also run the batched runs with merge.parallel 2")
	flag.StringVar(&cfg.dir, "dir", "", "parent directory for the repositories (default: the temp dir)")
	engines := flag.String("engines", "sqlite", "the stores to run on, comma-separated: sqlite, postgres (a durable server started here)")
	flag.Parse()
	cfg.engines = strings.Split(*engines, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench mergebatch:", err)
		os.Exit(1)
	}
}

// result is one run's figures.
type result struct {
	engine           string
	scenario         string
	batch, parallel  int
	gates            int            // gate runs that ran to their end
	started          int            // gate runs started, killed runs ahead included
	ahead            map[string]int // runs ahead by what came of them
	wall             time.Duration
	merged, rejected []int64
	historyOK        string // "" when every merged task is one commit of its own, in order, with its trailer
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.tasks < 1 || cfg.bad < 1 || cfg.bad > cfg.tasks {
		return fmt.Errorf("want -tasks ≥ 1 and -bad between 1 and -tasks")
	}
	if cfg.parallel < 1 || cfg.parallel > merge.MaxParallel {
		return fmt.Errorf("want -parallel between 1 and %d", merge.MaxParallel)
	}
	// The commits made here must not depend on the machine's git config.
	for k, v := range map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
		"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"} {
		os.Setenv(k, v)
	}
	root, err := os.MkdirTemp(cfg.dir, "swarmd-bench-mergebatch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	// One supervisor per process (it makes the process a subreaper).
	sup, err := proc.NewSupervisor(root, zap.NewNop())
	if err != nil {
		return err
	}
	defer sup.Close()

	opens := map[string]func(ctx context.Context, dir string) (*store.DB, error){}
	for _, e := range cfg.engines {
		switch e {
		case "sqlite":
			opens[e] = func(ctx context.Context, dir string) (*store.DB, error) {
				return store.Open(ctx, filepath.Join(dir, "swarm.db"), store.Options{})
			}
		case "postgres":
			srv, err := pgtest.StartDurable()
			if err != nil {
				return fmt.Errorf("start PostgreSQL: %w", err)
			}
			defer srv.Close()
			n := 0
			opens[e] = func(ctx context.Context, _ string) (*store.DB, error) {
				n++
				name := fmt.Sprint("mergebatch", n)
				if err := srv.CreateDB(name); err != nil {
					return nil, err
				}
				return store.Open(ctx, srv.URL(name), store.Options{})
			}
		default:
			return fmt.Errorf("-engines: unknown store %q (want sqlite or postgres)", e)
		}
	}

	fmt.Fprintf(out, "%d ready tasks, a gate that sleeps %s, merge.batch 1 vs %d; failing task %d in the second scenario; stores %s\n",
		cfg.tasks, cfg.sleep, cfg.batch, cfg.bad, strings.Join(cfg.engines, ", "))
	var results []result
	for _, sc := range []struct {
		name string
		bad  int
	}{{"all green", 0}, {fmt.Sprintf("task %d fails", cfg.bad), cfg.bad}} {
		type shape struct{ batch, parallel int }
		shapes := []shape{{1, 1}, {cfg.batch, 1}}
		if !cfg.one {
			shapes = shapes[1:]
		}
		if cfg.parallel > 1 {
			shapes = append(shapes, shape{cfg.batch, cfg.parallel})
		}
		for _, sh := range shapes {
			for _, engine := range cfg.engines {
				dir := filepath.Join(root, fmt.Sprintf("run%d", len(results)))
				r, err := runOnce(ctx, cfg, sup, opens[engine], dir, sh.batch, sh.parallel, sc.bad)
				if err != nil {
					return fmt.Errorf("%s, %s, batch %d, parallel %d: %w", engine, sc.name, sh.batch, sh.parallel, err)
				}
				r.engine, r.scenario = engine, sc.name
				results = append(results, r)
				fmt.Fprintf(out, "  %s, %s, batch %d, parallel %d: %d gate runs (%d started), %s", engine, sc.name, sh.batch, sh.parallel,
					r.gates, r.started, r.wall.Round(10*time.Millisecond))
				if sh.parallel > 1 {
					fmt.Fprintf(out, "; runs ahead: %d passed, %d failed, %d dropped", r.ahead["passed"], r.ahead["failed"], r.ahead["dropped"])
				}
				fmt.Fprintln(out)
			}
		}
	}

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nstore\tscenario\tmerge.batch\tmerge.parallel\tgate runs (started)\twall\tmerges/s\tmerged\trejected\thistory\tgoal")
	failed := false
	log2 := bits.Len(uint(cfg.batch)) - 1
	for _, r := range results {
		goal := "-"
		if r.batch > 1 {
			limit := cfg.goal
			if len(r.rejected) > 0 {
				limit += log2
			}
			ok := r.gates <= limit && r.historyOK == ""
			if len(r.rejected) > 0 {
				ok = ok && len(r.rejected) == 1 && r.rejected[0] == int64(cfg.bad) && len(r.merged) == cfg.tasks-1
			} else {
				ok = ok && len(r.merged) == cfg.tasks
			}
			goal = fmt.Sprintf("≤ %d runs: %s", limit, map[bool]string{true: "met", false: "NOT MET"}[ok])
			failed = failed || !ok
		}
		hist := "one commit each, in order, trailers"
		if r.historyOK != "" {
			hist = r.historyOK
			failed = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d (%d)\t%s\t%.1f\t%d\t%v\t%s\t%s\n", r.engine, r.scenario, r.batch, r.parallel, r.gates, r.started,
			r.wall.Round(10*time.Millisecond), r.rate(), len(r.merged), r.rejected, hist, goal)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	find := func(engine, scenario string, batch, parallel int) (result, bool) {
		for _, r := range results {
			if r.engine == engine && r.scenario == scenario && r.batch == batch && r.parallel == parallel {
				return r, true
			}
		}
		return result{}, false
	}
	for _, r := range results {
		if seq, ok := find(r.engine, r.scenario, r.batch, 1); ok && r.parallel > 1 {
			fmt.Fprintf(out, "%s, %s: batch %d with parallel %d takes %.1f%% of the wall time of parallel 1, with %d gate runs started against %d\n",
				r.engine, r.scenario, r.batch, r.parallel, 100*float64(r.wall)/float64(seq.wall), r.started, seq.started)
			continue
		}
		if one, ok := find(r.engine, r.scenario, 1, 1); ok && r.batch != 1 {
			fmt.Fprintf(out, "%s, %s: batch %d takes %.1f%% of the gate runs and %.1f%% of the wall time of batch 1\n", r.engine, r.scenario, r.batch,
				100*float64(r.gates)/float64(one.gates), 100*float64(r.wall)/float64(one.wall))
		}
		if lite, ok := find("sqlite", r.scenario, r.batch, r.parallel); ok && r.engine == "postgres" {
			fmt.Fprintf(out, "%s, batch %d: PostgreSQL merges %.2f× SQLite's per second (%.1f against %.1f)\n", r.scenario, r.batch,
				r.rate()/lite.rate(), r.rate(), lite.rate())
		}
	}
	if failed {
		return fmt.Errorf("a goal was not met")
	}
	return nil
}

// runOnce builds a repository with cfg.tasks task branches (task bad, if
// any, adding the file the gate refuses), queues them, and steps the queue
// until it is idle.
func runOnce(ctx context.Context, cfg config, sup *proc.Supervisor, open func(context.Context, string) (*store.DB, error), dir string, batch, parallel, bad int) (result, error) {
	repo, stateDir := filepath.Join(dir, "repo"), filepath.Join(dir, "state")
	heads, err := buildRepo(ctx, repo, cfg.tasks, bad)
	if err != nil {
		return result{}, fmt.Errorf("build repository: %w", err)
	}
	base, err := git(ctx, repo, "rev-parse", "refs/heads/main")
	if err != nil {
		return result{}, err
	}
	db, err := open(ctx, dir)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	rec := &recorder{}
	gate := fmt.Sprintf(`sleep %g; for f in bad-*; do test ! -e "$f" || { echo "refused: $f"; exit 1; }; done`, cfg.sleep.Seconds())
	q, err := merge.Open(ctx, merge.Options{Repo: repo, StateDir: stateDir, Into: "main", Gate: []string{gate}, Batch: batch,
		Parallel: parallel, DB: db, Procs: sup, Logs: logs.New(stateDir, 0, 0, nil), Callbacks: rec, Metrics: rec})
	if err != nil {
		return result{}, err
	}
	for i, head := range heads {
		task := int64(i + 1)
		agent := fmt.Sprintf("w%d", task)
		if _, err := q.Enqueue(ctx, task, agent, "swarm/"+agent+"/work", head); err != nil {
			return result{}, err
		}
	}
	start := time.Now()
	for {
		o, err := q.Step(ctx)
		if err != nil {
			return result{}, err
		}
		if o == merge.OutcomeIdle {
			break
		}
	}
	wall := time.Since(start)
	q.Stop() // a run ahead Step left, if any
	gateLogs, err := filepath.Glob(filepath.Join(logs.New(stateDir, 0, 0, nil).LogDir(merge.LogName), "*.log"))
	if err != nil {
		return result{}, err
	}
	r := result{batch: batch, parallel: parallel, wall: wall, gates: rec.gates, started: len(gateLogs), ahead: rec.ahead,
		merged: rec.merged, rejected: rec.rejected}
	r.historyOK, err = checkHistory(ctx, repo, base, r.merged, heads)
	return r, err
}

// rate is the run's tasks merged per second.
func (r result) rate() float64 { return float64(len(r.merged)) / r.wall.Seconds() }

// checkHistory says what is wrong with main's first-parent line since
// base, "" when it is one merge commit per merged task, in order, with the
// task's head as second parent and its Swarmd-Task trailer.
func checkHistory(ctx context.Context, repo, base string, merged []int64, heads []string) (string, error) {
	out, err := git(ctx, repo, "log", "--first-parent", "--reverse", "--format=%P%x1f%(trailers:key=Swarmd-Task,valueonly,separator=%x2c)",
		base+"..main")
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(merged) {
		return fmt.Sprintf("%d commits for %d merged tasks", len(lines), len(merged)), nil
	}
	for i, l := range lines {
		parents, trailer, _ := strings.Cut(l, "\x1f")
		ps := strings.Fields(parents)
		task := merged[i]
		if trailer != strconv.FormatInt(task, 10) || len(ps) != 2 || ps[1] != heads[task-1] {
			return fmt.Sprintf("commit %d: parents %v, trailer %q; want task %d", i+1, ps, trailer, task), nil
		}
	}
	return "", nil
}

// buildRepo makes a repository whose main has one commit and n branches
// swarm/wI/work, each adding tI.txt (and bad-I for task bad), and returns
// their heads. main is checked out nowhere, as on a server.
func buildRepo(ctx context.Context, repo string, n, bad int) ([]string, error) {
	if err := os.MkdirAll(repo, 0o755); err != nil {
		return nil, err
	}
	steps := [][]string{{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "initial"}}
	for _, s := range steps {
		if _, err := git(ctx, repo, s...); err != nil {
			return nil, err
		}
	}
	var heads []string
	for i := 1; i <= n; i++ {
		if _, err := git(ctx, repo, "checkout", "-q", "-b", fmt.Sprintf("swarm/w%d/work", i), "main"); err != nil {
			return nil, err
		}
		files := []string{fmt.Sprintf("t%d.txt", i)}
		if i == bad {
			files = append(files, fmt.Sprintf("bad-%d", i))
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(repo, f), []byte(fmt.Sprintf("task %d\n", i)), 0o644); err != nil {
				return nil, err
			}
		}
		if _, err := git(ctx, repo, append([]string{"add", "--"}, files...)...); err != nil {
			return nil, err
		}
		if _, err := git(ctx, repo, "commit", "-q", "-m", fmt.Sprintf("task %d", i)); err != nil {
			return nil, err
		}
		head, err := git(ctx, repo, "rev-parse", "HEAD")
		if err != nil {
			return nil, err
		}
		heads = append(heads, head)
	}
	_, err := git(ctx, repo, "checkout", "-q", "--detach", "main")
	return heads, err
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// recorder is the queue's callbacks and metrics: the results in the order
// they were reported, and the gate runs.
type recorder struct {
	mu               sync.Mutex
	merged, rejected []int64
	gates            int
	ahead            map[string]int // runs ahead by result
}

func (r *recorder) OnMerged(_ context.Context, e merge.Entry, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.merged = append(r.merged, e.Task)
	return nil
}

func (r *recorder) OnRejected(_ context.Context, e merge.Entry, _ merge.Kind, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected = append(r.rejected, e.Task)
	return nil
}

func (r *recorder) RunAhead(result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ahead == nil {
		r.ahead = map[string]int{}
	}
	r.ahead[result]++
}

func (r *recorder) MergeQueueDepth(int) {}
func (r *recorder) MergeResult(string)  {}
func (r *recorder) GateDuration(time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gates++
}
