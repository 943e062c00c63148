// Command soak is the long run: can an operator leave swarmd running for
// weeks? It starts a real `swarmd run` (the built binary) with N agents on
// a stand-in for Claude Code (fakecli.go: the claude backend runs it, so its
// stream is parsed as the real CLI's: tool calls, tokens, cost; the
// scripted backend's steps can only print, sleep and exit, and a session
// must commit and run `swarmd mail`), each session a few KB of stream-json,
// a commit for its task, now and then mail to a peer (some urgent). The
// harness keeps the task board fed, so that no agent idles, unless the
// merge queue falls behind; a merge queue with a `true` gate merges every
// task into the repository's branch; a dashboard is kept open on the live
// event stream (-watch), as an operator's browser tab or `swarmd top` would
// be.
//
// Every -interval it records what could grow: the daemon's RSS, Go heap,
// threads, open fds, goroutines, /metrics series, mounts, children and
// cgroups; its CPU (and its children's) per session ended in the interval;
// the sessions' latencies (settle, the gap between an agent's sessions, the
// prompt's build and the spawn from the event log) and an operator's
// (`swarmd status`, the dashboard's snapshot); swarm.db and its WAL; logs/,
// archive/ and the rest of the state directory; the repository's .git
// (bytes, loose objects, packs, refs, reflogs) and worktrees; and the rows
// of the big tables. At the end it prints the samples, a slope per 1,000
// sessions for every level with a projection to a month at a given pace,
// and, for the per-session figures, the first quarter of the run against
// the last. Then it stops the daemon, reads the tables' bytes (dbstat),
// counts the sessions that failed and the daemon log's warnings, and starts
// the daemon once more on the history: time to ready, the logs archived,
// and an operator's commands on the idle daemon against the same at the
// start. -pprof takes CPU and heap profiles early and late in the run.
//
//	make build && go run ./bench/soak -duration 20m -agents 20 -maintenance-every 2m -pprof 20s
package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
	_ "modernc.org/sqlite"
)

type options struct {
	bin           string
	dir           string
	duration      time.Duration
	interval      time.Duration
	agents        int
	backlog       int
	maxQueue      int
	mailEvery     int
	urgentEvery   int
	failEvery     int
	gate          string
	maintEvery    string
	sessionNice   int
	watch         bool
	restart       bool
	keep          bool
	csvPath       string
	pprof         time.Duration
	monthSessions float64
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/swarmd", "the swarmd binary (make build)")
	flag.StringVar(&o.dir, "dir", "", "parent of the run's temporary directory (\"\": the system's)")
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the swarm runs")
	flag.DurationVar(&o.interval, "interval", 30*time.Second, "time between samples")
	flag.IntVar(&o.agents, "agents", 20, "agents a1..aN")
	flag.IntVar(&o.backlog, "backlog", 0, "OPEN tasks kept on the board (0: 2 per agent)")
	flag.IntVar(&o.maxQueue, "max-queue", 16, "no task is added while this many wait in the merge queue (so that the queue keeps up)")
	flag.IntVar(&o.mailEvery, "mail-every", 3, "a session sends mail when its seq is a multiple of this")
	flag.IntVar(&o.urgentEvery, "urgent-every", 10, "one in this many of those messages is urgent")
	flag.IntVar(&o.failEvery, "fail-every", 25, "a task whose id is a multiple of this ends with FAIL")
	flag.StringVar(&o.gate, "gate", "true", "the merge gate (one shell command)")
	flag.StringVar(&o.maintEvery, "maintenance-every", "", "maintenance.every for the daemon's git gc (\"\": its default, 10m)")
	flag.IntVar(&o.sessionNice, "session-nice", -1, "limits.session_nice (-1: the config's default, 0)")
	flag.BoolVar(&o.watch, "watch", true, "keep a dashboard on the live event stream (/api/events) the whole run")
	flag.BoolVar(&o.restart, "restart", true, "after the stop, start the daemon once more: time to ready, the logs archived")
	flag.BoolVar(&o.keep, "keep", false, "leave the run's directory in place")
	flag.StringVar(&o.csvPath, "csv", "", "also write the samples to this CSV file")
	flag.DurationVar(&o.pprof, "pprof", 0, "if set, take a CPU profile of the daemon this long after the first minute and again before the end (SWARMD_PPROF_ADDR), into the run's directory")
	flag.Float64Var(&o.monthSessions, "month-sessions", 20*12*24*30, "sessions in the month the slopes are projected to (default: 20 agents, one session per 5 minutes)")
	flag.Parse()
	if o.mailEvery < 1 || o.urgentEvery < 1 || o.failEvery < 1 || o.agents < 2 {
		fmt.Fprintln(os.Stderr, "soak: -mail-every, -urgent-every and -fail-every must be at least 1, -agents at least 2")
		os.Exit(2)
	}
	if o.backlog == 0 {
		o.backlog = 2 * o.agents
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// run holds the whole soak; the daemon is stopped and the directory removed
// (unless -keep) however it ends.
func run(o options) error {
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w (make build)", err)
	}
	top, err := os.MkdirTemp(o.dir, "swarmd-soak-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "soak: the run is kept in", top)
	} else {
		defer os.RemoveAll(top)
	}
	s, err := setup(o, bin, top)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// SIGINT or SIGTERM ends the run early: the samples so far are
	// reported and the daemon stopped as usual.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	var interrupted atomic.Bool
	go func() {
		if _, ok := <-sig; ok {
			interrupted.Store(true)
			cancel()
		}
	}()

	d, err := s.start()
	if err != nil {
		return err
	}
	defer d.Kill() // a no-op once stopped
	if err := d.waitReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	// An operator's commands on an idle swarm with no history yet (no task
	// is on the board before the feeder starts), against the same after
	// the run (restartCheck).
	s.quiet0 = s.quietLook(d)
	ro, err := sql.Open("sqlite", "file:"+s.dbPath+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer ro.Close()
	ro.SetMaxOpenConns(2)
	w, err := store.Open(ctx, s.dbPath, store.Options{NoCreate: true})
	if err != nil {
		return fmt.Errorf("open the store to feed the board: %w", err)
	}
	defer w.Close()
	board := taskboard.New(w, taskboard.Options{})

	var wg sync.WaitGroup
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	feedErr := make(chan error, 1)
	var added atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := feed(runCtx, ro, board, o.backlog, o.maxQueue, &added); err != nil && runCtx.Err() == nil {
			feedErr <- err
			stopRun()
		}
	}()
	if o.pprof > 0 && s.pprofAddr != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.profiles(runCtx, o)
		}()
	}
	var streamed atomic.Int64
	if o.watch {
		wg.Add(1)
		go func() { defer wg.Done(); watch(runCtx, d.addr, &streamed) }()
	}

	fmt.Printf("soak: %d agents, %v, a sample every %v; run in %s\n", o.agents, o.duration, o.interval, top)
	fmt.Printf("soak: %s\n", s.isolation())
	var samples []sample
	first, err := s.sample(ctx, d, ro, nil)
	if err != nil {
		return err
	}
	samples = append(samples, first)
	start := time.Now()
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
loop:
	for time.Since(start) < o.duration {
		select {
		case <-tick.C:
		case <-runCtx.Done():
			break loop
		}
		sm, err := s.sample(ctx, d, ro, &samples[len(samples)-1])
		if err != nil {
			return err
		}
		samples = append(samples, sm)
		fmt.Printf("  t=%-5s sessions %6d  rss %6.1f MB  goroutines %5d  fds %4d  cpu %6.2f ms/session  settle p50 %5.1f ms  gap p50 %6.1f ms  db %6.1f MB  logs %6d files  merged %5d  queue %3d\n",
			fmtDur(sm.t), sm.sessions, mb(sm.rss), sm.goroutines, sm.fds, sm.cpuPerSession, sm.settleP50, sm.gapP50, mb(sm.db+sm.wal), sm.logFiles, sm.merged, sm.queued)
		select {
		case <-d.Done:
			return fmt.Errorf("swarmd exited during the run: %v; its log is %s", d.Cmd.ProcessState, d.logPath)
		default:
		}
	}
	stopRun()
	wg.Wait()
	select {
	case err := <-feedErr:
		return fmt.Errorf("feeding the board: %w", err)
	default:
	}
	wall := time.Since(start)

	// The stop, then what the tables hold (the daemon's writes are over).
	stopT := time.Now()
	stopErr := d.Stop(2 * time.Minute)
	stopDur := time.Since(stopT)
	survivors := harness.Survivors(s.repo)
	w.Close()
	ro.Close()
	tables, err := tableBytes(s.dbPath)
	if err != nil {
		return err
	}
	failures, err := sessionFailures(s.dbPath)
	if err != nil {
		return err
	}

	report(os.Stdout, o, samples, wall, added.Load(), streamed.Load())
	fmt.Printf("\nstop: SIGTERM -> exit in %.2fs (%v); processes of the swarm left: %d\n", stopDur.Seconds(), errOr(stopErr, "exit 0"), survivors)
	last := samples[len(samples)-1]
	printTables(os.Stdout, tables, last.sessions, o.monthSessions)
	fmt.Println("\nsessions that did not succeed, by outcome and reason:")
	for _, f := range failures {
		fmt.Println("  " + f)
	}
	fmt.Println("\nthe daemon log's warnings and errors, by message:")
	for _, l := range logSummary(s.clogs) {
		fmt.Println("  " + l)
	}
	if o.csvPath != "" {
		if err := writeCSV(o.csvPath, samples); err != nil {
			return err
		}
	}
	if o.restart && !interrupted.Load() {
		if err := s.restartCheck(); err != nil {
			return err
		}
	}
	if n := harness.Survivors(s.repo); n > 0 {
		return fmt.Errorf("%d processes of the swarm left running", n)
	}
	if stopErr != nil {
		return stopErr
	}
	return nil
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

// swarm is one run's files.
type swarm struct {
	o                       options
	bin, top, repo, config  string
	stateDir, dbPath, clogs string
	branch                  string
	pprofAddr               string
	quiet0                  string
}

// quietLook times an operator's looks at an idle daemon: `swarmd status`
// and the dashboard's snapshot, the median of 5 each.
func (s *swarm) quietLook(d *daemon) string {
	var st, sn []float64
	for range 5 {
		t0 := time.Now()
		if err := exec.Command(s.bin, "status", "--json", "--config", s.config).Run(); err != nil {
			return "swarmd status: " + err.Error()
		}
		st = append(st, ms(time.Since(t0)))
		t0 = time.Now()
		if err := get(d.addr, "/api/snapshot"); err != nil {
			return err.Error()
		}
		sn = append(sn, ms(time.Since(t0)))
	}
	return fmt.Sprintf("swarmd status %.1f ms, GET /api/snapshot %.1f ms (medians of 5)", quantile(st, 0.5), quantile(sn, 0.5))
}

// idle waits until the daemon has ended no session for 3 s (at most 2
// minutes): the agents are done with the board.
func (d *daemon) idle() {
	var last float64 = -1
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		m, err := scrape(d.addr)
		if err != nil {
			return
		}
		var n float64
		for k, v := range m {
			if strings.HasPrefix(k, "swarmd_sessions_total{") {
				n += v
			}
		}
		if n == last {
			return
		}
		last = n
		time.Sleep(3 * time.Second)
	}
}

func setup(o options, bin, top string) (*swarm, error) {
	repo, err := harness.RepoIn(top, "repo-")
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("git", "-C", repo, "symbolic-ref", "--short", "HEAD").Output()
	if err != nil {
		return nil, fmt.Errorf("the repository's branch: %w", err)
	}
	s := &swarm{o: o, bin: bin, top: top, repo: repo, branch: strings.TrimSpace(string(out)),
		stateDir: filepath.Join(repo, ".swarm"), clogs: filepath.Join(top, "daemon.log")}
	s.dbPath = filepath.Join(s.stateDir, "swarm.db")
	// The fake CLI and the agents' HOMEs live in the repository (a
	// sandbox sees the repository read-only and its HOME writable, and
	// /tmp is its own), kept out of git.
	soak := filepath.Join(repo, ".soak")
	if err := os.MkdirAll(soak, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(soak, "claude"), []byte(fakeCLI), 0o755); err != nil {
		return nil, err
	}
	exclude := filepath.Join(repo, ".git", "info", "exclude")
	if err := os.MkdirAll(filepath.Dir(exclude), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(exclude, []byte(".soak/\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("soak\n"), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command("sh", "-c", "cd \"$1\" && git add README.md && git -c user.name=b -c user.email=b@b.invalid commit -q -m readme", "sh", repo).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("commit README.md: %v: %s", err, out)
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "listen: %q\n", addr)
	if o.sessionNice >= 0 {
		fmt.Fprintf(&cfg, "limits: {session_nice: %d}\n", o.sessionNice)
	}
	if o.maintEvery != "" {
		fmt.Fprintf(&cfg, "maintenance: {every: %s}\n", o.maintEvery)
	}
	fmt.Fprintf(&cfg, `defaults:
  backend: fake
  session_timeout: 2m
  grace_period: 2s
  min_session_interval: 0s
  env: {MAIL_EVERY: %d, URGENT_EVERY: %d, FAIL_EVERY: %d}
merge:
  into: %s
  gate: [%q]
backends:
  fake: {type: claude, command: %q}
agents:
`, o.mailEvery, o.urgentEvery, o.failEvery, s.branch, o.gate, filepath.Join(soak, "claude"))
	for i := 1; i <= o.agents; i++ {
		home := filepath.Join(soak, "home", fmt.Sprintf("a%d", i))
		if err := os.MkdirAll(home, 0o755); err != nil {
			return nil, err
		}
		fmt.Fprintf(&cfg, "  - {name: a%d, role: You do the tasks on the board., env: {HOME: %q}}\n", i, home)
	}
	if o.pprof > 0 {
		if s.pprofAddr, err = harness.FreeAddr(); err != nil {
			return nil, err
		}
	}
	s.config = filepath.Join(top, "swarmd.yaml")
	if err := os.WriteFile(s.config, []byte(fmt.Sprintf("repo: %q\n", repo)+cfg.String()), 0o644); err != nil {
		return nil, err
	}
	return s, nil
}

// isolation is the daemon's own line about what isolates the sessions.
func (s *swarm) isolation() string {
	b, _ := os.ReadFile(s.clogs)
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, `"isolation`) {
			if i := strings.Index(l, `"msg":"`); i >= 0 {
				m := l[i+7:]
				if j := strings.Index(m, `"`); j >= 0 {
					return m[:j]
				}
			}
		}
	}
	return "isolation: (the daemon log does not say)"
}

// cgroupDir is the daemon's cgroup for its trees, from its log.
var cgroupRe = regexp.MustCompile(`under (/sys/fs/cgroup/[^ ]+) `)

func (s *swarm) cgroupDir() string {
	m := cgroupRe.FindStringSubmatch(s.isolation())
	if m == nil {
		return ""
	}
	return m[1]
}

// daemon is one running swarmd.
type daemon struct {
	*harness.Process
	addr    string
	logPath string
}

func (s *swarm) start() (*daemon, error) {
	cfg, err := os.ReadFile(s.config)
	if err != nil {
		return nil, err
	}
	addr := ""
	if m := regexp.MustCompile(`listen: "([^"]+)"`).FindSubmatch(cfg); m != nil {
		addr = string(m[1])
	}
	cmd := exec.Command(s.bin, "run", "--config", s.config, "--log-format", "json")
	cmd.Dir = s.repo
	if s.pprofAddr != "" {
		cmd.Env = append(os.Environ(), "SWARMD_PPROF_ADDR="+s.pprofAddr)
	}
	// If the harness dies, the daemon stops its agents and exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	p, err := harness.StartProcess(cmd, s.clogs)
	if err != nil {
		return nil, err
	}
	return &daemon{Process: p, addr: addr, logPath: s.clogs}, nil
}

func (d *daemon) pid() int { return d.Cmd.Process.Pid }

func (d *daemon) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	c := http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := c.Get("http://" + d.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-d.Done:
			return fmt.Errorf("swarmd exited before it was ready (%v); its log is %s", d.Cmd.ProcessState, d.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("swarmd not ready after %v; its log is %s", limit, d.logPath)
		}
	}
}

// profiles takes two CPU profiles of the daemon, o.pprof long each, and two
// heap profiles (after a GC): a minute into the run, and shortly before its
// end, so that what grows between them shows (go tool pprof -top
// -diff_base early late); and the goroutines at the end.
func (s *swarm) profiles(ctx context.Context, o options) {
	take := func(name, path string) {
		c := http.Client{Timeout: o.pprof + 30*time.Second}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.pprofAddr+path, nil)
		if err != nil {
			return
		}
		resp, err := c.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak: profile:", err)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode == http.StatusOK {
			path := filepath.Join(s.top, name)
			if err := os.WriteFile(path, b, 0o644); err == nil {
				fmt.Printf("soak: profile %s\n", path)
			}
		}
	}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !wait(time.Minute) {
		return
	}
	cpu := fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(o.pprof.Seconds()))
	take("heap-early.pprof", "/debug/pprof/heap?gc=1")
	take("cpu-early.pprof", cpu)
	if late := o.duration - time.Minute - 2*o.pprof - 15*time.Second; late > 0 && wait(late) {
		take("cpu-late.pprof", cpu)
		take("heap-late.pprof", "/debug/pprof/heap?gc=1")
		take("goroutines-late.txt", "/debug/pprof/goroutine?debug=1")
	}
}

// feed keeps backlog tasks OPEN on the board, as an operator (or a planner
// agent) adding work would: what the agents claim is replaced twice a
// second, unless maxQueue tasks wait in the merge queue: the agents then
// wait for the queue, and the run stays in a steady state (a queue that
// fell further behind every minute would be the run's growth, not
// swarmd's).
func feed(ctx context.Context, ro *sql.DB, board *taskboard.Board, backlog, maxQueue int, added *atomic.Int64) error {
	body := strings.Repeat("Change the repository as the title says, keep the tests green, and commit. ", 4)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		var open, queued int
		if err := ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state = 'OPEN'`).Scan(&open); err != nil {
			return err
		}
		if err := ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM merge_queue WHERE state IN ('queued', 'testing')`).Scan(&queued); err != nil {
			return err
		}
		if queued >= maxQueue {
			open = backlog
		}
		for range backlog - open {
			n := added.Add(1)
			if _, err := board.Add(ctx, taskboard.NewTask{Title: fmt.Sprintf("soak change %d", n), Body: body}); err != nil {
				return fmt.Errorf("add a task: %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// watch holds the dashboard's live event stream open, reading and
// dropping what it pushes, and reconnects if it ends.
func watch(ctx context.Context, addr string, n *atomic.Int64) {
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/events", nil)
		if err != nil {
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			c, _ := io.Copy(io.Discard, resp.Body)
			n.Add(c)
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// sample is one look at everything that could grow.
type sample struct {
	t        time.Duration
	at       time.Time
	sessions int64 // ended, swarmd_sessions_total summed
	outcomes map[string]int64

	rss, heap                     int64
	threads, fds, goroutines      int
	series                        int // lines of /metrics: a label that grows shows here
	mounts, children, cgroups     int
	cpuMS, childCPUMS             float64 // cumulative
	cpuPerSession, childPerSess   float64 // over the interval
	rate                          float64 // sessions/s over the interval
	settleP50, gapP50, gapP90     float64 // ms, sessions ended in the interval
	durP50                        float64 // ms, a session's own run
	promptP50, spawnP50           float64 // ms, BuildingPrompt's and Spawning's time, from the event log
	maxEvent                      int64
	statusMS, snapshotMS          float64
	db, wal                       int64
	logBytes, logFiles            int64
	archBytes, archFiles          int64
	otherBytes, otherFiles        int64 // the state dir but logs, archive, worktrees and swarm.db*
	gitBytes, loose, packs, refs  int64
	reflogBytes, gitWorktreeAdmin int64
	worktrees                     int64
	rows                          map[string]int64
	openTasks, queued             int64
	toolCalls, merged             int64 // from the metrics
}

var bigTables = []string{"events", "sessions", "tool_calls", "messages", "tasks", "merge_queue", "review_rounds"}

func (s *swarm) sample(ctx context.Context, d *daemon, ro *sql.DB, prev *sample) (sample, error) {
	var sm sample
	sm.at = time.Now()
	if prev != nil {
		sm.t = prev.t + sm.at.Sub(prev.at)
	}
	pid := d.pid()
	m, err := scrape(d.addr)
	if err != nil {
		return sm, fmt.Errorf("scrape /metrics: %w", err)
	}
	sm.outcomes = map[string]int64{}
	for k, v := range m {
		if o, ok := strings.CutPrefix(k, "swarmd_sessions_total{"); ok {
			sm.sessions += int64(v)
			if i := strings.Index(o, `outcome="`); i >= 0 {
				name := o[i+9:]
				name = name[:strings.IndexByte(name, '"')]
				sm.outcomes[name] += int64(v)
			}
		}
		if strings.HasPrefix(k, "swarmd_tool_calls_total{") {
			sm.toolCalls += int64(v)
		}
		if k == `swarmd_merges_total{result="merged"}` {
			sm.merged = int64(v)
		}
	}
	sm.series = len(m)
	sm.goroutines = int(m["go_goroutines"])
	sm.heap = int64(m["go_memstats_heap_inuse_bytes"])
	st, err := procStatus(pid)
	if err != nil {
		return sm, err
	}
	sm.rss, sm.threads = st.rss, st.threads
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		sm.fds = len(ents)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid)); err == nil {
		sm.mounts = bytes.Count(b, []byte{'\n'})
	}
	sm.children = children(pid)
	if cg := s.cgroupDir(); cg != "" {
		sm.cgroups = countDirs(cg)
	}
	self, kids, err := cpuTicks(pid)
	if err != nil {
		return sm, err
	}
	sm.cpuMS, sm.childCPUMS = float64(self)*10, float64(kids)*10
	if prev != nil {
		if n := float64(sm.sessions - prev.sessions); n > 0 {
			sm.cpuPerSession = (sm.cpuMS - prev.cpuMS) / n
			sm.childPerSess = (sm.childCPUMS - prev.childCPUMS) / n
		}
		sm.rate = float64(sm.sessions-prev.sessions) / sm.at.Sub(prev.at).Seconds()
		if err := latencies(ctx, ro, prev.at, sm.at, &sm); err != nil {
			return sm, err
		}
		if err := turnaround(ctx, ro, prev.maxEvent, &sm); err != nil {
			return sm, err
		}
	}
	// An operator's look: the CLI's status, the dashboard's snapshot.
	t0 := time.Now()
	if out, err := exec.Command(s.bin, "status", "--json", "--config", s.config).CombinedOutput(); err != nil {
		return sm, fmt.Errorf("swarmd status: %v: %s", err, out)
	}
	sm.statusMS = ms(time.Since(t0))
	t0 = time.Now()
	if err := get(d.addr, "/api/snapshot"); err != nil {
		return sm, err
	}
	sm.snapshotMS = ms(time.Since(t0))

	sm.db, sm.wal = size(s.dbPath), size(s.dbPath+"-wal")
	sm.logBytes, sm.logFiles = du(filepath.Join(s.stateDir, "logs"))
	sm.archBytes, sm.archFiles = du(filepath.Join(s.stateDir, "archive"))
	sm.otherBytes, sm.otherFiles = stateRest(s.stateDir)
	git := filepath.Join(s.repo, ".git")
	sm.gitBytes, _ = du(git)
	sm.reflogBytes, _ = du(filepath.Join(git, "logs"))
	sm.loose, sm.packs = objects(git)
	sm.refs = refs(git)
	if ents, err := os.ReadDir(filepath.Join(git, "worktrees")); err == nil {
		sm.gitWorktreeAdmin = int64(len(ents))
	}
	if ents, err := os.ReadDir(filepath.Join(s.stateDir, "worktrees")); err == nil {
		sm.worktrees = int64(len(ents))
	}
	sm.rows = map[string]int64{}
	for _, t := range bigTables {
		var n int64
		if err := ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t).Scan(&n); err != nil {
			return sm, fmt.Errorf("count %s: %w", t, err)
		}
		sm.rows[t] = n
	}
	if err := ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state = 'OPEN'`).Scan(&sm.openTasks); err != nil {
		return sm, err
	}
	if prev == nil {
		if err := ro.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM events`).Scan(&sm.maxEvent); err != nil {
			return sm, err
		}
	}
	if err := ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM merge_queue WHERE state IN ('queued', 'testing')`).Scan(&sm.queued); err != nil {
		return sm, err
	}
	return sm, nil
}

// latencies are the medians of the sessions that ended in (from, to]: from
// a session's end to its outcome committed (settle), from the agent's
// previous session's end to this one's start (gap: the daemon's turnaround,
// its prompt, its worktree's switch to the task's line, the spawn), and the
// session's own run.
func latencies(ctx context.Context, ro *sql.DB, from, to time.Time, sm *sample) error {
	rows, err := ro.QueryContext(ctx, `SELECT s.started_at, s.ended_at, COALESCE(s.settled_at, ''), COALESCE(p.ended_at, '')
		FROM sessions s LEFT JOIN sessions p ON p.agent = s.agent AND p.seq = s.seq - 1
		WHERE s.ended_at > ? AND s.ended_at <= ?`,
		from.UTC().Format(store.TimeLayout), to.UTC().Format(store.TimeLayout))
	if err != nil {
		return fmt.Errorf("sessions of the interval: %w", err)
	}
	defer rows.Close()
	var settle, gap, dur []float64
	for rows.Next() {
		var a, b, c, d string
		if err := rows.Scan(&a, &b, &c, &d); err != nil {
			return err
		}
		started, ok1 := parseT(a)
		ended, ok2 := parseT(b)
		if ok1 && ok2 {
			dur = append(dur, ms(ended.Sub(started)))
		}
		if settled, ok := parseT(c); ok && ok2 {
			settle = append(settle, ms(settled.Sub(ended)))
		}
		if prevEnd, ok := parseT(d); ok && ok1 {
			gap = append(gap, ms(started.Sub(prevEnd)))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	sm.settleP50 = quantile(settle, 0.5)
	sm.gapP50, sm.gapP90 = quantile(gap, 0.5), quantile(gap, 0.9)
	sm.durP50 = quantile(dur, 0.5)
	return nil
}

// turnaround reads the daemon's own part of the time between two sessions
// from the event log (the events after id after): how long each prompt
// took to build (from the agent's entering BuildingPrompt, or waking from
// idle, to PromptReady: the task's claim, the worktree put on the task's
// line, the prompt written) and to spawn (PromptReady to SessionStarted),
// without the time an idle agent waited for work.
func turnaround(ctx context.Context, ro *sql.DB, after int64, sm *sample) error {
	rows, err := ro.QueryContext(ctx, `SELECT e.id, e.event, e.at,
		(SELECT p.at FROM events p WHERE p.agent = e.agent AND p.id < e.id AND p.to_state = 'BuildingPrompt' ORDER BY p.id DESC LIMIT 1),
		(SELECT p.at FROM events p WHERE p.agent = e.agent AND p.id < e.id AND p.event = 'PromptReady' ORDER BY p.id DESC LIMIT 1)
		FROM events e WHERE e.id > ? AND e.event IN ('PromptReady', 'SessionStarted')`, after)
	if err != nil {
		return fmt.Errorf("turnaround: %w", err)
	}
	defer rows.Close()
	sm.maxEvent = after
	var build, spawn []float64
	for rows.Next() {
		var id int64
		var ev, at string
		var entered, ready sql.NullString
		if err := rows.Scan(&id, &ev, &at, &entered, &ready); err != nil {
			return err
		}
		sm.maxEvent = max(sm.maxEvent, id)
		t, ok := parseT(at)
		if !ok {
			continue
		}
		if p, ok := parseT(entered.String); ev == "PromptReady" && ok {
			build = append(build, ms(t.Sub(p)))
		}
		if p, ok := parseT(ready.String); ev == "SessionStarted" && ok {
			spawn = append(spawn, ms(t.Sub(p)))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// Events of the other kinds after the last of these are read again
	// next time: harmless, only these two kinds are counted.
	sm.promptP50, sm.spawnP50 = quantile(build, 0.5), quantile(spawn, 0.5)
	return nil
}

func parseT(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(store.TimeLayout, s)
	return t, err == nil
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return v[min(len(v)-1, int(q*float64(len(v))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func fmtDur(d time.Duration) string { return d.Round(time.Second).String() }

// scrape reads /metrics into name{labels} -> value.
func scrape(addr string) (map[string]float64, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		out[l[:i]] = v
	}
	return out, sc.Err()
}

func get(addr, path string) error {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return err
}

type status struct {
	rss     int64
	threads int
}

func procStatus(pid int) (status, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return status{}, err
	}
	var st status
	for l := range strings.Lines(string(b)) {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			st.rss = kb << 10
		case "Threads:":
			st.threads, _ = strconv.Atoi(f[1])
		}
	}
	return st, nil
}

// cpuTicks is utime+stime and cutime+cstime of pid, in clock ticks (10 ms).
func cpuTicks(pid int) (self, children int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	var v [4]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
	}
	return v[0] + v[1], v[2] + v[3], nil
}

// children counts the processes whose parent is pid (zombies included).
func children(pid int) int {
	ents, _ := os.ReadDir("/proc")
	want := "PPid:\t" + strconv.Itoa(pid) + "\n"
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err == nil && bytes.Contains(b, []byte(want)) {
			n++
		}
	}
	return n
}

// countDirs counts the directories under dir (not itself): cgroups.
func countDirs(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() && p != dir {
			n++
		}
		return nil
	})
	return n
}

func size(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// du is the bytes and the regular files under dir.
func du(dir string) (bytes, files int64) {
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile
		}
		if e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				bytes += fi.Size()
				files++
			}
		}
		return nil
	})
	return bytes, files
}

// stateRest is the bytes and files of the state directory but logs/,
// archive/, worktrees/ and swarm.db*: the sockets, the quarantines, the
// merge gate's HOMEs, the files given to sessions.
func stateRest(dir string) (bytes, files int64) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		switch n := e.Name(); {
		case n == "logs" || n == "archive" || n == "worktrees" || strings.HasPrefix(n, "swarm.db"):
		case e.IsDir():
			b, f := du(filepath.Join(dir, n))
			bytes, files = bytes+b, files+f
		case e.Type().IsRegular():
			if fi, err := e.Info(); err == nil {
				bytes, files = bytes+fi.Size(), files+1
			}
		}
	}
	return bytes, files
}

// objects counts the loose objects and the packs of a repository.
func objects(git string) (loose, packs int64) {
	dir := filepath.Join(git, "objects")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if len(e.Name()) != 2 || !e.IsDir() {
			continue
		}
		if fs, err := os.ReadDir(filepath.Join(dir, e.Name())); err == nil {
			loose += int64(len(fs))
		}
	}
	ps, _ := filepath.Glob(filepath.Join(dir, "pack", "*.pack"))
	return loose, int64(len(ps))
}

// refs counts the refs: loose ref files and packed-refs lines.
func refs(git string) int64 {
	var n int64
	_ = filepath.WalkDir(filepath.Join(git, "refs"), func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			n++
		}
		return nil
	})
	if b, err := os.ReadFile(filepath.Join(git, "packed-refs")); err == nil {
		for l := range strings.Lines(string(b)) {
			if l != "" && l[0] != '#' && l[0] != '^' {
				n++
			}
		}
	}
	return n
}

// restartCheck starts the daemon once more on the run's history: how long
// it takes to be ready, and what its start does with the logs the run left
// (a daemon's stop leaves them; the next start archives them).
func (s *swarm) restartCheck() error {
	lb, lf := du(filepath.Join(s.stateDir, "logs"))
	ab, af := du(filepath.Join(s.stateDir, "archive"))
	t0 := time.Now()
	d, err := s.start()
	if err != nil {
		return err
	}
	defer d.Kill()
	if err := d.waitReady(context.Background(), 5*time.Minute); err != nil {
		return err
	}
	ready := time.Since(t0)
	// The archive is written once the start has settled: wait until
	// logs/ has shrunk and stopped shrinking (or 3 minutes).
	deadline := time.Now().Add(3 * time.Minute)
	var lb2, lf2 int64
	last := lf
	for {
		time.Sleep(time.Second)
		lb2, lf2 = du(filepath.Join(s.stateDir, "logs"))
		if lf2 < lf && lf2 >= last || time.Now().After(deadline) {
			break
		}
		last = lf2
	}
	archived := time.Since(t0)
	ab2, af2 := du(filepath.Join(s.stateDir, "archive"))
	d.idle()
	quiet := s.quietLook(d)
	rss := int64(0)
	if st, err := procStatus(d.pid()); err == nil {
		rss = st.rss
	}
	stopErr := d.Stop(2 * time.Minute)
	fmt.Printf("\nan operator's look at an idle daemon: with no history %s; on the run's history %s\n", s.quiet0, quiet)
	fmt.Printf("\nrestart on the run's history: ready (/readyz 200) %.2fs after exec; logs/ %d files, %.1f MB -> %d files, %.1f MB (settled %.1fs after exec); archive/ %d files, %.1f MB -> %d files, %.1f MB; RSS %.1f MB; stop: %s\n",
		ready.Seconds(), lf, mb(lb), lf2, mb(lb2), archived.Seconds(), af, mb(ab), af2, mb(ab2), mb(rss), errOr(stopErr, "exit 0"))
	return stopErr
}

// sessionFailures counts the sessions that did not succeed, by outcome,
// abort reason and reason.
func sessionFailures(path string) ([]string, error) {
	ro, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer ro.Close()
	rows, err := ro.Query(`SELECT outcome, abort_reason, substr(reason, 1, 80), COUNT(*) FROM sessions
		WHERE outcome <> 'success' GROUP BY 1, 2, 3 ORDER BY 4 DESC`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var o, a, r string
		var n int
		if err := rows.Scan(&o, &a, &r, &n); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%6d  %s %s: %s", n, o, a, r))
	}
	return out, rows.Err()
}

// logSummary counts the daemon log's warn and error lines by level and
// message (the whole log: both starts).
func logSummary(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lvl := regexp.MustCompile(`"level":"(warn|error|fatal)"`)
	msg := regexp.MustCompile(`"msg":"((?:[^"\\]|\\.)*)"`)
	for sc.Scan() {
		l := sc.Bytes()
		m := lvl.FindSubmatch(l)
		if m == nil {
			continue
		}
		k := string(m[1]) + ": "
		if mm := msg.FindSubmatch(l); mm != nil {
			k += string(mm[1])
		}
		if len(k) > 160 {
			k = k[:160] + "..."
		}
		counts[k]++
	}
	var out []string
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%6d  %s", n, k))
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// tableBytes is each table's bytes in swarm.db, its indexes included
// (SQLite's dbstat), with its rows.
type tableSize struct {
	name        string
	bytes, rows int64
}

func tableBytes(path string) ([]tableSize, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	owner := map[string]string{}
	rows, err := db.Query(`SELECT name, tbl_name FROM sqlite_schema WHERE type IN ('table', 'index')`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var n, t string
		if err := rows.Scan(&n, &t); err != nil {
			rows.Close()
			return nil, err
		}
		owner[n] = t
	}
	rows.Close()
	rows, err = db.Query(`SELECT name, SUM(pgsize) FROM dbstat GROUP BY name`)
	if err != nil {
		return nil, fmt.Errorf("dbstat: %w", err)
	}
	by := map[string]int64{}
	for rows.Next() {
		var n string
		var b int64
		if err := rows.Scan(&n, &b); err != nil {
			rows.Close()
			return nil, err
		}
		t := owner[n]
		if t == "" {
			t = n
		}
		by[t] += b
	}
	rows.Close()
	var out []tableSize
	for t, b := range by {
		ts := tableSize{name: t, bytes: b}
		if !strings.HasPrefix(t, "sqlite_") {
			_ = db.QueryRow(`SELECT COUNT(*) FROM "` + t + `"`).Scan(&ts.rows)
		}
		out = append(out, ts)
	}
	slices.SortFunc(out, func(a, b tableSize) int { return int(b.bytes - a.bytes) })
	return out, nil
}

func printTables(w io.Writer, ts []tableSize, sessions int64, month float64) {
	var total int64
	for _, t := range ts {
		total += t.bytes
	}
	fmt.Fprintf(w, "\nswarm.db after the stop: %.1f MB in pages (dbstat), %d sessions: %.0f bytes per session\n", mb(total), sessions, float64(total)/float64(max(sessions, 1)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table (with its indexes)\tMB\trows\tbytes/row\tbytes/session\tmonth (MB)\t")
	for _, t := range ts {
		if t.bytes < 64<<10 {
			continue
		}
		perRow := 0.0
		if t.rows > 0 {
			perRow = float64(t.bytes) / float64(t.rows)
		}
		perSess := float64(t.bytes) / float64(max(sessions, 1))
		fmt.Fprintf(tw, "%s\t%.2f\t%d\t%.0f\t%.0f\t%.0f\t\n", t.name, mb(t.bytes), t.rows, perRow, perSess, perSess*month/(1<<20))
	}
	tw.Flush()
}

// column is one figure of the samples.
type column struct {
	name string
	get  func(sample) float64
	// perSession: a figure per session (CPU, latency), compared first
	// quarter against last; otherwise a level, fitted against sessions.
	perSession bool
	format     string
}

func columns() []column {
	f := func(v int64) float64 { return float64(v) }
	return []column{
		{"daemon RSS (MB)", func(s sample) float64 { return mb(s.rss) }, false, "%.1f"},
		{"Go heap in use (MB)", func(s sample) float64 { return mb(s.heap) }, false, "%.1f"},
		{"threads", func(s sample) float64 { return float64(s.threads) }, false, "%.0f"},
		{"open fds", func(s sample) float64 { return float64(s.fds) }, false, "%.0f"},
		{"goroutines", func(s sample) float64 { return float64(s.goroutines) }, false, "%.0f"},
		{"/metrics series", func(s sample) float64 { return float64(s.series) }, false, "%.0f"},
		{"mounts (daemon's ns)", func(s sample) float64 { return float64(s.mounts) }, false, "%.0f"},
		{"child processes", func(s sample) float64 { return float64(s.children) }, false, "%.0f"},
		{"cgroups", func(s sample) float64 { return float64(s.cgroups) }, false, "%.0f"},
		{"swarm.db (MB)", func(s sample) float64 { return mb(s.db) }, false, "%.2f"},
		{"swarm.db-wal (MB)", func(s sample) float64 { return mb(s.wal) }, false, "%.2f"},
		{"logs/ (MB)", func(s sample) float64 { return mb(s.logBytes) }, false, "%.2f"},
		{"logs/ files", func(s sample) float64 { return f(s.logFiles) }, false, "%.0f"},
		{"archive/ (MB)", func(s sample) float64 { return mb(s.archBytes) }, false, "%.2f"},
		{"state dir, the rest (MB)", func(s sample) float64 { return mb(s.otherBytes) }, false, "%.2f"},
		{"state dir, the rest (files)", func(s sample) float64 { return f(s.otherFiles) }, false, "%.0f"},
		{".git (MB)", func(s sample) float64 { return mb(s.gitBytes) }, false, "%.2f"},
		{".git loose objects", func(s sample) float64 { return f(s.loose) }, false, "%.0f"},
		{".git packs", func(s sample) float64 { return f(s.packs) }, false, "%.0f"},
		{".git refs", func(s sample) float64 { return f(s.refs) }, false, "%.0f"},
		{".git reflogs (MB)", func(s sample) float64 { return mb(s.reflogBytes) }, false, "%.3f"},
		{"worktrees", func(s sample) float64 { return f(s.worktrees) }, false, "%.0f"},
		{"rows: events", func(s sample) float64 { return f(s.rows["events"]) }, false, "%.0f"},
		{"rows: sessions", func(s sample) float64 { return f(s.rows["sessions"]) }, false, "%.0f"},
		{"rows: tool_calls", func(s sample) float64 { return f(s.rows["tool_calls"]) }, false, "%.0f"},
		{"rows: messages", func(s sample) float64 { return f(s.rows["messages"]) }, false, "%.0f"},
		{"rows: tasks", func(s sample) float64 { return f(s.rows["tasks"]) }, false, "%.0f"},
		{"rows: merge_queue", func(s sample) float64 { return f(s.rows["merge_queue"]) }, false, "%.0f"},
		{"tasks OPEN", func(s sample) float64 { return f(s.openTasks) }, false, "%.0f"},
		{"merge queue depth", func(s sample) float64 { return f(s.queued) }, false, "%.0f"},
		{"daemon CPU (ms/session)", func(s sample) float64 { return s.cpuPerSession }, true, "%.2f"},
		{"children CPU (ms/session)", func(s sample) float64 { return s.childPerSess }, true, "%.1f"},
		{"sessions/s", func(s sample) float64 { return s.rate }, true, "%.2f"},
		{"settle p50 (ms)", func(s sample) float64 { return s.settleP50 }, true, "%.2f"},
		{"gap p50 (ms)", func(s sample) float64 { return s.gapP50 }, true, "%.1f"},
		{"gap p90 (ms)", func(s sample) float64 { return s.gapP90 }, true, "%.1f"},
		{"session run p50 (ms)", func(s sample) float64 { return s.durP50 }, true, "%.1f"},
		{"prompt build p50 (ms)", func(s sample) float64 { return s.promptP50 }, true, "%.1f"},
		{"spawn p50 (ms)", func(s sample) float64 { return s.spawnP50 }, true, "%.1f"},
		{"swarmd status (ms)", func(s sample) float64 { return s.statusMS }, true, "%.1f"},
		{"GET /api/snapshot (ms)", func(s sample) float64 { return s.snapshotMS }, true, "%.1f"},
	}
}

func report(w io.Writer, o options, ss []sample, wall time.Duration, added, streamed int64) {
	last := ss[len(ss)-1]
	fmt.Fprintf(w, "\n%d sessions in %.1f min (%.2f/s), %d tasks added, %d merged, %d tool calls, %.1f MB pushed to the dashboard; outcomes %v\n",
		last.sessions, wall.Minutes(), float64(last.sessions)/wall.Seconds(), added, last.merged, last.toolCalls, mb(streamed), last.outcomes)
	cols := columns()
	// The samples, a table per group of columns.
	groups := [][]int{}
	for i := 0; i < len(cols); i += 9 {
		g := []int{}
		for j := i; j < min(i+9, len(cols)); j++ {
			g = append(g, j)
		}
		groups = append(groups, g)
	}
	for _, g := range groups {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "\nt\tsessions\t")
		for _, i := range g {
			fmt.Fprintf(tw, "%s\t", cols[i].name)
		}
		fmt.Fprintln(tw)
		for _, s := range ss {
			fmt.Fprintf(tw, "%s\t%d\t", fmtDur(s.t), s.sessions)
			for _, i := range g {
				v := cols[i].get(s)
				if math.IsNaN(v) || (cols[i].perSession && s.t == 0) {
					fmt.Fprint(tw, "-\t")
					continue
				}
				fmt.Fprintf(tw, cols[i].format+"\t", v)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}

	// Verdicts.
	fmt.Fprintf(w, "\nverdicts: levels fitted against sessions ended (least squares over the %d samples), projected to %.0f sessions (a month at the default pace: 20 agents, a session each per 5 minutes)\n", len(ss), o.monthSessions)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "column\tfirst\tlast\tslope per 1k sessions\tR²\tmonth\tverdict\t")
	for _, c := range cols {
		if c.perSession {
			continue
		}
		var xs, ys []float64
		for _, s := range ss {
			xs, ys = append(xs, float64(s.sessions)), append(ys, c.get(s))
		}
		slope, r2 := fit(xs, ys)
		k := slope * 1000
		month := ys[0] + slope*o.monthSessions
		fmt.Fprintf(tw, "%s\t"+c.format+"\t"+c.format+"\t%.4g\t%.2f\t%.4g\t%s\t\n", c.name, ys[0], ys[len(ys)-1], k, r2, month, verdictLevel(ys, slope, r2, last.sessions))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nper-session figures: the first quarter of the intervals against the last (means)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "column\tfirst quarter\tlast quarter\tchange\tslope per 1k sessions\tverdict\t")
	iv := ss[1:] // intervals: every sample but the first
	q := max(1, len(iv)/4)
	for _, c := range cols {
		if !c.perSession || len(iv) < 2 {
			continue
		}
		a, b := meanOf(iv[:q], c.get), meanOf(iv[len(iv)-q:], c.get)
		var xs, ys []float64
		for _, s := range iv {
			if v := c.get(s); !math.IsNaN(v) {
				xs, ys = append(xs, float64(s.sessions)), append(ys, v)
			}
		}
		slope, _ := fit(xs, ys)
		ch := (b - a) / a * 100
		verdict := "flat"
		switch {
		case ch > 20:
			verdict = "RISES with history"
		case ch > 10:
			verdict = "rises a little"
		case ch < -10:
			verdict = "falls"
		}
		fmt.Fprintf(tw, "%s\t"+c.format+"\t"+c.format+"\t%+.0f%%\t%.3g\t%s\t\n", c.name, a, b, ch, slope*1000, verdict)
	}
	tw.Flush()
}

func meanOf(ss []sample, get func(sample) float64) float64 {
	var sum float64
	n := 0
	for _, s := range ss {
		if v := get(s); !math.IsNaN(v) {
			sum += v
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// fit is the least-squares slope of ys against xs, and R².
func fit(xs, ys []float64) (slope, r2 float64) {
	n := float64(len(xs))
	if n < 2 {
		return 0, 0
	}
	var sx, sy, sxx, sxy, syy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
		syy += ys[i] * ys[i]
	}
	vx := sxx - sx*sx/n
	vy := syy - sy*sy/n
	if vx == 0 {
		return 0, 0
	}
	slope = (sxy - sx*sy/n) / vx
	if vy > 0 {
		r2 = (slope * (sxy - sx*sy/n)) / vy
	}
	return slope, r2
}

// verdictLevel says whether a level grows with the sessions: a fit that
// explains most of its variance and moves it by more than a tenth (or by
// more than noise for a count that starts at zero) over the run.
func verdictLevel(ys []float64, slope, r2 float64, sessions int64) string {
	change := slope * float64(sessions)
	base := math.Max(math.Abs(ys[0]), math.Abs(ys[len(ys)-1]))
	switch {
	case base == 0 || math.Abs(change) < 0.1*base && math.Abs(change) < 1:
		return "flat"
	case r2 >= 0.8 && change > 0.1*base:
		return "GROWS with sessions"
	case r2 >= 0.5 && change > 0.1*base:
		return "grows (noisy)"
	case r2 >= 0.5 && change < -0.1*base:
		return "falls"
	default:
		return "no trend"
	}
}

func writeCSV(path string, ss []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	cols := columns()
	head := []string{"t_s", "sessions"}
	for _, c := range cols {
		head = append(head, c.name)
	}
	_ = cw.Write(head)
	for _, s := range ss {
		rec := []string{strconv.FormatFloat(s.t.Seconds(), 'f', 0, 64), strconv.FormatInt(s.sessions, 10)}
		for _, c := range cols {
			rec = append(rec, strconv.FormatFloat(c.get(s), 'g', 6, 64))
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		f.Close()
		return err
	}
	return errors.Join(f.Close())
}
