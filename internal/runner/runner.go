// Package runner drives one agent through its lifecycle: it feeds events to
// the pure state machine of package agent and carries out the side effects it
// returns (seed 001's run_agent: setup, state machine loop, session iteration,
// interrupt handling, cleanup). One Runner is one goroutine; it owns the
// timers (session timeout, grace, backoff) and the agent's current session.
package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/hooks"
	"github.com/swarmd/swarmd/internal/worktree"
)

// Backend starts backend sessions. backend.Backend satisfies it.
type Backend interface {
	Start(ctx context.Context, spec backend.Spec) (backend.Session, error)
}

// Workspace prepares and checks the agent's working tree. *worktree.Manager
// satisfies it.
type Workspace interface {
	Ensure(ctx context.Context, agent string) (worktree.Worktree, error)
	Verify(ctx context.Context, agent string) (worktree.Worktree, error)
	Head(ctx context.Context, agent string) (string, error)
	CommitsBetween(ctx context.Context, from, to string) (int, error)
	// ClearStaleLocks removes git's lock files from the agent's worktree;
	// the runner calls it only while no process of the agent is alive.
	ClearStaleLocks(ctx context.Context, agent string) ([]string, error)
}

// LogStore knows where session logs and prompts live and archives them when
// the agent stops. *logs.Store satisfies it.
type LogStore interface {
	LogPath(agent string, seq uint32) string
	// PromptPath is where logs.WritePrompt puts the prompt of session seq.
	// The runner asks the store for the path, rather than having the store
	// write the file, so that a store may point prompts elsewhere (tests'
	// full disks wrap a *logs.Store and override just this).
	PromptPath(agent string, seq uint32) string
	Archive(ctx context.Context, agent string, now time.Time) (string, error)
}

// Hooks runs the configured shell hooks. *hooks.Runner satisfies it.
type Hooks interface {
	Run(ctx context.Context, dir string, env []string, p hooks.Payload) error
}

// Prompter assembles the prompt of the next session (BuildingPrompt). What
// becomes of what it claimed is the Settler's.
type Prompter interface {
	Build(ctx context.Context, req PromptRequest) (Prompt, error)
}

// Observer is told about every transition and every finished session. It is
// called synchronously from the runner goroutine, so it must be quick.
type Observer interface {
	OnTransition(Transition)
	OnSessionEnd(SessionRecord)
	// OnIdle is told when the agent starts or stops waiting, idle, in
	// BuildingPrompt. It is not a transition: the machine stays where it is.
	OnIdle(agent string, idle bool, at time.Time)
}

// Container puts each session in a sandbox of its own.
type Container interface {
	// Contain prepares session sessionID of agent's sandbox: wrap is
	// backend.Spec.Sandbox, release is called once the session has ended
	// (every process of it dead).
	Contain(agent, sessionID string) (wrap func(argv, files []string) []string, release func(), err error)
}

// Config is everything one Runner needs. Zero durations take defaults.
type Config struct {
	Name        string
	Role        string
	Backend     Backend
	Workspace   Workspace
	Prompter    Prompter
	Settler     Settler
	Observer    Observer // may be nil
	Logs        LogStore
	Hooks       Hooks // may be nil
	Logger      *zap.Logger
	Thresholds  agent.Thresholds
	Timeout     time.Duration // session_timeout (0 = none)
	GracePeriod time.Duration // default backend.DefaultGracePeriod
	Env         []string      // KEY=VALUE added to every session (config env, SWARM_DB_PATH, SWARM_AGENTS)
	// DefaultEnv is KEY=VALUE under everything configured (the agent's git
	// identity): backend.Spec.Defaults, and the same layer in hooks.
	DefaultEnv []string
	// PathPrepend goes first in the effective PATH of sessions and hooks
	// (swarmd's own directory, so that agents find `swarmd mail`).
	PathPrepend string
	// MinSessionInterval is the least time between two session starts
	// (min_session_interval); 0 is no minimum.
	MinSessionInterval time.Duration
	MaxLogBytes        int64  // caps each session log (logs.max_session_bytes); 0 is no cap
	FirstSeq           uint32 // default 1; restart recovery continues the sequence
	// Restart recovery: total_errors survives a restart, and an agent that
	// was stopped by its thresholds or a FatalError stays Stopped (with
	// this reason) until an operator starts it again.
	TotalErrors   uint32
	StoppedReason string
	// MaxSessions stops the agent (reason max_sessions) once this many
	// sessions have started in this run; 0 means no limit.
	MaxSessions int
	// MaxTurns limits each session's model turns (backend.Spec.MaxTurns);
	// 0 means no limit.
	MaxTurns int
	// MemoryMax bounds each session's process tree in bytes
	// (backend.Spec.MemoryMax); 0 means no limit.
	MemoryMax int64
	// Container, if set, puts every session in a sandbox of its own.
	Container Container
	// MaxSilent holds the agent (Hold) once this many sessions in a row
	// completed without a signal while they held a task or a review; 0
	// means never.
	MaxSilent int
	// Hold, if set, holds the agent for reason (the daemon pauses it, so
	// that the hold survives a restart and the operator sees why).
	Hold func(reason string)
	// Paused, if set, is a pause that survived a restart: no session starts
	// until Resume.
	Paused *Pause
	// Audit, if set, is told of every tool call of every session.
	Audit Auditor
	// BackendName names Backend in session records and progress.
	BackendName string
	// Tools is the agent's tool policy (backend.Spec.Tools).
	Tools backend.ToolPolicy
	// Gate, if set, holds sessions while the agent's provider cannot take
	// them.
	Gate Gate
	// OnProgress, if set, is told of every running session's progress
	// (backend.Spec.OnProgress); it must be quick.
	OnProgress func(ProgressRecord)
	// LeaseGuardKilled, if set, reports whether the daemon's lease guard
	// (package fence) killed its sessions at since or later: a session
	// that ended then by a SIGKILL swarmd did not send is the guard's kill,
	// not the OOM killer's.
	LeaseGuardKilled func(since time.Time) bool
	// Price, if set, is the cost in USD of a session's usage (whose CostUSD
	// is the backend's own record, 0 when it reported none) on the model
	// the stream named ("" when none).
	Price func(backendName, model string, u backend.Usage) float64
}

// setDefaults fills the zero fields that have defaults; New calls it, so
// that every default of the runner is here.
func (c *Config) setDefaults() {
	if c.GracePeriod <= 0 {
		c.GracePeriod = backend.DefaultGracePeriod
	}
	if c.FirstSeq == 0 {
		c.FirstSeq = 1
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Errors returned by New.
var (
	ErrConfig = errors.New("runner: invalid config")
)

// Runner drives one agent. Create with New, run with Run, stop with Stop.
//
// It wires its parts, each a small type of its own: what other goroutines
// use (stop, snaps, pz, inbox, aborts, updates, and cur's session) guards
// itself; the rest is the Run goroutine's alone.
type Runner struct {
	cfg Config
	log *zap.Logger
	m   *agent.Machine

	// Shared with other goroutines; each part guards itself.
	stop    stopper   // Stop, ForceStop and the end of Run (stop.go)
	snaps   published // the snapshot Watch shows (snapshot.go)
	pz      pauser    // the operator's pause and the session's freeze (pause.go)
	inbox   inbox     // urgent mail and wake-ups (inbox.go)
	aborts  aborts    // Abort requests (limits.go)
	updates updates   // settings from a config reload (settings.go)
	cur     current   // the running session (session.go)

	// Owned by the Run goroutine.
	seq          sequence     // the session sequence and id (session.go)
	tree         tree         // the worktree and the session's HEADs (workspace.go)
	work         work         // the prompt and the mail and task it claimed (prompt.go)
	limits       limits       // max_sessions, max_silent_sessions, the provider's ticket (limits.go)
	pacing       pacing       // min_session_interval, rate limits, hot loops, a full disk (pace.go)
	halt         stopCause    // what stopped the machine (stop.go)
	storeBackoff storeBackoff // the store's refusals of prompt builds (outcome.go)
}

// New checks cfg and returns a Runner in Initializing.
func New(cfg Config) (*Runner, error) {
	switch {
	case cfg.Name == "":
		return nil, fmt.Errorf("%w: empty agent name", ErrConfig)
	case cfg.Backend == nil || cfg.Workspace == nil || cfg.Prompter == nil || cfg.Settler == nil || cfg.Logs == nil:
		return nil, fmt.Errorf("%w: agent %s: backend, workspace, prompter, settler and log store are required", ErrConfig, cfg.Name)
	}
	cfg.setDefaults()
	r := &Runner{
		cfg: cfg,
		log: cfg.Logger.With(zap.String("agent", cfg.Name)),
		m:   agent.Restore(cfg.Thresholds, agent.State{Kind: agent.Initializing}, 0, cfg.TotalErrors),
		seq: sequence{n: cfg.FirstSeq},
	}
	r.stop.init()
	r.inbox.init()
	r.aborts.init()
	r.pz.init(cfg.Paused)
	if cfg.StoppedReason != "" {
		r.m = agent.Restore(cfg.Thresholds, agent.State{Kind: agent.Stopped}, 0, cfg.TotalErrors)
	}
	snap := Snapshot{Agent: cfg.Name, State: r.m.State(), Seq: r.seq.n, Since: time.Now(),
		TotalErrors: cfg.TotalErrors, Reason: cfg.StoppedReason}
	r.pz.fill(&snap)
	r.snaps.init(snap)
	return r, nil
}

// Name is the agent's name.
func (r *Runner) Name() string { return r.cfg.Name }

// Stop requests an OperatorStop. actor says who asked ("operator", "daemon").
// It does not wait; see Done. Idempotent.
func (r *Runner) Stop(actor string) { r.stop.stop(actor, "") }

// StopFor is Stop saying why, for the agent's transition and the tasks it
// gives back ("removed from the config by a reload").
func (r *Runner) StopFor(actor, why string) { r.stop.stop(actor, why) }

// ForceStop stops the agent and kills its session at once, without waiting
// for the grace period (a second SIGTERM). Idempotent.
func (r *Runner) ForceStop() { r.stop.force() }

// Interrupt tells the runner that urgent message id (committed at
// committedAt) waits for it. A Running session is interrupted unless its
// prompt already holds the message; in any other state the message goes into
// the next prompt, and a session that is Spawning is interrupted as soon as
// it is Running.
func (r *Runner) Interrupt(id int64, committedAt time.Time) { r.inbox.noteUrgent(id, committedAt) }

// Wake tells an idle agent to look for mail and tasks again. It never
// blocks; wake-ups coalesce.
func (r *Runner) Wake() { r.inbox.wakeUp() }

// Idle reports whether the agent waits, idle, for mail or a task, or is
// about to look whether it should: a wake-up sent from then on is kept, so
// mail or a task that lands while it looks is never missed.
func (r *Runner) Idle() bool { return r.inbox.waiting.Load() }

// Done is closed when Run has returned: the agent is Stopped and its session
// and cleanup are finished.
func (r *Runner) Done() <-chan struct{} { return r.stop.done }

// LastOutput is the time the running session last printed (its start time
// before its first output); zero when no session runs.
func (r *Runner) LastOutput() time.Time { return r.cur.lastOutput() }

// Run drives the agent until it is Stopped and cleaned up. Cancelling ctx is
// an OperatorStop by the daemon.
func (r *Runner) Run(ctx context.Context) error {
	defer close(r.stop.done)
	defer context.AfterFunc(ctx, func() { r.Stop("daemon") })()
	defer r.stop.forceCancel()
	restored := r.m.State().IsTerminal() // stopped before this run (restart recovery)
	for !r.m.State().IsTerminal() {
		r.step()
	}
	r.cleanup()
	if r.stop.requested() || restored {
		return nil // asked to stop (operator, daemon), or never ran
	}
	return &StoppedError{Agent: r.cfg.Name, Reason: r.snapReason()}
}

// StoppedError is what Run returns when the agent stopped on its own: its
// error thresholds, a fatal error, max_sessions; not when it was asked to.
type StoppedError struct {
	Agent, Reason string
}

func (e *StoppedError) Error() string { return "agent " + e.Agent + " stopped: " + e.Reason }

// step runs the work of the current state and applies the event it yields.
func (r *Runner) step() {
	if r.external() {
		return
	}
	switch st := r.m.State(); st.Kind {
	case agent.Initializing:
		r.worktreeReady(r.ensure, func() {
			_ = r.hook(hooks.Payload{Event: hooks.AgentStart, State: agent.Initializing.String()})
		})
	case agent.BuildingPrompt:
		if r.beforeSession() {
			r.buildPrompt()
		}
	case agent.Spawning:
		r.spawn()
	case agent.Running, agent.Interrupting:
		r.waitSession()
	case agent.SessionComplete:
		r.worktreeReady(r.verify, nil)
	case agent.CoolingDown:
		r.coolDown(st.Until)
	}
}

// coolDown waits out CoolingDown's backoff; a rate limit keeps the agent
// cooling down at least until the provider's reset time, however short the
// backoff.
func (r *Runner) coolDown(until time.Time) {
	until, limited := r.pacing.coolUntil(until)
	if limited {
		r.log.Info("rate limited: cooling down until the provider's reset time", zap.Time("until", until))
	}
	if sleep(r.stop.ctx, time.Until(until)) {
		r.apply(agent.EvBackoffElapsed(), "runner", "")
	}
}

// worktreeReady prepares (Ensure) or checks (Verify) the worktree and feeds
// WorktreeReady, running then first (the agent_start hook); a worktree that
// cannot be made ready is a FatalError.
func (r *Runner) worktreeReady(prepare func(context.Context, string) (worktree.Worktree, error), then func()) {
	// prepare clears stale git locks first: no session is alive here, at
	// the agent's start or after one ended.
	wt, err := prepare(r.stop.ctx, r.cfg.Name)
	if r.external() {
		return
	}
	if err != nil {
		r.apply(agent.EvFatalError(fmt.Sprintf("worktree: %v", err)), "runner", "")
		return
	}
	r.tree.ready(wt)
	if then != nil {
		then()
	}
	r.apply(agent.EvWorktreeReady(), "runner", wt.Path)
}

// external applies a pending OperatorStop, reporting whether it did.
func (r *Runner) external() bool {
	if r.stop.requested() && !r.m.State().IsTerminal() {
		r.apply(agent.EvOperatorStop(), r.stop.by(), r.stop.reason())
		return true
	}
	return false
}

// apply feeds ev to the machine, publishes the transition and carries out
// its side effect.
func (r *Runner) apply(ev agent.Event, actor, reason string) {
	r.applyT(ev, actor, reason, time.Time{})
}

func (r *Runner) applyT(ev agent.Event, actor, reason string, urgentCommitted time.Time) {
	now := time.Now()
	from := r.m.State()
	eff, err := r.m.Handle(ev, now)
	if err != nil {
		// A late SessionExited after GraceExceeded is the common case and
		// no bug; any other event the machine refuses is worth a look.
		if ev.Kind == agent.SessionExited {
			r.log.Debug("event ignored", zap.Error(err))
		} else {
			r.log.Warn("event refused by the agent's state machine", zap.Stringer("state", from), zap.Error(err))
		}
		return
	}
	to := r.m.State()
	if to.Kind == agent.Stopped && from.Kind != agent.Stopped {
		r.halt = causeOf(ev, actor)
	}
	if after := r.effect(eff); after != nil {
		defer after()
	}
	if eff.Kind == agent.LogFatal {
		reason = eff.Msg
	}
	if to.IsTerminal() && reason == "" {
		reason = ev.String()
	}
	// Observers first: whoever wakes on the new snapshot finds the
	// transition already recorded.
	if r.cfg.Observer != nil {
		r.cfg.Observer.OnTransition(Transition{
			Agent: r.cfg.Name, At: now, From: from, Event: ev, To: to, Effect: eff, Actor: actor, Reason: reason,
			SessionID: r.seq.id, Seq: r.seq.n, UrgentCommitted: urgentCommitted,
			ConsecutiveErrors: r.m.ConsecutiveErrors(), TotalErrors: r.m.TotalErrors(),
		})
	}
	r.publishTransition(to, reason, now)
}

// effect carries out a transition's side effect. What it returns runs once
// the transition is published: a prompt that could not be stored is the
// next event (promptNotStored).
func (r *Runner) effect(eff agent.SideEffect) (after func()) {
	switch eff.Kind {
	case agent.StorePrompt:
		if err := r.storePrompt(eff.Prompt); err != nil {
			return func() { r.promptNotStored(err) }
		}
		r.work.unstored = false
		r.setDiskFull("")
	case agent.CancelSession:
		if s := r.cur.get(); s != nil {
			r.signal(s, false)
		}
	case agent.ForceStopSession:
		if s := r.cur.get(); s != nil {
			r.signal(s, true)
		}
	case agent.IncrementSession:
		r.seq.completed()
	case agent.LogFatal:
		r.log.Error("agent stopped", zap.String("reason", eff.Msg))
	}
	return nil
}

// publishTransition rebuilds the snapshot after a transition to to.
func (r *Runner) publishTransition(to agent.State, reason string, now time.Time) {
	started := r.cur.startedAt()
	frozen, procs := r.pz.fr.frozen, r.pz.fr.procs
	r.snaps.update(func(s *Snapshot) bool {
		*s = Snapshot{
			Agent: r.cfg.Name, State: to, Seq: r.seq.n, SessionID: r.seq.id, SessionStarted: started,
			ConsecutiveErrors: r.m.ConsecutiveErrors(), TotalErrors: r.m.TotalErrors(),
			Reason: reason, Since: now, Version: s.Version,
			HotLoop: r.pacing.hot(), DiskFull: r.pacing.diskFull,
			StoreWait: s.StoreWait, StoreWaitSince: s.StoreWaitSince,
			Frozen: frozen, FrozenProcs: procs,
		}
		r.pz.fill(s)
		return true
	})
}
