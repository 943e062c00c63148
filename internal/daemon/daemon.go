package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/admission"
	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/backup"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/environ"
	"github.com/swarmd/swarmd/internal/gitmaint"
	"github.com/swarmd/swarmd/internal/hooks"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/metrics"
	"github.com/swarmd/swarmd/internal/notify"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/prompt"
	"github.com/swarmd/swarmd/internal/providergate"
	"github.com/swarmd/swarmd/internal/quarantine"
	"github.com/swarmd/swarmd/internal/registry"
	"github.com/swarmd/swarmd/internal/router"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/service"
	"github.com/swarmd/swarmd/internal/settle"
	"github.com/swarmd/swarmd/internal/spend"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
	"github.com/swarmd/swarmd/internal/worktree"
)

// Daemon is one `swarmd run`: everything opened at start and closed at
// exit. Open it, Run it until its context ends, Reload it on SIGHUP, Close
// it. Its fields are grouped by what they serve.
type Daemon struct {
	opts Options
	log  *zap.Logger
	live liveConfig // the config in force, swapped by a reload
	host host       // the state dir's lock and what contains the process trees

	// swarm.db and what keeps its tables
	db      *store.DB
	journal *store.Journal
	mail    *mailbox.Mailbox
	tasks   *taskboard.Board
	merge   mergeWire // the merge queue (nil: none configured)

	trees    *worktree.Manager
	kit      runnerKit // what every runner is built with
	reg      *registry.Registry
	run      agentRun // the runners' context, what recovery found, readiness
	reload   reloading
	router   *router.Router
	metrics  *metrics.Metrics
	serve    operatorSurfaces // the control socket, HTTP, the dashboards
	pusher   *pusher          // pushes branches to cfg.Remote, a service of Run
	health   healthMonitor
	load     storeLoad        // the store's write connection lately, for swarmd status
	notifier *notify.Notifier // tells the operator what needs a person (alerts.go)
	// heldAlerts are alerts raised in Open before the notifier opened
	// (restart recovery's), sent when it does (alerts.go).
	heldAlerts []notify.Alert
	gates      sessionGates  // what a session waits for before it starts
	budget     *spend.Keeper // budgets: spend, marks, pauses
	// tally is every agent's spend as the dashboards read it, its settled
	// prefix saved every maintenance.every for swarmd status (spend.go).
	tally store.SpendTally
	// mailChanged (capacity 1) wakes the mail metrics after a commit.
	mailChanged chan struct{}
	guard       guardDeadlines // when the lease guard killed the sessions (lease.go)
}

// liveConfig is the config in force and what is built of it.
type liveConfig struct {
	mu       sync.Mutex // guards cfg and backends, swapped by a reload
	cfg      *config.Config
	backends map[string]runner.Backend
	roster   atomic.Pointer[roster] // the last config's, see rosterOf
}

// host is this daemon's hold on its machine: the state dir, the process
// trees and what contains them.
type host struct {
	lock      *stateLock
	boot      string // this boot and pid namespace, kept in its leases (namesake.go)
	sup       *proc.Supervisor
	iso       isolation         // what contains the process trees (isolation.go)
	tools     daemonTools       // the daemon's git and its gate's PATH (tools.go)
	sandboxes *sessionSandboxes // nil while no sandbox is in force
	// quarantine holds the objects each agent's sandbox writes until
	// they are checked (objects.go).
	quarantine *quarantine.Store
	objectRuns atomic.Uint64 // the git runs of its releases, for their trees' ids
	// maint runs git gc when the repository needs it (gitmaint.go); nil
	// when maintenance.gc is off.
	maint *gitmaint.Maintainer
	// releases bounds the quarantine's releases: cut stopReleaseTime
	// after a stop begins, and at once by a force stop (objects.go).
	releases    context.Context
	cutReleases context.CancelFunc
}

// mergeWire is the merge queue and what feeds it.
type mergeWire struct {
	queue *merge.Queue // nil: no merge queue configured
	// changed (capacity 1) wakes the merge feeder after a commit.
	changed     chan struct{}
	remoteMoved string // the remote target's tip last reported moved (target.go)
	// linePushed is when the feeder last asked for the line of each of
	// this daemon's tasks waiting to merge to be pushed again (shared
	// store with a remote; the feeder's goroutine only).
	linePushed map[int64]time.Time
	// leftHeads is, for each task ready to merge whose worker no daemon
	// runs, the frozen head this daemon could not get yet and when it
	// last tried (queueLeft; the feeder's goroutine only).
	leftHeads map[int64]leftHead
	// looking serializes lookAtTarget: a session's end and the watch that
	// look at once must not both report one move.
	looking sync.Mutex
	// lookHook, when set (tests, under looking), is called by a look
	// between its sighting of a move and its claim.
	lookHook func(merge.Sighting)
	lines    lineBases // where new task lines start, with a remote (counted.go)
	// leading: this daemon holds the merge lock and runs the queue (a
	// shared store); follow is the feeder's following of the remote's
	// target meanwhile (follow.go); taking serializes takeTarget, which
	// both call.
	leading atomic.Bool
	follow  following
	taking  sync.Mutex
	// published is the target's tip last pushed by the report on a shared
	// store (push.go; the queue's loop only).
	published string
}

// runnerKit is what every runner is built with, besides its settings.
type runnerKit struct {
	logs     *logs.Store
	rotation *logs.Rotation // a running agent's settled sessions archived every logs.rotate_sessions
	hooks    *hooks.Runner
	observer runner.Observer
	// settles is where every agent's outcomes wait for the store together,
	// to be committed together (settlerFor).
	settles settle.Group
}

// agentRun is the agents' run: their context, where recovery found them,
// and how their start went.
type agentRun struct {
	// ctx bounds every runner (cancelled when Run returns); recovered is
	// what restart recovery found, both set by Open.
	ctx       context.Context
	cancel    context.CancelFunc
	recovered map[string]recovered
	ready     atomic.Bool // every agent registered
	ramp      settleWatch // the last transition, see trimWhenSettled
	// storeWait is why the start waits on the store while it does (nil:
	// it does not), for /readyz (storewait.go).
	storeWait atomic.Pointer[string]
	// maxSessionBytes is logs.max_session_bytes as the daemon started with
	// it: a logs key applies at a restart, not at a reload.
	maxSessionBytes int64
}

// reloading serializes reloads and retire; retiring (under mu) holds the
// agents a reload removed whose runners are still stopping.
type reloading struct {
	mu       sync.Mutex
	retiring map[string]bool
	retirers sync.WaitGroup // the retire goroutines
}

// operatorSurfaces are where the operator sees and drives the swarm.
type operatorSurfaces struct {
	control   *control.Server
	controlUp chan struct{} // closed once control is set
	http      *httpServer   // nil: no listen address
	dash      *dashboards   // the read model of swarmd top and the web dashboard
}

// sessionGates are what a session waits for before it starts.
type sessionGates struct {
	admission *admission.Admission // the swarm's limits on running sessions (admission.go)
	providers *providergate.Gates  // health shared by each provider's agents
}

// recovered is what restart recovery carries into an agent's runner.
type recovered struct {
	seq           uint32 // first session seq of this run
	totalErrors   uint32
	stoppedReason string // non-empty: stays Stopped until swarmd start
}

// Options are what the daemon takes besides its config.
type Options struct {
	Log     *zap.Logger // nil: a no-op logger
	Version string      // reported by swarmd_build_info and the dashboards
	Commit  string
	// LoadConfig reads a config for Reload; nil means config.Load.
	LoadConfig func(path string) (*config.Config, error)
	// SessionCLI runs a session's `swarmd mail` or `swarmd task` command
	// line in the daemon's process (the control socket's session-cli); nil:
	// the daemon runs none.
	SessionCLI func(ctx context.Context, req CLIRequest) (stdout, stderr string, code int)
	// SetCPUs applies limits.daemon_cpus to the process's Go runtime, at
	// Open and at each reload; nil leaves the runtime alone (a daemon in a
	// test's process must not change the test's).
	SetCPUs func(n int)
	// TreeTimerSlack is the timer slack, in nanoseconds, of every session,
	// hook and gate: the one the daemon was started with, when it raised
	// its own (limits.daemon_timer_slack); 0: the daemon's.
	TreeTimerSlack int
}

func (o *Options) setDefaults() {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.LoadConfig == nil {
		o.LoadConfig = config.Load
	}
	if o.Version == "" {
		o.Version = "dev"
	}
}

// setCPUs applies cfg's limits.daemon_cpus, where Options says how.
func (d *Daemon) setCPUs(cfg *config.Config) {
	if d.opts.SetCPUs != nil {
		d.opts.SetCPUs(cfg.Limits.DaemonCPUs)
	}
}

// Open takes the state dir lock and opens every shared resource. Errors
// that are the operator's to fix (a repo that is not a repo, a state dir in
// use) are *SetupError: exit 2 before anything starts.
func Open(ctx context.Context, cfg *config.Config, opts Options) (_ *Daemon, err error) {
	opts.setDefaults()
	log := opts.Log
	d := &Daemon{opts: opts, log: log, mailChanged: make(chan struct{}, 1)}
	d.live.cfg = cfg
	d.merge.changed = make(chan struct{}, 1)
	d.serve.controlUp = make(chan struct{})
	d.run.maxSessionBytes = int64(cfg.Logs.MaxSessionBytes)
	d.reload.retiring = map[string]bool{}
	d.gates.admission = admission.New(admissionLimits(cfg))
	d.run.ctx, d.run.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if err := d.openState(ctx, cfg); err != nil {
		return nil, err
	}
	review := ConfigReviewPolicy(func() *config.Config { c, _ := d.current(); return c })
	review.ReviewOnly = d.reviewOnly
	// The board as the config says, not read back (claimSwarmTarget
	// records merge.into from it): a read the store cut short would be
	// taken for no merge queue.
	d.tasks = newTaskBoard(d.db, mergeInto(cfg), review)
	if d.live.backends, err = buildBackends(cfg, d.host.sup); err != nil {
		return nil, setupError(err)
	}
	d.kit.logs = logs.New(cfg.StateDir, cfg.Logs.KeepArchives, cfg.Logs.MaxAge, log.Named("logs"))
	d.kit.rotation = d.kit.logs.NewRotation(cfg.Logs.RotateSessions)
	if err := d.kit.logs.Startup(time.Now()); err != nil {
		log.Warn("clean up archives at startup", zap.Error(err))
	}
	d.reg = registry.New(func(name string, err error) {
		var stopped *runner.StoppedError
		if errors.As(err, &stopped) {
			// Its thresholds, a fatal error, max_sessions: the operator
			// starts it again (swarmd start).
			log.Warn("agent stopped on its own", zap.String("agent", name), zap.String("reason", stopped.Reason))
			d.notifyAgentStopped(name, stopped.Reason)
			return
		}
		log.Error("agent runner failed", zap.String("agent", name), zap.Error(err))
	})
	d.metrics = metrics.New(metrics.BuildInfo{Version: d.opts.Version, Commit: d.opts.Commit, GoVersion: runtime.Version()})
	d.metrics.Admission(d.gates.admission.Running, d.gates.admission.Waiting)
	d.metrics.StoreWaiting(d.agentsStoreWaiting)
	d.metrics.StoreWriter(func() (int64, time.Duration, time.Duration) {
		w := d.db.WriterStats()
		return w.Turns, w.Busy, w.Waited
	})
	if err := d.openMerge(ctx, cfg); err != nil {
		return nil, err
	}
	d.serve.dash = newDashboards(d)
	jl := &journalFaults{log: log}
	d.journal = d.db.NewJournal(store.JournalOptions{OnError: jl.failed, OnCommit: func() {
		jl.committed()
		d.serve.dash.notify()
	}})
	d.journal.Start()
	// Both again from the start when the store cuts either short: the
	// leases a try took are this daemon's own to take again, and recovery
	// finishes what a try of it began.
	if err := d.waitStore(ctx, "take the agents' leases and recover", func(ctx context.Context) error {
		if err := d.acquireLeases(ctx, cfg.AgentNames(), true); err != nil {
			return err
		}
		// Once the agents are this daemon's: a daemon refused them, or
		// refused its target, records nothing. Before any session's
		// command reads it.
		if err := d.claimAtStart(ctx, cfg); err != nil {
			return err
		}
		if err := RecordMembers(ctx, d.db, d.leaseHolder().Daemon, cfg); err != nil {
			return err
		}
		if err := d.recover(ctx); err != nil {
			return err
		}
		// Before any session runs or the queue moves the target.
		return d.settleTarget(ctx)
	}); err != nil {
		return nil, err
	}
	if err := d.serve.dash.start(ctx); err != nil {
		if ctx.Err() != nil || !store.Transient(err) {
			return nil, err
		}
		// The hub runs on without its first read, and reads the event
		// log when the store answers: the dashboards are not worth a
		// failed start.
		log.Warn("the dashboards could not read the event log at the start: they read it once the store answers", zap.Error(err))
	}
	d.budget = d.newSpendKeeper()
	d.metrics.BudgetLeft(d.budget.LeftUSD)
	d.gates.providers = providergate.New(cfg, d.journal, log.Named("provider"))
	d.metrics.Providers(d.gates.providers.States)
	d.pusher = newPusher(log.Named("push"), d.metrics.Pushed)
	d.kit.observer = observers{&logObserver{log: log}, d.metrics, journalObserver{d.journal}, d.budget, toolDenials{d.journal}, pushObserver{d}, lineKeeper{d}, targetObserver{d}, &d.run.ramp}
	d.kit.hooks = hooks.New(d.host.sup, hooks.Config{
		Commands: map[hooks.Event][]string{
			hooks.AgentStart:   cfg.Hooks.AgentStart,
			hooks.SessionStart: cfg.Hooks.SessionStart,
			hooks.SessionEnd:   cfg.Hooks.SessionEnd,
			hooks.AgentStopped: cfg.Hooks.AgentStopped,
		},
		Timeout: cfg.Hooks.Timeout,
		Sandbox: d.hookSandbox(),
	}, log.Named("hooks"), func(ev hooks.Event, r hooks.Result) { d.metrics.HookRun(string(ev), r.Outcome) })
	ropts := router.Options{Log: log.Named("router"), Tasks: d.tasks, Idle: d.reg, OnChange: d.noteChange, ReviewOnly: d.reviewOnly}
	if cfg.SharedStore() {
		w := d.db.Changes() // no file to watch: the store's notifications, which say what changed
		ropts.Wake, ropts.Changed, ropts.Urgent = w.C, w.Take, w.TakeUrgent
	} else {
		ropts.DBPath = cfg.DBPath() // the WAL file's changes wake the router
	}
	d.router = router.New(d.mail, d.reg, ropts)
	if cfg.Listen != "" {
		if d.serve.http, err = startHTTP(cfg.Listen, d.metrics.Handler(), d.readiness, d.host.iso.String, d.serve.dash.web.Handler(), log); err != nil {
			return nil, setupError(err)
		}
	}
	d.openNotifier(cfg)
	return d, nil
}

// openState takes the state dir (owner-only, locked), ends what an earlier
// daemon left running, and opens the repository and swarm.db, recording in
// it what processes that read no config must follow.
func (d *Daemon) openState(ctx context.Context, cfg *config.Config) (err error) {
	log := d.log
	// The state dir holds mail, prompts and logs: the operator's alone.
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir %s: %w", cfg.StateDir, err)
	}
	d.host.boot = bootID()
	if d.host.lock, err = acquireLock(cfg.StateDir, d.host.boot); err != nil {
		if errors.Is(err, errLocked) {
			return setupError(err)
		}
		return err
	}
	if !cfg.SharedStore() {
		if err := backup.CutShort(cfg.StateDir); err != nil {
			return setupError(err)
		}
	}
	// The files backends give sessions: a killed daemon's are left here.
	files := sessionFilesDir(cfg.StateDir)
	if err := os.RemoveAll(files); err != nil {
		return fmt.Errorf("session files %s: %w", files, err)
	}
	if err := os.Mkdir(files, 0o700); err != nil {
		return fmt.Errorf("session files %s: %w", files, err)
	}
	if d.host.sup, err = proc.NewSupervisor(cfg.StateDir, log.Named("proc")); err != nil {
		return err
	}
	d.host.sup.SetNice(cfg.Limits.SessionNice)
	d.host.sup.SetTimerSlack(d.opts.TreeTimerSlack)
	d.setCPUs(cfg)
	if err := d.openIsolation(cfg); err != nil {
		return err
	}
	if n, err := d.host.sup.SweepOrphans(); err != nil {
		log.Warn("sweep processes left by an earlier daemon", zap.Error(err))
	} else if n > 0 {
		log.Warn("ended processes left by an earlier daemon", zap.Int("count", n))
	}
	if d.host.tools, err = findTools(cfg, d.host.iso.sandbox != nil, os.Getenv("PATH")); err != nil {
		return setupError(err)
	}
	if d.trees, err = worktree.Open(ctx, worktree.Options{Repo: cfg.Repo, StateDir: cfg.StateDir, BaseRef: cfg.BaseRef, Log: log.Named("worktree"),
		HookSandbox: d.postCheckoutSandbox(), Git: d.host.tools.git, RemoteEnv: d.host.tools.remoteEnv}); err != nil {
		return setupErrorf("repo %s: %w", cfg.Repo, err)
	}
	if len(d.host.tools.dropped) > 0 {
		log.Info("the daemon's git and the merge gate leave out PATH directories that sessions write",
			zap.Strings("dropped", d.host.tools.dropped), zap.String("git", d.host.tools.git))
	}
	if err := d.waitStore(ctx, "open", func(ctx context.Context) (err error) {
		d.db, err = store.Open(ctx, cfg.StoreTarget(), store.Options{})
		return err
	}); err != nil {
		return err
	}
	if cfg.SharedStore() {
		// The store has read its password; sessions and hooks inherit this
		// process's environment, and agents must not hold the store's
		// credentials. Unsetting it does not change /proc/PID/environ,
		// which shows the initial environment to the same user for good.
		if os.Getenv("PGPASSWORD") != "" {
			log.Warn("PGPASSWORD is in swarmd's initial environment, which /proc/" + strconv.Itoa(os.Getpid()) +
				"/environ shows to every process of this user, agents included: give the password in a passfile " +
				"(PGPASSFILE) or a systemd credential (LoadCredential=pgpass:/etc/swarmd/pgpass), which swarmd reads as its passfile")
		}
		os.Unsetenv("PGPASSWORD")
	}
	agents := cfg.AgentNames()
	if cfg.SharedStore() {
		agents = nil // the swarm's other daemons run agents this config does not name
	}
	if err := d.waitStore(ctx, "open the mailbox", func(ctx context.Context) (err error) {
		d.mail, err = mailbox.New(ctx, d.db, mailbox.Options{MaxBodyBytes: cfg.Mailbox.MaxBody, Agents: agents,
			UrgentEvery: mailbox.DefaultUrgentEvery})
		return err
	}); err != nil {
		return err
	}
	if err := d.waitStore(ctx, "record the settings", func(ctx context.Context) error {
		// `swarmd mail` in a session reads no config: the limits it
		// enforces are the ones recorded here.
		// merge.into: once the swarm's daemons agree on it (claimSwarmTarget).
		return d.mail.RecordLimits(ctx)
	}); err != nil {
		return err
	}
	d.openQuarantine(ctx, cfg)
	d.openMaintenance(cfg)
	return nil
}

// mergeInto is cfg's merge target, "" without a merge queue.
func mergeInto(cfg *config.Config) string {
	if cfg.Merge == nil {
		return ""
	}
	return cfg.Merge.Into
}

// Run starts every agent and returns when ctx ends and every agent has
// stopped, or when the stop takes longer than the grace periods allow.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.run.cancel()
	agents := d.runAgents(ctx)
	// In the order they start; they stop in reverse when Run returns (and
	// those started when one fails to start), each while those before it
	// still run. Those that read the store first wait while it is away,
	// until ctx ends (storewait.go).
	services := service.NewGroup(
		// the budgets loaded and their pauses stored before any runner
		d.storeWaiting(ctx, "load the budgets", d.budget),
		d.pusher, // stopped late: the pushes the last sessions asked for still go out
		// the lease guard runs before any session and outlives them all
		d.storeWaiting(ctx, "renew the agents' leases", d.keepLeases()),
		agents,
		d.routing(),
		service.Func(d.listenControl),
		service.Func(d.announce),
		d.healthWatch(HealthInterval),
		systemd{}.watchdog(d.readiness, d.log),
		d.mailStats(200*time.Millisecond),
		d.mergeFeeder(),
		d.trimWhenSettled(settleQuiet, d.settled),
		service.Loop(d.kit.rotation.Run),
		d.maintenance(),
		d.lineSweeper(),
		d.pruneHistory(),
		d.saveSpend(),
	)
	// The services' context is not ctx: they stop in order, at the end.
	if err := services.Start(context.WithoutCancel(ctx)); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Stopped while the start waited for the store: nothing of
			// the swarm ran, and nothing failed.
			return nil
		}
		return err
	}
	defer services.Stop()
	<-ctx.Done()
	systemd{}.stopping()
	defer d.cutReleasesAfter(stopReleaseTime).Stop()
	// The store's upkeep ends now, so that the end of its WAL watch (a
	// kernel grace period) passes while the agents stop, not after them.
	d.db.EndUpkeep()
	agents.Stop() // first, with their grace, while the services they use run on
	return nil
}

// runAgents is the service of the runners: Start registers one per agent of
// the config in force (a failure stops those registered) and pushes their
// branches; Stop stops them all, with their grace (shutdownAgents). No
// session outlives it, and it stops before the lease keeper. A runner's
// making (its stored pause read) waits while the store is away, until ctx
// ends.
func (d *Daemon) runAgents(ctx context.Context) service.Service {
	return service.Func(func(context.Context) (func(), error) {
		cfg, _ := d.current()
		for _, a := range cfg.Agents {
			var r *runner.Runner
			err := d.waitStore(ctx, "read the pause of agent "+a.Name, func(context.Context) (err error) {
				r, err = d.newRunner(a, d.run.recovered[a.Name])
				return err
			})
			if err == nil {
				d.adopt(cfg, a, r)
				err = d.reg.Register(d.run.ctx, r)
			}
			if err != nil {
				d.shutdownAgents()
				return nil, err
			}
		}
		d.run.ready.Store(true)
		// A daemon killed between a session's end and its push left the
		// branch behind on the remote: push the branches as they are now.
		for _, a := range cfg.Agents {
			d.pushAgent(a.Name)
		}
		return d.shutdownAgents, nil
	})
}

// routing is the router as a service; it runs on the agents' context, as
// what it does is interrupt them.
func (d *Daemon) routing() service.Service {
	return service.Func(func(context.Context) (func(), error) {
		d.router.Start(d.run.ctx)
		return d.router.Stop, nil
	})
}

// listenControl opens the control socket; Close closes it, after the
// dashboards' streams that its shutdown would wait for.
func (d *Daemon) listenControl(context.Context) (func(), error) {
	cfg, _ := d.current()
	var err error
	if d.serve.control, err = control.Listen(cfg.SocketPath(), controlAPI{d}, d.log.Named("control")); err != nil {
		return nil, err
	}
	close(d.serve.controlUp) // sessions' sockets can be attached to it now
	return nil, nil
}

// announce tells systemd and the log that the swarm runs.
func (d *Daemon) announce(context.Context) (func(), error) {
	systemd{}.ready()
	d.logIsolation()
	cfg, _ := d.current()
	fields := []zap.Field{zap.Int("agents", len(cfg.Agents)), zap.String("repo", cfg.Repo),
		zap.String("state_dir", cfg.StateDir), zap.String("base", d.trees.BaseCommit())}
	if d.serve.http != nil {
		// Where to look: the first thing a new operator asks.
		fields = append(fields, zap.String("dashboard", "http://"+d.serve.http.Addr()+"/"))
	}
	d.log.Info("swarmd running", fields...)
	return nil, nil
}

// shutdownAgents stops every runner and waits, within the longest grace
// period plus a margin, for them and for the agents a reload was retiring.
func (d *Daemon) shutdownAgents() {
	d.run.cancel()
	cfg, _ := d.current()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout(cfg))
	defer cancel()
	if err := d.reg.Shutdown(sctx); err != nil {
		d.log.Warn("agents did not stop in time; their sessions were force-stopped", zap.Error(err))
	}
	d.reload.retirers.Wait()
	d.holdOver()
}

// recover closes what a killed daemon left open and reads where every agent
// was, before anything spawns: sessions still open become orphaned, mail
// claimed by prompts whose sessions never started is pending again.
func (d *Daemon) recover(ctx context.Context) error {
	now := time.Now()
	// On a shared store other daemons' sessions are theirs to recover.
	var own []string
	if d.live.cfg.SharedStore() {
		own = d.live.cfg.AgentNames()
	}
	if err := d.recoverOutcomes(ctx, own, now); err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	orphans, err := d.db.CloseOrphanSessions(ctx, now, own)
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	for _, o := range orphans {
		d.log.Warn("session left open by an earlier daemon closed as orphaned",
			zap.String("agent", o.Agent), zap.String("session", o.SessionID), zap.Uint32("seq", o.Seq))
		d.journal.Event(store.EventRecord{At: now, Agent: o.Agent, From: "Running", Event: "Recovery", To: "Initializing",
			Actor: "daemon", Reason: "session " + o.SessionID + " orphaned by a daemon that died", SessionID: o.SessionID, Seq: o.Seq})
	}
	n, err := d.mail.ReleaseUnstartedClaims(ctx, own)
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	if n > 0 {
		d.log.Warn("mail claimed by sessions that never started is pending again", zap.Int("messages", n))
	}
	if err := d.recoverTasks(ctx, d.live.cfg, own); err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	recs, err := d.db.Agents(ctx)
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	d.run.recovered = make(map[string]recovered, len(d.live.cfg.Agents))
	for _, a := range d.live.cfg.Agents {
		seq, err := d.db.MaxSeq(ctx, a.Name)
		if err != nil {
			return fmt.Errorf("recovery: %w", err)
		}
		rc := recovered{seq: seq + 1}
		if rec, ok := recs[a.Name]; ok {
			rc.totalErrors = rec.TotalErrors
			if !rec.Resumable() {
				rc.stoppedReason = rec.StopReason
				d.log.Warn("agent stays Stopped until swarmd start", zap.String("agent", a.Name), zap.String("reason", rec.StopReason))
			}
		}
		d.run.recovered[a.Name] = rc
	}
	return nil
}

// recoverTasks takes back the tasks agents held (every agent's when nil),
// cfg being the config they run under. No session of theirs runs yet, so
// every held task's session is gone: what this daemon's orderly stop held
// over (holdOver) goes back to its agent, or is requeued without a retry if
// the agent is not in cfg (or another daemon held it over: its worktree
// has the work); the rest was cut off by a daemon that died, and is
// orphaned (a retry).
func (d *Daemon) recoverTasks(ctx context.Context, cfg *config.Config, agents []string) error {
	configured := map[string]bool{}
	for _, a := range cfg.AgentNames() {
		configured[a] = true
	}
	r := taskboard.Recovery{Agents: agents, Runs: func(a string) bool { return configured[a] },
		Why: "swarmd restarted: the session working on it is gone"}
	if cfg.SharedStore() {
		// Its own marks only: on a store of its own (Daemon "") every
		// mark is this daemon's, whatever its host is called now.
		r.Daemon = d.leaseHolder().Daemon
	}
	got, err := d.tasks.Recover(ctx, r)
	if err != nil {
		return err
	}
	for _, t := range got.Kept {
		d.log.Info("task kept for its agent over the restart", zap.Int64("task", t.ID), zap.String("agent", t.Claimant),
			zap.String("state", t.StateName))
	}
	for _, t := range append(got.Requeued, got.Orphaned...) {
		d.log.Warn("task requeued after a restart", zap.Int64("task", t.ID), zap.String("state", t.StateName),
			zap.Int("retries", t.Retries))
	}
	d.retriesUsedUp("", r.Why, got.Orphaned)
	return nil
}

// holdOver leaves the tasks this daemon's agents hold with them over its
// orderly stop, once every runner has stopped (taskboard.HoldOver): the
// next start gives each back to its agent. A task whose session's end was
// not recorded (cut off by a force stop, a store away) is not held over;
// the next start orphans it, as after a crash.
func (d *Daemon) holdOver() {
	cfg, _ := d.current()
	// The agents that ran, not only those of the config in force: one a
	// reload removed whose runner the daemon's stop reached first gave its
	// task back to no one, and the next start requeues it (no retry).
	agents := cfg.AgentNames()
	for _, name := range d.reg.Names() {
		if !slices.Contains(agents, name) {
			agents = append(agents, name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := d.tasks.HoldOver(ctx, d.leaseHolder().Daemon, agents)
	if err != nil {
		d.log.Warn("hold the agents' tasks over the stop: the next start requeues them as after a crash", zap.Error(err))
		return
	}
	for _, t := range held {
		d.log.Info("task held over the stop for its agent", zap.Int64("task", t.ID), zap.String("agent", t.Claimant))
	}
}

func (d *Daemon) newRunner(a config.Agent, rc recovered) (*runner.Runner, error) {
	cfg, backends := d.current()
	return d.newRunnerFor(cfg, backends, a, rc)
}

// newRunnerFor is newRunner with the config and backends given (a reload's,
// before they are in force).
func (d *Daemon) newRunnerFor(cfg *config.Config, backends map[string]runner.Backend, a config.Agent, rc recovered) (*runner.Runner, error) {
	st, err := d.settings(cfg, backends, a)
	if err != nil {
		return nil, err
	}
	paused, err := d.restoredPause(a.Name)
	if err != nil {
		return nil, err
	}
	return runner.New(runner.Config{
		Name:      a.Name,
		Role:      st.Role,
		Backend:   st.Backend,
		Workspace: d.trees,
		Prompter:  st.Prompter,
		Settler:   st.Settler,
		Observer:  d.kit.observer,
		Logs:      d.kit.logs,
		Hooks:     d.kit.hooks,
		Logger:    d.log,
		Thresholds: agent.Thresholds{
			MaxConsecutiveErrors: uint32(a.MaxConsecutiveErrors),
			MaxTotalErrors:       uint32(a.MaxTotalErrors),
		},
		Timeout:            st.Timeout,
		GracePeriod:        st.GracePeriod,
		Env:                st.Env,
		DefaultEnv:         st.DefaultEnv,
		PathPrepend:        selfDir(),
		MinSessionInterval: st.MinSessionInterval,
		MaxLogBytes:        d.run.maxSessionBytes,
		FirstSeq:           rc.seq,
		TotalErrors:        rc.totalErrors,
		StoppedReason:      rc.stoppedReason,
		MaxSessions:        st.MaxSessions,
		MaxTurns:           st.MaxTurns,
		MemoryMax:          st.MemoryMax,
		Container:          d.container(),
		MaxSilent:          st.MaxSilent,
		Hold:               func(reason string) { d.holdAgent(a.Name, reason) },
		Paused:             paused,
		Audit:              journalAudit{d.journal},
		BackendName:        st.BackendName,
		Tools:              st.Tools,
		Gate:               st.Gate,
		OnProgress:         d.onProgress,
		LeaseGuardKilled:   d.guard.killedSince,
		Price:              d.budget.Price,
	})
}

// agentVars are the SWARM_* variables a session's `swarmd mail` and
// `swarmd task` read for agent a (key, value): the agents it may name, and
// the review settings its claims carry, as the runner's claims do
// (OpenTaskBoard's ReviewerOf). Sessions get them in their environment;
// commands forwarded through the control socket get them from the daemon.
func agentVars(a config.Agent, agents string) [][2]string {
	return [][2]string{
		{"SWARM_AGENTS", agents},
		{"SWARM_REVIEWER", a.Reviewer},
		{"SWARM_MAX_ITERATIONS", strconv.Itoa(a.MaxIterations)},
	}
}

// roster is the agent list every agent's settings carry under one config:
// built once per config and shared (read only), as a copy per agent is
// quadratic (21 MB of 1000 agents' names and SWARM_AGENTS values).
type roster struct {
	cfg        *config.Config
	names      []string        // cfg.AgentNames()
	reviewOnly map[string]bool // cfg.ReviewOnly of each agent: the router asks it per idle agent
	joined     string          // SWARM_AGENTS: the names joined with commas
	agentsVar  string          // "SWARM_AGENTS=" + joined
}

// reviewOnly says whether agent claims no unassigned task under the config
// in force (config.Config.ReviewOnly, computed once per config).
func (d *Daemon) reviewOnly(agent string) bool {
	cfg, _ := d.current()
	return d.rosterOf(cfg).reviewOnly[agent]
}

// rosterOf returns cfg's roster, the one built last when it is cfg's.
func (d *Daemon) rosterOf(cfg *config.Config) *roster {
	if r := d.live.roster.Load(); r != nil && r.cfg == cfg {
		return r
	}
	names := cfg.AgentNames()
	r := &roster{cfg: cfg, names: names, agentsVar: "SWARM_AGENTS=" + strings.Join(names, ","), reviewOnly: map[string]bool{}}
	for _, n := range names {
		if cfg.ReviewOnly(n) {
			r.reviewOnly[n] = true
		}
	}
	r.joined = r.agentsVar[len("SWARM_AGENTS="):]
	d.live.roster.Store(r)
	return r
}

// adopt makes r, about to be registered, agent a's runner under cfg in
// what observes it: its metrics start from its snapshot, and its provider
// is the one its status and the provider metrics go by. A runner or
// settings built for a reload that may yet be refused touch neither.
func (d *Daemon) adopt(cfg *config.Config, a config.Agent, r *runner.Runner) {
	d.metrics.AddAgent(r.Snapshot())
	d.gates.providers.ForAgent(a.Name, providergate.AgentKey(cfg, a))
}

// settings are an agent's reloadable settings under cfg.
func (d *Daemon) settings(cfg *config.Config, backends map[string]runner.Backend, a config.Agent) (runner.Settings, error) {
	be, ok := backends[a.Backend]
	if !ok {
		return runner.Settings{}, fmt.Errorf("agent %s: unknown backend %q", a.Name, a.Backend)
	}
	env := envList(a.Env)
	if !cfg.SharedStore() {
		// A shared store's credentials stay with the daemon: sessions'
		// `swarmd mail` and `swarmd task` go through the control socket
		// (as they do in a sandbox, which removes this variable).
		env = append(env, "SWARM_DB_PATH="+cfg.DBPath())
	}
	ros := d.rosterOf(cfg)
	for _, kv := range agentVars(a, ros.joined) {
		if kv[0] == "SWARM_AGENTS" {
			env = append(env, ros.agentsVar) // the long one: shared
			continue
		}
		env = append(env, kv[0]+"="+kv[1])
	}
	self := selfPath()
	if self != "" {
		// A session whose shell resets PATH (Codex runs a login shell) still
		// finds swarmd: by this variable, and by the path in its prompt.
		env = append(env, "SWARMD_BIN="+self)
	}
	pb := &prompt.Builder{Mail: d.mail, Git: objectsFirst{Git: d.trees, d: d}, Tasks: d.tasks, Agents: ros.names, Swarmd: self,
		Compare: d.trees, ReviewBase: reviewBase(cfg, d.trees.BaseCommit()), Budget: d.budget.Note}
	if cfg.Merge != nil {
		// A merge queue merges task by task: each task's work is a line of
		// its own, started from the target (internal/worktree/line.go).
		into := cfg.Merge.Into
		pb.Lines, pb.LineFrom = d.trees, func(context.Context) (string, error) { return into, nil }
		if cfg.Remote != "" {
			pb.LineFrom = d.lineBase(into, cfg.Remote)
		}
	}
	return runner.Settings{
		Role:               a.Role,
		Backend:            be,
		Prompter:           pb,
		Settler:            d.settlerFor(a),
		MaxSessions:        a.MaxSessions,
		MaxTurns:           a.MaxTurns,
		MemoryMax:          int64(a.MemoryMax),
		MaxSilent:          a.MaxSilentSessions,
		Env:                env,
		DefaultEnv:         environ.GitIdentity(a.Name, cfg.GitEmailDomain),
		Timeout:            a.SessionTimeout,
		GracePeriod:        a.GracePeriod,
		MinSessionInterval: a.MinSessionInterval,
		BackendName:        a.Backend,
		Tools:              backend.ToolPolicy{Allow: a.Tools.Allow, Deny: a.Tools.Deny},
		Gate:               admitGate{adm: d.gates.admission, provider: cfg.Backends[a.Backend].Type, next: d.gates.providers.ForKey(providergate.AgentKey(cfg, a))},
	}, nil
}

// current is the config in force and its backends (a reload swaps both).
func (d *Daemon) current() (*config.Config, map[string]runner.Backend) {
	d.live.mu.Lock()
	defer d.live.mu.Unlock()
	return d.live.cfg, d.live.backends
}

// ForceStop kills every session at once (the second signal).
func (d *Daemon) ForceStop() {
	if d.host.cutReleases != nil {
		d.host.cutReleases()
	}
	if d.reg != nil {
		d.reg.ForceStop()
	}
}

// mailBaselineRetry is how soon mailStats asks again for the newest
// message when the store did not answer at its start.
const mailBaselineRetry = time.Second

// mailStats feeds swarmd_mailbox_messages_total and swarmd_mailbox_pending
// from swarm.db: mail is sent by other processes, so the daemon counts it
// where it lands, each time the router saw a commit (d.mailChanged), at most
// every minInterval, and on no timer while nothing happens. It counts from
// the newest message at its start (the baseline); a store that does not
// answer then has the baseline taken at its first answer, asked again every
// mailBaselineRetry meanwhile: what was sent while it did not answer is
// not counted, rather than every message ever sent counted at once. It is
// a service.
func (d *Daemon) mailStats(minInterval time.Duration) service.Service {
	return service.Loop(func(stop context.Context) {
		ctx := context.Background() // queries take microseconds; no cancellation goroutine per query
		_, _, last, err := d.mail.NewSince(ctx, 0)
		based := err == nil
		if err != nil {
			d.log.Warn("mail metrics", zap.Error(err))
		}
		d.updatePending(ctx)
		for {
			var retry <-chan time.Time
			if !based {
				retry = time.After(mailBaselineRetry)
			}
			select {
			case <-stop.Done():
				return
			case <-d.mailChanged:
			case <-retry:
			}
			normal, urgent, max, err := d.mail.NewSince(ctx, last)
			if err == nil {
				last = max
				if based {
					d.metrics.MailSent(false, normal)
					d.metrics.MailSent(true, urgent)
				}
				based = true
				d.updatePending(ctx)
			} else {
				d.log.Warn("mail metrics", zap.Error(err))
			}
			select { // a burst of commits is counted once per interval
			case <-stop.Done():
				return
			case <-time.After(minInterval):
			}
		}
	})
}

func (d *Daemon) updatePending(ctx context.Context) {
	pending, err := d.mail.PendingCounts(ctx)
	if err != nil {
		d.log.Warn("mail metrics", zap.Error(err))
		return
	}
	d.metrics.SetPending(pending)
}

// noteChange is the router's OnChange: it wakes mailStats for mail, the
// merge feeder for tasks, and the dashboards for anything, never blocking.
func (d *Daemon) noteChange(what store.Change) {
	if what.Has(store.ChangedMail) {
		signal(d.mailChanged)
	}
	if what.Has(store.ChangedTasks) {
		signal(d.merge.changed)
	}
	d.serve.dash.notify() // a task moved, mail came, an agent changed state
}

// signal sends on c unless a signal is pending already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Close releases everything openDaemon opened. Safe on a partly opened daemon.
func (d *Daemon) Close() error {
	d.run.cancel()
	if d.host.cutReleases != nil {
		defer d.host.cutReleases()
	}
	d.reload.retirers.Wait() // each ends once its runner has stopped
	d.serve.dash.close()     // ends the streams the servers' shutdown would wait for
	d.closeNotifier()        // sends what is queued first, or logs it
	var errs []error
	if d.serve.control != nil {
		errs = append(errs, d.serve.control.Close())
	}
	if d.serve.http != nil {
		errs = append(errs, d.serve.http.Close())
	}
	if d.journal != nil {
		errs = append(errs, d.journal.Close())
	}
	if d.mail != nil {
		errs = append(errs, d.mail.Close())
	}
	if d.db != nil {
		w := d.db.WriterStats()
		fields := []zap.Field{zap.Int64("writes", w.Turns), zap.Duration("writer_busy", w.Busy), zap.Duration("writer_waited", w.Waited)}
		if n := d.db.WriteRoundTrips(); n > 0 {
			fields = append(fields, zap.Int64("write_round_trips", n))
		}
		d.log.Info("store closed", fields...)
		errs = append(errs, d.db.Close())
	}
	if d.host.sup != nil {
		errs = append(errs, d.host.sup.Close())
		d.closeIsolation()
	}
	if d.host.lock != nil {
		errs = append(errs, d.host.lock.Release())
	}
	return errors.Join(errs...)
}

// envList renders an env map as sorted KEY=VALUE pairs.
func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// selfDir is this binary's directory. The runner puts it first in the
// effective PATH of sessions and hooks (after the configured env is
// merged), so that agents can run `swarmd mail` inside their sessions.
func selfDir() string {
	if exe := selfPath(); exe != "" {
		return filepath.Dir(exe)
	}
	return ""
}

// selfPath is this binary's absolute path, "" when it cannot be found.
func selfPath() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
}

// SelfFirst is path with this binary's directory first, as a session gets
// it; "" when the binary cannot be found.
func SelfFirst(path string) string {
	dir := selfDir()
	if dir == "" {
		return ""
	}
	return environ.PrependPath(dir, path)
}

// observers fans a runner's notifications out, in order.
type observers []runner.Observer

func (o observers) OnTransition(t runner.Transition) {
	for _, x := range o {
		x.OnTransition(t)
	}
}

func (o observers) OnSessionEnd(s runner.SessionRecord) {
	for _, x := range o {
		x.OnSessionEnd(s)
	}
}

func (o observers) OnIdle(agent string, idle bool, at time.Time) {
	for _, x := range o {
		x.OnIdle(agent, idle, at)
	}
}

func (o *logObserver) OnIdle(agent string, idle bool, _ time.Time) {
	if idle {
		o.log.Info("idle: said DONE, no mail and no task; waiting", zap.String("agent", agent))
		return
	}
	o.log.Info("awake: looking for mail and tasks", zap.String("agent", agent))
}

// logObserver writes one daemon log line per transition and per session.
type logObserver struct{ log *zap.Logger }

func (o *logObserver) OnTransition(t runner.Transition) {
	fields := []zap.Field{
		zap.String("agent", t.Agent), zap.String("from", t.From.Kind.String()), zap.Stringer("event", t.Event),
		zap.String("to", t.To.Kind.String()), zap.String("actor", t.Actor),
	}
	if t.Effect.Kind != agent.NoEffect {
		fields = append(fields, zap.String("effect", t.Effect.Kind.String()))
	}
	if t.SessionID != "" {
		fields = append(fields, zap.String("session", t.SessionID))
	}
	if t.Reason != "" {
		fields = append(fields, zap.String("reason", t.Reason))
	}
	if !t.UrgentCommitted.IsZero() {
		fields = append(fields, zap.Duration("interrupt_latency", t.At.Sub(t.UrgentCommitted)))
	}
	if t.To.Kind == agent.CoolingDown {
		fields = append(fields, zap.Duration("backoff", t.To.Until.Sub(t.At).Round(time.Millisecond)))
	}
	o.log.Info("transition", fields...)
}

func (o *logObserver) OnSessionEnd(runner.SessionRecord) {}

// reviewBase is what a reviewer compares a worker's branch with: the merge
// target when there is a merge queue, else the commit agents started from.
func reviewBase(cfg *config.Config, base string) string {
	if cfg.Merge != nil {
		return cfg.Merge.Into
	}
	return base
}

// shutdownTimeout bounds how long a stop may take before sessions are killed
// regardless: the longest grace period plus a margin for archiving.
func shutdownTimeout(cfg *config.Config) time.Duration {
	g := cfg.Defaults.GracePeriod
	for _, a := range cfg.Agents {
		g = max(g, a.GracePeriod)
	}
	return g + 30*time.Second
}
