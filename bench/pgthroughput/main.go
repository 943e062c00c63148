// Command pgthroughput compares a swarm of several swarmd daemons sharing one
// PostgreSQL server with one daemon running as many agents on its own SQLite
// file (issue 28), on trivial tasks: every session says DONE at once, so
// what is measured is the daemons' and the store's own work per task.
//
// The PostgreSQL server is a real one started here (initdb, pg_ctl, a Unix
// socket in a temporary directory, as internal/pgtest does) with fsync,
// synchronous_commit and full_page_writes on, as in production; its data
// directory is on the same file system as the SQLite daemon's state
// directory. Each PostgreSQL daemon has its own clone of the repository and
// its own state directory; agent names are unique across the swarm.
//
// Per setup: the daemons are started, N tasks are added behind one gate
// task (BLOCKED, so that no agent starts before the measurement does), and
// once every worker is idle the harness closes the gate, which opens all N
// tasks in one transaction. From then until the last task is CLOSED it
// measures the wall time and the CPU time (utime+stime from /proc/PID/stat)
// of each daemon (and its lease guard) and, on PostgreSQL, of the
// postmaster and its children (the live ones, plus the postmaster's cutime
// and cstime for the backends that exited). The sessions' own CPU (the
// daemons' reaped children) is printed beside, not counted.
//
// Under that load the harness also sends urgent messages, one at a time,
// from its own store connection (outside the swarm) to sleeper agents
// (sessions that sleep, claiming no tasks): on PostgreSQL they run on the
// daemons other than the first, so each message crosses from another
// process through the server's NOTIFY to the daemon that cancels; on
// SQLite they run on the one daemon. As in bench/interrupt the latency is
// the daemon's own figure, logged with the UrgentMessage transition: from
// the message's created_at, taken before its send's transaction, to the
// cancel signal; the report also gives the send alone and what follows
// its return (the commit's way to the daemon). The same number of messages is
// sent in both setups, spread evenly over the tasks, so both carry the same
// extra sessions: 40 by default, which both send in full. One message waits
// for the last one's interrupt and for a Running sleeper, so with more than
// that (150 was the default until 2026-11-29) only some are sent, the more
// the sooner a setup's sleepers come back, each as soon as it can: the
// p99s are then not of the same thing, and the report says so.
//
// Afterwards it checks that every task was CLOSED and DONE exactly once,
// that every daemon exited cleanly and that no process of the swarm or of
// the server is left; it exits 1 otherwise.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

type options struct {
	bin          string
	tasks        int
	daemons      int // PostgreSQL daemons
	agents       int // workers per PostgreSQL daemon
	sqliteAgents int // workers of the SQLite daemon (0: daemons × agents)
	urgent       int // urgent messages per setup
	rounds       int
	timeout      time.Duration
	parent       string
	setups       string        // under parent: every setup's files, removed at the end
	pgStats      bool          // load pg_stat_statements and print where the server's time went
	only         string        // "postgres" or "sqlite": run that setup alone
	sessionNice  int           // limits.session_nice of every daemon
	profile      string        // a directory for each daemon's CPU profile of the load
	idle         time.Duration // a window before the gate opens whose CPU is reported
	lockStats    bool          // sample the swarm's writers' lock in pg_locks during the load
	delay        time.Duration // added each way between the daemons and the server (harness.DelayProxy)
	analyze      bool          // ANALYZE the database once the gate opened, as autoanalyze would later
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/swarmd", "swarmd binary")
	flag.IntVar(&o.tasks, "tasks", 1500, "tasks per setup")
	flag.IntVar(&o.daemons, "daemons", 3, "daemons sharing the PostgreSQL server")
	flag.IntVar(&o.agents, "agents", 30, "worker agents per PostgreSQL daemon")
	flag.IntVar(&o.sqliteAgents, "sqlite-agents", 0, "worker agents of the SQLite daemon (0: daemons × agents)")
	flag.IntVar(&o.urgent, "urgent", 40, "urgent messages per setup, spread evenly over its tasks (0: none); more than the sleepers can take while the tasks last are not all sent, and the report says so")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds; each runs both setups back to back, PostgreSQL first in even rounds")
	flag.BoolVar(&o.pgStats, "pgstats", false, "load pg_stat_statements into the server and print the statements that took its time (a diagnosis: it costs a little)")
	flag.StringVar(&o.only, "only", "", "postgres or sqlite: run that setup alone (a diagnosis, no comparison)")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "each setup's run")
	flag.IntVar(&o.sessionNice, "session-nice", 0, "limits.session_nice of every daemon (0 to 19)")
	flag.StringVar(&o.profile, "profile", "", "a directory: each daemon's CPU profile of 15 s of the load goes there as postgres-daemonN.pprof or sqlite-daemon1.pprof (a diagnosis: go tool pprof reads it)")
	flag.DurationVar(&o.idle, "idle", 0, "a window of the swarm at rest, every worker idle, before the gate opens: its CPU is reported per second (a diagnosis: what the load's figures carry that is not the tasks')")
	flag.DurationVar(&o.delay, "delay", 0, "added to every connection of the PostgreSQL daemons each way, by a proxy in the harness, as a network between them and the server would (a round trip takes twice it more; the proxy's CPU is the harness's, not counted)")
	flag.BoolVar(&o.analyze, "analyze", false, "ANALYZE the PostgreSQL database right after the gate opens, as the server's autoanalyze does within a minute or two on a swarm that runs longer than this benchmark: the daemons' plans are then made from statistics that saw the backlog (the ANALYZE's CPU is counted as the database's)")
	flag.BoolVar(&o.lockStats, "lockstats", false, "sample pg_locks every 10 ms during the load and report how often the swarm's writers' lock and the appenders' turn (events) were held and how many waited for each (a diagnosis: the samples cost the server a little)")
	flag.Parse()
	o.parent = os.Getenv("TMPDIR")
	if o.sqliteAgents == 0 {
		o.sqliteAgents = o.daemons * o.agents
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgthroughput:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (err error) {
	if o.only != "" && o.only != "postgres" && o.only != "sqlite" {
		return fmt.Errorf("-only %q: want postgres or sqlite", o.only)
	}
	if o.bin, err = filepath.Abs(o.bin); err != nil {
		return err
	}
	var pg *postgres
	if o.only != "sqlite" {
		if pg, err = startPostgres(o.parent, o.pgStats); err != nil {
			return fmt.Errorf("start PostgreSQL: %w", err)
		}
		defer func() {
			if cerr := pg.close(); cerr != nil && err == nil {
				err = fmt.Errorf("stop PostgreSQL: %w", cerr)
			}
		}()
		fmt.Printf("PostgreSQL %s, fsync=%s synchronous_commit=%s full_page_writes=%s; data in %s\n",
			pg.query("SHOW server_version"), pg.query("SHOW fsync"), pg.query("SHOW synchronous_commit"),
			pg.query("SHOW full_page_writes"), pg.data)
	}
	// The daemons reach the server through a delaying proxy with -delay;
	// the harness's own connection goes straight to it.
	through := func(url string) (string, error) { return url, nil }
	if o.delay > 0 && pg != nil {
		via, report, stop, err := harness.Delayed(ctx, pg.url("postgres"), o.delay)
		if err != nil {
			return err
		}
		defer stop()
		through = via
		fmt.Println("the daemons' " + report)
	}
	// Every setup's files stay until the run ends: a setup that removed its
	// tens of thousands of logs made every file the next one created cost
	// several times its usual figure (harness.CreateCost).
	if o.setups, err = os.MkdirTemp(o.parent, "swarmd-pgthroughput-setups-"); err != nil {
		return err
	}
	var results []result
	failed := false
	defer func() {
		if !failed && err == nil {
			os.RemoveAll(o.setups)
		} else {
			fmt.Fprintf(os.Stderr, "pgthroughput: kept every setup's files in %s\n", o.setups)
		}
	}()
	for r := range o.rounds {
		setups := []string{"postgres", "sqlite"}
		if r%2 == 1 {
			slices.Reverse(setups)
		}
		for _, s := range setups {
			if o.only != "" && o.only != s {
				continue
			}
			var sp setup
			if s == "postgres" {
				db := "swarm" + strconv.Itoa(r)
				if err := pg.createDB(db); err != nil {
					return err
				}
				if o.pgStats {
					if err := pg.exec(db, "CREATE EXTENSION pg_stat_statements"); err != nil {
						return err
					}
				}
				daemonURL, err := through(pg.url(db))
				if err != nil {
					return err
				}
				sp = setup{name: fmt.Sprintf("postgres %d×%d", o.daemons, o.agents), url: pg.url(db), daemonURL: daemonURL, dbName: db, daemons: o.daemons, agents: o.agents, pg: pg}
			} else {
				sp = setup{name: fmt.Sprintf("sqlite 1×%d", o.sqliteAgents), daemons: 1, agents: o.sqliteAgents}
			}
			res, err := runSetup(ctx, o, sp)
			if err != nil {
				return fmt.Errorf("%s: %w", sp.name, err)
			}
			fmt.Println(res)
			for _, v := range res.violations {
				fmt.Println("  VIOLATION:", v)
			}
			failed = failed || len(res.violations) > 0
			results = append(results, res)
		}
	}
	var pgs, sqs []result
	for _, r := range results {
		if r.pg {
			pgs = append(pgs, r)
		} else {
			sqs = append(sqs, r)
		}
	}
	for i := range min(len(pgs), len(sqs)) {
		p, s := pgs[i], sqs[i]
		fmt.Printf("round %d PG/SQLite: tasks/s %.2fx; CPU per task %.2fx (daemons %.2fx)",
			i+1, p.rate()/s.rate(), p.cpuPerTask(p.daemonCPU+p.dbCPU)/s.cpuPerTask(s.daemonCPU+s.dbCPU),
			p.cpuPerTask(p.daemonCPU)/s.cpuPerTask(s.daemonCPU))
		if len(p.latencies) > 0 && len(s.latencies) > 0 {
			fmt.Printf("; urgent p99 %v vs %v", p.p(0.99), s.p(0.99))
		}
		fmt.Println()
	}
	if failed {
		return errors.New("a promise broke (see VIOLATION above)")
	}
	return nil
}

// setup is one side of the comparison.
type setup struct {
	name string
	url  string // "" : each daemon's own SQLite file (then daemons is 1)
	// daemonURL is url as the daemons reach it: through the proxy with
	// -delay.
	daemonURL string
	dbName    string
	daemons   int
	agents    int // workers per daemon
	pg        *postgres
}

type result struct {
	name                        string
	pg                          bool
	tasks                       int
	wall                        time.Duration
	daemonCPU, dbCPU, childCPU  time.Duration
	guardCPU                    time.Duration // the lease guards', counted in daemonCPU
	createCost                  time.Duration // a file's creation just before the setup (harness.CreateCost)
	perDaemon                   []int         // tasks each daemon's agents closed
	latencies                   []time.Duration
	sends                       []time.Duration // each urgent message's Send, commit included
	afterSend                   []time.Duration // each interrupt's latency less its message's Send
	roundTrips                  int64           // the daemons' write round trips over their lives
	messages, asked             int
	loadBefore, loadAfter, gate string
	added                       string // how long adding the tasks took, one transaction each
	idle                        cpu    // -idle: the CPU of the window at rest
	idleFor                     time.Duration
	commits                     int                      // transactions committed in the database during the run
	walSyncs                    int                      // the server's WAL flushes to disk during the run (pg_stat_wal)
	writers                     []writerLoad             // each daemon's store writer over the load, from its metrics
	lock                        lockLoad                 // -lockstats: the swarm's writers' lock over the load
	statements                  string                   // -pgstats: the top statements, calls|ms|query
	dbRoles                     map[string]time.Duration // dbCPU by the server process's role
	violations                  []string
}

func (r result) rate() float64 { return float64(r.tasks) / r.wall.Seconds() }

func (r result) cpuPerTask(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond) / float64(r.tasks)
}

func (r result) p(q float64) time.Duration {
	return harness.Percentile(slices.Clone(r.latencies), q).Round(10 * time.Microsecond)
}

func (r result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-14s tasks=%d wall=%.2fs tasks/s=%.1f  CPU ms/task: daemons=%.2f database=%.2f total=%.2f  (sessions %.2f, not counted)  closed by daemon %v",
		r.name, r.tasks, r.wall.Seconds(), r.rate(), r.cpuPerTask(r.daemonCPU), r.cpuPerTask(r.dbCPU),
		r.cpuPerTask(r.daemonCPU+r.dbCPU), r.cpuPerTask(r.childCPU), r.perDaemon)
	fmt.Fprintf(&b, "\n%-14s creating a file cost %v just before", "", r.createCost)
	if r.messages > 0 {
		pct := func(ds []time.Duration, q float64) time.Duration {
			return harness.Percentile(slices.Clone(ds), q).Round(10 * time.Microsecond)
		}
		// The message's created_at is taken before its transaction, so the
		// daemon's latency includes the whole send, its commit among it.
		fmt.Fprintf(&b, "\n%-14s urgent messages=%d of %d interrupts=%d send->cancel p50=%v p99=%v max=%v (the send: p50=%v p99=%v; after it returned: p50=%v p99=%v)",
			"", r.messages, r.asked, len(r.latencies), r.p(0.5), r.p(0.99), r.p(1),
			pct(r.sends, 0.5), pct(r.sends, 0.99), pct(r.afterSend, 0.5), pct(r.afterSend, 0.99))
	}
	if r.messages < r.asked {
		// Each message waits for the last one's interrupt and for a
		// Running sleeper: a setup whose sleepers come back sooner sends
		// more, at other moments, and the p99s are not of the same thing.
		fmt.Fprintf(&b, "\n%-14s only %d of %d urgent messages were sent before the tasks ran out: compare p99s of equal counts (-urgent)", "", r.messages, r.asked)
	}
	if r.guardCPU > 0 {
		fmt.Fprintf(&b, "\n%-14s of the daemons' CPU, their lease guards' processes: %.2f ms/task", "", r.cpuPerTask(r.guardCPU))
	}
	if r.pg {
		fmt.Fprintf(&b, "\n%-14s transactions committed in the database: %d, %.1f per task (WAL flushes %.1f per task); the daemons' write transactions made %d round trips over their lives, %.1f per task",
			"", r.commits, float64(r.commits)/float64(r.tasks), float64(r.walSyncs)/float64(r.tasks), r.roundTrips, float64(r.roundTrips)/float64(r.tasks))
	}
	if len(r.dbRoles) > 0 {
		roles := slices.Collect(maps.Keys(r.dbRoles))
		slices.SortFunc(roles, func(a, b string) int { return cmp.Compare(r.dbRoles[b], r.dbRoles[a]) })
		var parts []string
		for _, k := range roles {
			if r.dbRoles[k] > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f", k, r.cpuPerTask(r.dbRoles[k])))
			}
		}
		fmt.Fprintf(&b, "\n%-14s the database's CPU by process, ms/task: %s", "", strings.Join(parts, ", "))
	}
	if len(r.writers) > 0 {
		var busy []string
		var writes, waited float64
		for _, w := range r.writers {
			busy = append(busy, fmt.Sprintf("%.0f%%", 100*w.busy/w.over.Seconds()))
			writes += w.writes
			waited += w.waited
		}
		mean := 0.0
		if writes > 0 {
			mean = 1000 * waited / writes
		}
		fmt.Fprintf(&b, "\n%-14s store writers over the load (metrics): busy %s of the time; %.1f writes a task, waiting %.2f ms each on average",
			"", strings.Join(busy, " "), writes/float64(r.tasks), mean)
	}
	if r.lock.samples > 0 {
		fmt.Fprintf(&b, "\n%-14s the swarm's writers' lock (pg_locks, %d samples over the load): held in %.0f%% of them, %.2f writers waiting for it on average",
			"", r.lock.samples, 100*float64(r.lock.held)/float64(r.lock.samples), float64(r.lock.waiting)/float64(r.lock.samples))
		fmt.Fprintf(&b, "\n%-14s the appenders' turn (events): held in %.0f%% of them, %.2f waiting for it on average",
			"", 100*float64(r.lock.appendHeld)/float64(r.lock.samples), float64(r.lock.appendWaiting)/float64(r.lock.samples))
	}
	if r.statements != "" {
		fmt.Fprintf(&b, "\n%-14s statements by server time (calls | ms | query):\n%s", "", r.statements)
	}
	if r.idleFor > 0 {
		per := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / r.idleFor.Seconds() }
		fmt.Fprintf(&b, "\n%-14s at rest before the gate (%v): CPU ms/s: daemons=%.2f database=%.2f sessions=%.2f; over the load's wall time that is %.2f ms/task of the daemons and %.2f of the database",
			"", r.idleFor, per(r.idle.daemons), per(r.idle.db), per(r.idle.children),
			per(r.idle.daemons)*r.wall.Seconds()/float64(r.tasks), per(r.idle.db)*r.wall.Seconds()/float64(r.tasks))
	}
	fmt.Fprintf(&b, "\n%-14s load average before: %s; after: %s; tasks added in %s; gate opened in %s", "", r.loadBefore, r.loadAfter, r.added, r.gate)
	return b.String()
}

// The workers' session says DONE at once; the sleepers' sleeps until an
// urgent message cancels it (sh's sleep ends on the signal).
const (
	workScript  = `cat >/dev/null; echo DONE`
	sleepScript = `cat >/dev/null; exec sleep 86400`
	gateAgent   = "gate" // no daemon runs it: the gate task is assigned to it
)

func runSetup(ctx context.Context, o options, sp setup) (res result, err error) {
	res.name, res.pg, res.tasks = sp.name, sp.url != "", o.tasks
	root, err := os.MkdirTemp(o.setups, "setup-")
	if err != nil {
		return res, err
	}
	defer func() {
		if err != nil || len(res.violations) > 0 {
			fmt.Fprintf(os.Stderr, "pgthroughput: %s: kept the daemons' logs and state in %s\n", sp.name, root)
		}
	}()
	if res.createCost, err = harness.CreateCost(root); err != nil {
		return res, err
	}
	first, err := harness.RepoIn(root, "repo")
	if err != nil {
		return res, err
	}
	// Sleepers: on PostgreSQL one on each daemon but the first (the mail
	// crosses daemons); on SQLite as many, on the one daemon.
	nSleepers := 0
	if o.urgent > 0 {
		nSleepers = max(1, o.daemons-1)
	}
	w := newWatch()
	var ds []*daemon
	defer func() {
		for _, d := range ds {
			d.kill()
		}
	}()
	var workers, sleepers, all []string
	for i := range sp.daemons {
		repo := first
		if i > 0 {
			repo = filepath.Join(root, "clone"+strconv.Itoa(i+1))
			if out, err := exec.Command("git", "clone", "-q", first, repo).CombinedOutput(); err != nil {
				return res, fmt.Errorf("git clone: %v: %s", err, out)
			}
		}
		var mine, mySleepers []string
		for a := range sp.agents {
			mine = append(mine, fmt.Sprintf("d%d-w%d", i+1, a+1))
		}
		switch {
		case nSleepers == 0:
		case sp.url == "" && i == 0:
			for s := range nSleepers {
				mySleepers = append(mySleepers, fmt.Sprintf("d1-s%d", s+1))
			}
		case sp.url != "" && (i > 0 || sp.daemons == 1):
			mySleepers = []string{fmt.Sprintf("d%d-s1", i+1)}
		}
		listen, err := harness.FreeAddr()
		if err != nil {
			return res, err
		}
		cfg, err := writeConfig(repo, sp.daemonURL, listen, o.sessionNice, mine, mySleepers)
		if err != nil {
			return res, err
		}
		d, err := startDaemon(o.bin, cfg, repo, i, w, pprofAddr(o.profile, i))
		if err != nil {
			return res, err
		}
		d.metrics = listen
		ds = append(ds, d)
		workers, sleepers = append(workers, mine...), append(sleepers, mySleepers...)
	}
	all = append(append(slices.Clone(workers), sleepers...), gateAgent)
	deadline := time.Now().Add(o.timeout)

	target := sp.url
	if target == "" {
		target = filepath.Join(first, ".swarm", "swarm.db")
	} else {
		// Named, so that the server's work for the harness (its poll of
		// closed tasks, its urgent messages) is left out of the database's
		// CPU, as on SQLite, where it runs in this process.
		target += "&application_name=" + harnessApp
	}
	db, err := openStore(ctx, target, deadline, ds)
	if err != nil {
		return res, err
	}
	defer db.Close()
	mb, err := mailbox.New(ctx, db, mailbox.Options{Agents: all})
	if err != nil {
		return res, err
	}
	board := taskboard.New(db, taskboard.Options{AutoClose: true})
	addStart := time.Now()
	gate, err := board.Add(ctx, taskboard.NewTask{Title: "gate", Assignee: gateAgent})
	if err != nil {
		return res, fmt.Errorf("add the gate: %w", err)
	}
	ids := make(map[int64]bool, o.tasks)
	for i := range o.tasks {
		t, err := board.Add(ctx, taskboard.NewTask{Title: fmt.Sprintf("task %d", i+1), After: []int64{gate.ID}})
		if err != nil {
			return res, fmt.Errorf("add task %d: %w", i+1, err)
		}
		ids[t.ID] = true
	}
	res.added = time.Since(addStart).Round(time.Millisecond).String()
	// Every worker idle (its first session said DONE, nothing to do),
	// every sleeper Running, and nothing moved for half a second.
	if err := w.waitSettled(ctx, workers, sleepers, deadline, ds); err != nil {
		return res, err
	}

	if o.idle > 0 {
		c0 := cpuOf(ds, sp.pg)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(o.idle):
		}
		c1 := cpuOf(ds, sp.pg)
		res.idle = cpu{daemons: c1.daemons - c0.daemons, children: c1.children - c0.children, db: c1.db - c0.db}
		res.idleFor = o.idle
	}
	var commits, syncs0 int
	if sp.pg != nil {
		if o.pgStats {
			if err := sp.pg.exec(sp.dbName, "SELECT pg_stat_statements_reset()"); err != nil {
				return res, err
			}
		}
		commits, _ = strconv.Atoi(sp.pg.queryDB(sp.dbName, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))
		syncs0, _ = strconv.Atoi(sp.pg.queryDB(sp.dbName, "SELECT wal_sync FROM pg_stat_wal"))
	}
	res.loadBefore = loadavg()
	writers0, err := writersOf(ctx, ds)
	if err != nil {
		return res, err
	}
	before := cpuOf(ds, sp.pg)
	// The gate: claimed, started and done by its assignee; AutoClose
	// closes it, which opens every task in the same transaction.
	g0 := time.Now()
	h := taskboard.Holder{Agent: gateAgent, Session: "gate"}
	if _, err := board.Claim(ctx, gate.ID, gateAgent, "gate"); err != nil {
		return res, fmt.Errorf("claim the gate: %w", err)
	}
	if _, err := board.Start(ctx, gate.ID, h); err != nil {
		return res, fmt.Errorf("start the gate: %w", err)
	}
	if _, err := board.Done(ctx, gate.ID, h, "open"); err != nil {
		return res, fmt.Errorf("close the gate: %w", err)
	}
	t0 := time.Now()
	res.gate = t0.Sub(g0).Round(time.Millisecond).String()
	if o.analyze && sp.pg != nil {
		if err := sp.pg.exec(sp.dbName, "ANALYZE"); err != nil {
			return res, err
		}
	}
	sampled := make(chan lockLoad, 1)
	stopSampling := make(chan struct{})
	if o.lockStats && sp.pg != nil {
		go func() { sampled <- sampleLock(ctx, db, stopSampling) }()
	} else {
		sampled <- lockLoad{}
	}
	profiled := make(chan error, 1)
	if o.profile != "" {
		go func() {
			select {
			case <-ctx.Done():
				profiled <- ctx.Err()
				return
			case <-time.After(5 * time.Second):
			}
			kind := "sqlite"
			if sp.url != "" {
				kind = "postgres"
			}
			profiled <- profileLoad(ctx, o.profile, kind, ds, 15)
		}()
	} else {
		profiled <- nil
	}
	defer func() {
		if perr := <-profiled; perr != nil && err == nil {
			err = perr
		}
	}()

	// While tasks remain: poll the count of closed tasks, and send urgent
	// message k once k/(urgent+1) of the tasks are closed, the previous
	// one has interrupted its sleeper and the next sleeper is Running.
	closed := 0
	next := 0 // the next message
	var inflight bool
	var sentAt time.Time
	// The poll is cheap but, on PostgreSQL, counted in the server's CPU:
	// a few per second. The wall time is read from the tasks' events, not
	// from the poll.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for closed < o.tasks {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("timed out with %d of %d tasks closed", closed, o.tasks)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case l := <-w.latency:
			if inflight {
				res.latencies = append(res.latencies, l)
				res.afterSend = append(res.afterSend, l-res.sends[len(res.sends)-1])
				inflight = false
			}
		case <-tick.C:
			if closed, err = countClosed(ctx, db, gate.ID); err != nil {
				return res, err
			}
			if inflight && time.Since(sentAt) > 10*time.Second {
				res.violations = append(res.violations, fmt.Sprintf("urgent message %d: no interrupt within 10s", next))
				inflight = false
			}
		}
		if err := exitedEarly(ds); err != nil {
			return res, err
		}
		if !inflight && next < o.urgent && closed >= o.tasks*(next+1)/(o.urgent+1) {
			to := sleepers[next%len(sleepers)]
			if w.isRunning(to) {
				// Expected before the send: the daemon may log the
				// interrupt before Send returns.
				w.expect(to)
				s0 := time.Now()
				_, err := mb.Send(ctx, mailbox.Draft{From: "operator", To: to, Subject: "stop", Body: "urgent " + strconv.Itoa(next), Urgent: true})
				res.sends = append(res.sends, time.Since(s0))
				if err != nil {
					return res, fmt.Errorf("send urgent message %d: %w", next, err)
				}
				inflight, sentAt = true, time.Now()
				next++
			}
		}
	}
	after := cpuOf(ds, sp.pg)
	close(stopSampling)
	res.lock = <-sampled
	writers1, err := writersOf(ctx, ds)
	if err != nil {
		return res, err
	}
	for i := range writers1 {
		res.writers = append(res.writers, writers1[i].minus(writers0[i]))
	}
	res.loadAfter = loadavg()
	if sp.pg != nil {
		// Read after the snapshot: psql's own backend is not counted.
		n, _ := strconv.Atoi(sp.pg.queryDB(sp.dbName, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))
		res.commits = n - commits
		syncs, _ := strconv.Atoi(sp.pg.queryDB(sp.dbName, "SELECT wal_sync FROM pg_stat_wal"))
		res.walSyncs = syncs - syncs0
		if o.pgStats {
			top := func(order string, n int) string {
				return sp.pg.queryDB(sp.dbName, `SELECT calls, round(total_exec_time::numeric, 0), left(regexp_replace(query, '\s+', ' ', 'g'), 140)
					FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
					ORDER BY `+order+` DESC LIMIT `+strconv.Itoa(n))
			}
			// Each call is a round trip for a daemon and work for a
			// backend however short it runs: the most called, too.
			res.statements = top("total_exec_time", 20) + "\n" + strings.Repeat(" ", 15) + "statements by calls:\n" + top("calls", 25)
		}
	}
	res.messages, res.asked = next, o.urgent
	if inflight {
		select {
		case l := <-w.latency:
			res.latencies = append(res.latencies, l)
			res.afterSend = append(res.afterSend, l-res.sends[len(res.sends)-1])
		case <-time.After(10 * time.Second):
			res.violations = append(res.violations, "the last urgent message interrupted nothing within 10s")
		}
	}
	res.daemonCPU, res.dbCPU, res.childCPU = after.daemons-before.daemons, after.db-before.db, after.children-before.children
	res.guardCPU = after.guards - before.guards
	res.dbRoles = map[string]time.Duration{}
	for k, v := range after.dbRoles {
		res.dbRoles[k] = v - before.dbRoles[k]
	}

	last, perDaemon, bad, err := checkTasks(ctx, db, ids, sp.daemons)
	if err != nil {
		return res, err
	}
	res.violations = append(res.violations, bad...)
	res.perDaemon = perDaemon
	res.wall = last.Sub(t0)

	for i, d := range ds {
		if err := d.stop(60 * time.Second); err != nil {
			res.violations = append(res.violations, fmt.Sprintf("daemon %d: %v (log: %s)", i+1, err, d.logPath))
		}
	}
	w.mu.Lock()
	res.roundTrips = w.roundTrips
	w.mu.Unlock()
	if n := harness.Survivors(root); n > 0 {
		res.violations = append(res.violations, fmt.Sprintf("%d processes of the swarm left running", n))
	}
	return res, nil
}

// writeConfig writes repo/swarmd.yaml: workers say DONE at once, sleepers
// sleep and claim no task.
func writeConfig(repo, url, listen string, nice int, workers, sleepers []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\n", listen)
	if nice > 0 {
		fmt.Fprintf(&b, "limits: {session_nice: %d}\n", nice)
	}
	if url != "" {
		fmt.Fprintf(&b, "store: %q\n", url)
	}
	fmt.Fprintf(&b, `defaults:
  backend: work
  min_session_interval: 0s
  session_timeout: 24h
  grace_period: 2s
backends:
  work: {type: command, command: sh, args: [-c, %q]}
  sleep: {type: command, command: sh, args: [-c, %q]}
agents:
`, workScript, sleepScript)
	for _, n := range workers {
		fmt.Fprintf(&b, "  - {name: %s, role: x}\n", n)
	}
	for _, n := range sleepers {
		fmt.Fprintf(&b, "  - {name: %s, role: x, backend: sleep, claims: false}\n", n)
	}
	path := filepath.Join(repo, "swarmd.yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// openStore opens the swarm's store once the daemons have created it.
func openStore(ctx context.Context, target string, deadline time.Time, ds []*daemon) (*store.DB, error) {
	for {
		db, err := store.Open(ctx, target, store.Options{NoCreate: !store.IsPostgres(target)})
		if err == nil {
			return db, nil
		}
		// A schema newer than the harness's (a -bin built from another
		// tree) stays newer: waiting out the deadline would not help.
		if errors.Is(err, store.ErrSchemaTooNew) || time.Now().After(deadline) {
			return nil, fmt.Errorf("open the store: %w", err)
		}
		if err := exitedEarly(ds); err != nil {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countClosed(ctx context.Context, db *store.DB, gate int64) (int, error) {
	var n int
	err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state = 'CLOSED' AND id <> ?`, gate).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count closed tasks: %w", err)
	}
	return n, nil
}

// checkTasks checks that each task of ids is CLOSED and was DONE exactly
// once, and returns when the last one closed and how many each daemon's
// agents closed (by the d<N>- prefix of the claimant).
func checkTasks(ctx context.Context, db *store.DB, ids map[int64]bool, daemons int) (last time.Time, perDaemon []int, bad []string, err error) {
	r := db.ReadSQL()
	perDaemon = make([]int, daemons)
	rows, err := r.QueryContext(ctx, `SELECT id, state, claimant FROM tasks`)
	if err != nil {
		return last, nil, nil, fmt.Errorf("read tasks: %w", err)
	}
	seen := 0
	for rows.Next() {
		var id int64
		var state, claimant string
		if err := rows.Scan(&id, &state, &claimant); err != nil {
			rows.Close()
			return last, nil, nil, err
		}
		if !ids[id] {
			continue
		}
		seen++
		if state != "CLOSED" {
			bad = append(bad, fmt.Sprintf("task %d is %s, not CLOSED", id, state))
		}
		var d int
		if _, err := fmt.Sscanf(claimant, "d%d-", &d); err == nil && d >= 1 && d <= daemons {
			perDaemon[d-1]++
		}
	}
	rows.Close()
	if seen != len(ids) {
		bad = append(bad, fmt.Sprintf("%d tasks on the board, want %d", seen, len(ids)))
	}
	rows, err = r.QueryContext(ctx, `SELECT task_id, to_state, at FROM events WHERE task_id IS NOT NULL AND to_state IN ('DONE', 'CLOSED')`)
	if err != nil {
		return last, nil, nil, fmt.Errorf("read events: %w", err)
	}
	done, closedN := map[int64]int{}, map[int64]int{}
	for rows.Next() {
		var id int64
		var to, at string
		if err := rows.Scan(&id, &to, &at); err != nil {
			rows.Close()
			return last, nil, nil, err
		}
		if !ids[id] {
			continue
		}
		if to == "DONE" {
			done[id]++
			continue
		}
		closedN[id]++
		if t, err := store.ParseTime(at); err == nil && t.After(last) {
			last = t
		}
	}
	rows.Close()
	for id := range ids {
		if done[id] != 1 || closedN[id] != 1 {
			if len(bad) < 50 {
				bad = append(bad, fmt.Sprintf("task %d DONE %d times, CLOSED %d times; want once each", id, done[id], closedN[id]))
			}
		}
	}
	return last, perDaemon, bad, nil
}

// watch follows the daemons' logs: which agents are idle, which are
// Running, and the interrupt latency of each UrgentMessage transition of
// an agent it expects one from.
type watch struct {
	mu       sync.Mutex
	idle     map[string]bool
	running  map[string]bool
	expected map[string]bool
	moved    time.Time // the last idle or Running change
	latency  chan time.Duration
	// roundTrips sums the daemons' write transactions' round trips over
	// their lives, from their last log line (PostgreSQL only).
	roundTrips int64
}

func newWatch() *watch {
	return &watch{idle: map[string]bool{}, running: map[string]bool{}, expected: map[string]bool{},
		latency: make(chan time.Duration, 16)}
}

type logLine struct {
	Msg, Agent, To, Event string
	Latency               float64 `json:"interrupt_latency"`
	RoundTrips            int64   `json:"write_round_trips"` // on "store closed"
}

func (w *watch) line(l logLine) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case l.Msg == "store closed":
		w.roundTrips += l.RoundTrips
	case strings.HasPrefix(l.Msg, "idle:"):
		w.idle[l.Agent], w.moved = true, time.Now()
	case strings.HasPrefix(l.Msg, "awake:"):
		w.idle[l.Agent], w.moved = false, time.Now()
	case l.Msg == "transition":
		w.running[l.Agent], w.moved = l.To == "Running", time.Now()
		if l.Event == "UrgentMessage" && w.expected[l.Agent] {
			delete(w.expected, l.Agent)
			w.latency <- time.Duration(l.Latency * float64(time.Second))
		}
	}
}

func (w *watch) expect(agent string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expected[agent] = true
}

func (w *watch) isRunning(agent string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running[agent]
}

func (w *watch) waitSettled(ctx context.Context, workers, sleepers []string, deadline time.Time, ds []*daemon) error {
	for {
		w.mu.Lock()
		ok := time.Since(w.moved) > 500*time.Millisecond
		waiting := ""
		for _, a := range workers {
			if !w.idle[a] {
				ok, waiting = false, a+" idle"
			}
		}
		for _, a := range sleepers {
			if !w.running[a] {
				ok, waiting = false, a+" Running"
			}
		}
		w.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: timed out", waiting)
		}
		if err := exitedEarly(ds); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// daemon is one running swarmd; its JSON log goes to logPath and to the
// watch.
type daemon struct {
	cmd     *exec.Cmd
	metrics string // its listen address
	logPath string
	pprof   string // where it serves its profiles, "" nowhere
	exited  chan struct{}
	once    sync.Once
}

// pprofAddr is the address daemon i serves its profiles on when the run
// takes profiles, "" otherwise.
func pprofAddr(dir string, i int) string {
	if dir == "" {
		return ""
	}
	return fmt.Sprintf("127.0.0.1:%d", 16061+i)
}

// profileLoad saves a CPU profile of secs seconds of each daemon into
// dir, as KIND-daemonN.pprof (kind: postgres or sqlite).
func profileLoad(ctx context.Context, dir, kind string, ds []*daemon, secs int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	errs := make(chan error, len(ds))
	for i, d := range ds {
		go func() {
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", d.pprof, secs)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				errs <- err
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- fmt.Errorf("profile daemon %d: %w", i+1, err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-daemon%d.pprof", kind, i+1)))
			if err == nil {
				_, err = io.Copy(f, resp.Body)
				err = errors.Join(err, f.Close())
			}
			errs <- err
		}()
	}
	var err error
	for range ds {
		err = errors.Join(err, <-errs)
	}
	return err
}

func startDaemon(bin, config, repo string, i int, w *watch, pprof string) (*daemon, error) {
	logPath := filepath.Join(filepath.Dir(repo), fmt.Sprintf("daemon%d.log", i+1))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "--config", config, "--log-format", "json")
	cmd.Dir = repo
	if pprof != "" {
		cmd.Env = append(os.Environ(), "SWARMD_PPROF_ADDR="+pprof)
	}
	cmd.Stdout = f
	pipe, err := cmd.StderrPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start daemon %d: %w", i+1, err)
	}
	d := &daemon{cmd: cmd, logPath: logPath, exited: make(chan struct{}), pprof: pprof}
	go func() {
		defer close(d.exited)
		sc := bufio.NewScanner(io.TeeReader(pipe, f))
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			var l logLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				w.line(l)
			}
		}
		_, _ = io.Copy(f, pipe) // a line too long for the scanner: keep the rest
		_ = cmd.Wait()
		f.Close()
	}()
	return d, nil
}

// exitedEarly names the first daemon that has exited: none may before
// the harness stops them.
func exitedEarly(ds []*daemon) error {
	for i, d := range ds {
		select {
		case <-d.exited:
			return fmt.Errorf("daemon %d exited early; see %s", i+1, d.logPath)
		default:
		}
	}
	return nil
}

// stop sends SIGTERM and waits for a clean exit.
func (d *daemon) stop(grace time.Duration) error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		if c := d.cmd.ProcessState.ExitCode(); c != 0 {
			return fmt.Errorf("exited %d after SIGTERM", c)
		}
		return nil
	case <-time.After(grace):
		d.kill()
		return fmt.Errorf("did not stop within %s of SIGTERM", grace)
	}
}

func (d *daemon) kill() {
	select {
	case <-d.exited:
	default:
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// cpu is a snapshot of the CPU time used so far.
type cpu struct {
	daemons  time.Duration            // the daemons and their lease guards
	guards   time.Duration            // the lease guards alone
	children time.Duration            // the daemons' reaped children: sessions
	db       time.Duration            // the postmaster and its children, live and exited
	dbRoles  map[string]time.Duration // db by the server process's role
}

// harnessApp is the application_name of the harness's own connections to
// the PostgreSQL server.
const harnessApp = "pgthroughput"

func cpuOf(ds []*daemon, pg *postgres) cpu {
	c := cpu{dbRoles: map[string]time.Duration{}}
	kids := children()
	for _, d := range ds {
		st, ok := readStat(d.cmd.Process.Pid)
		if !ok {
			continue
		}
		c.daemons += st.self
		c.children += st.reaped
		for _, k := range kids[d.cmd.Process.Pid] {
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", k)); strings.Contains(string(cmd), "lease-guard") {
				if g, ok := readStat(k); ok {
					c.daemons += g.self
					c.guards += g.self
				}
			}
		}
	}
	if pg != nil {
		master := pg.master()
		harness := pg.backendsOf(harnessApp)
		for _, pid := range pgtest.Processes(pg.data) {
			if harness[pid] {
				continue
			}
			if st, ok := readStat(pid); ok {
				c.db += st.self
				role := pgRole(pid)
				if pid == master {
					c.db += st.reaped
					c.dbRoles["exited (autovacuum workers, psql)"] += st.reaped
					role = "postmaster"
				}
				c.dbRoles[role] += st.self
			}
		}
	}
	return c
}

// pgRole names a server process by its title: a client's backend, or the
// background process it is ("walwriter", "checkpointer", ...).
func pgRole(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	t := strings.TrimPrefix(strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")), "postgres: ")
	switch {
	case strings.Contains(t, "[local]"):
		return "backends"
	case strings.HasPrefix(t, "autovacuum worker"):
		return "autovacuum worker"
	}
	return t
}

type stat struct {
	ppid         int
	self, reaped time.Duration // utime+stime, cutime+cstime
}

func readStat(pid int) (stat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, state
	if len(f) < 15 {
		return stat{}, false
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	tick := time.Second / clockTicks
	return stat{ppid: int(n(4)), self: time.Duration(n(14)+n(15)) * tick, reaped: time.Duration(n(16)+n(17)) * tick}, true
}

// children maps each pid to its children's.
func children() map[int][]int {
	out := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			out[st.ppid] = append(out[st.ppid], pid)
		}
	}
	return out
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// postgres is a server started here, durable: fsync, synchronous_commit
// and full_page_writes on (internal/pgtest's exported Start turns them off
// for speed). As root it runs as the postgres user, as pgtest does.
type postgres struct {
	dir, data, bin string
	sudo           []string
}

func startPostgres(parent string, stats bool) (*postgres, error) {
	bin, err := pgtest.FindBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "swarmd-pgthroughput-pg-")
	if err != nil {
		return nil, err
	}
	p := &postgres{dir: dir, data: filepath.Join(dir, "data"), bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			runuser = "/usr/sbin/runuser"
		}
		p.sudo = []string{runuser, "-u", "postgres", "--"}
	}
	if out, err := p.run("initdb", "-D", p.data, "-U", pgtest.Superuser, "-A", "trust", "--no-instructions", "-E", "UTF8", "--locale", "C"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	opts := fmt.Sprintf("-c listen_addresses='' -k %s -c fsync=on -c synchronous_commit=on -c full_page_writes=on", dir)
	if stats {
		opts += " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
	}
	if out, err := p.run("pg_ctl", "start", "-w", "-t", "60", "-D", p.data, "-l", filepath.Join(dir, "server.log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_ctl start: %w: %s%s", err, out, log)
	}
	return p, nil
}

func (p *postgres) run(prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append(append(slices.Clone(p.sudo), filepath.Join(p.bin, prog)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = p.dir
	return cmd.CombinedOutput()
}

func (p *postgres) url(db string) string {
	return "postgres://" + pgtest.Superuser + "@/" + db + "?host=" + p.dir + "&sslmode=disable"
}

func (p *postgres) query(sql string) string { return p.queryDB("postgres", sql) }

// queryDB runs sql in db with psql: its unaligned output, "?" on an error.
func (p *postgres) queryDB(db, sql string) string {
	out, err := p.run("psql", "-X", "-A", "-t", "-h", p.dir, "-U", pgtest.Superuser, "-d", db, "-c", sql)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// backendsOf is the set of the server's backends serving connections
// named app. psql's own backend, which asks, is counted like the other
// psql calls': a few milliseconds a snapshot.
func (p *postgres) backendsOf(app string) map[int]bool {
	out, err := p.run("psql", "-X", "-A", "-t", "-h", p.dir, "-U", pgtest.Superuser, "-d", "postgres", "-c",
		"SELECT pid FROM pg_stat_activity WHERE application_name = '"+app+"'")
	if err != nil {
		return nil
	}
	pids := map[int]bool{}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids[pid] = true
		}
	}
	return pids
}

func (p *postgres) exec(db, sql string) error {
	if out, err := p.run("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", p.dir, "-U", pgtest.Superuser, "-d", db, "-c", sql); err != nil {
		return fmt.Errorf("psql -d %s -c %q: %w: %s", db, sql, err, out)
	}
	return nil
}

func (p *postgres) createDB(name string) error {
	return p.exec("postgres", `CREATE DATABASE "`+name+`"`)
}

// master is the postmaster's pid, from the first line of postmaster.pid.
func (p *postgres) master() int {
	b, _ := os.ReadFile(filepath.Join(p.data, "postmaster.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// close stops the server and checks that none of its processes is left.
func (p *postgres) close() error {
	defer os.RemoveAll(p.dir)
	if out, err := p.run("pg_ctl", "stop", "-w", "-t", "30", "-m", "fast", "-D", p.data); err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pids := pgtest.Processes(p.data); len(pids) > 0; pids = pgtest.Processes(p.data) {
		if time.Now().After(deadline) {
			return fmt.Errorf("server processes %v still running 10 s after pg_ctl stop", pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// writerLoad is a daemon's store writer counters (docs/operations.md), or
// their increase over a window.
type writerLoad struct {
	at                   time.Time
	over                 time.Duration // the window, for an increase
	writes, busy, waited float64
}

func (w writerLoad) minus(o writerLoad) writerLoad {
	return writerLoad{over: w.at.Sub(o.at), writes: w.writes - o.writes, busy: w.busy - o.busy, waited: w.waited - o.waited}
}

// writersOf scrapes each daemon's store writer counters.
func writersOf(ctx context.Context, ds []*daemon) ([]writerLoad, error) {
	out := make([]writerLoad, len(ds))
	for i, d := range ds {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metrics+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("daemon %d's metrics: %w", i+1, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("daemon %d's metrics: %w", i+1, err)
		}
		w := writerLoad{at: time.Now()}
		fields := map[string]*float64{
			"swarmd_store_writes_total":              &w.writes,
			"swarmd_store_writer_busy_seconds_total": &w.busy,
			"swarmd_store_writer_wait_seconds_total": &w.waited,
		}
		seen := 0
		for line := range strings.Lines(string(body)) {
			name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
			if p := fields[name]; ok && p != nil {
				if *p, err = strconv.ParseFloat(value, 64); err != nil {
					return nil, fmt.Errorf("daemon %d's metrics: %s: %w", i+1, name, err)
				}
				seen++
			}
		}
		if seen != len(fields) {
			return nil, fmt.Errorf("daemon %d's metrics: %d of the %d store writer counters", i+1, seen, len(fields))
		}
		out[i] = w
	}
	return out, nil
}

// lockLoad is what the samples of the swarm's writers' lock saw.
type lockLoad struct {
	samples, held, waiting int
	// appendHeld, appendWaiting: the same of the appenders' turn.
	appendHeld, appendWaiting int
}

// writersLockSQL counts the holders and waiters of the advisory lock every
// write transaction takes (internal/store: writerLock, 0x53776172 6d64 as
// a bigint key: classid its high half, objid its low), then those of the
// appenders' turn, which the journal's transactions take instead and a
// write transaction before its first event (appendLock, 0x45766e74).
const writersLockSQL = `SELECT
	COUNT(*) FILTER (WHERE granted AND objid = 1634889060), COUNT(*) FILTER (WHERE NOT granted AND objid = 1634889060),
	COUNT(*) FILTER (WHERE granted AND objid = 1165389428), COUNT(*) FILTER (WHERE NOT granted AND objid = 1165389428)
	FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
	AND ((classid = 21367 AND objid = 1634889060) OR (classid = 0 AND objid = 1165389428))`

// sampleLock samples the writers' lock every 10 ms until stop.
func sampleLock(ctx context.Context, db *store.DB, stop <-chan struct{}) lockLoad {
	var l lockLoad
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return l
		case <-stop:
			return l
		case <-tick.C:
		}
		var held, waiting, aheld, awaiting int
		if err := db.ReadSQL().QueryRowContext(ctx, writersLockSQL).Scan(&held, &waiting, &aheld, &awaiting); err != nil {
			continue
		}
		l.samples++
		if held > 0 {
			l.held++
		}
		l.waiting += waiting
		if aheld > 0 {
			l.appendHeld++
		}
		l.appendWaiting += awaiting
	}
}
