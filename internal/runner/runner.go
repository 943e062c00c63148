// Package runner drives one agent through its lifecycle: it feeds events to
// the pure state machine of package agent and carries out the side effects it
// returns (seed 001's run_agent: setup, state machine loop, session iteration,
// interrupt handling, cleanup). One Runner is one goroutine; it owns the
// timers (session timeout, grace, backoff) and the agent's current session.
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/hooks"
	"github.com/swarmd/swarmd/internal/logs"
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

// Prompter assembles the prompt of the next session (BuildingPrompt).
type Prompter interface {
	Build(ctx context.Context, req PromptRequest) (Prompt, error)
	// Release drops the claim on the mail of a session that never started.
	Release(ctx context.Context, sessionID string) error
	// Started is told that the session whose prompt carried a newly claimed
	// task has started working on it.
	Started(ctx context.Context, agent, sessionID string, task int64) error
	// Stopped is told that the agent stopped for good in this run (not for
	// a daemon shutdown): the tasks it holds go back to the board.
	Stopped(ctx context.Context, agent, reason string) error
	// Settle is told how every started session ended: a completed one
	// acknowledges the mail its prompt carried and reports its task by the
	// result's signal; any other end leaves the mail to be shown again, with
	// the note saying why.
	Settle(ctx context.Context, s Settlement) (SettleResult, error)
}

// SettleResult is what a settled session said.
type SettleResult struct {
	// Signalled: the session completed and its result carried a signal
	// (done, pass or fail): the unit of work it was about is over. With no
	// mail and no task, the agent then idles.
	Signalled bool
}

// Settlement is how a session whose prompt carried mail ended.
type Settlement struct {
	Agent     string
	SessionID string
	Seq       uint32
	Started   time.Time
	Ended     time.Time
	Completed bool   // SessionComplete: Running -> SessionExited(Success)
	Note      string // why not completed
	Mail      int    // messages the prompt carried
	Task      int64  // the task the prompt carried, 0 for none
	Review    int64  // the task whose review the prompt asked for, 0 for none
	Result    string // the backend's final result text, for the signals
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

// WhyKind says why a session is about to run; the prompt tells the agent.
type WhyKind uint8

// Reasons a session runs.
const (
	WhyFirst WhyKind = iota
	WhyAfterSuccess
	WhyAfterError
	WhyAfterInterrupt
	WhyAfterTurnLimit  // the last session reached max_turns (Detail: the backend's reason)
	WhyAfterToolDenied // the last session called a tool its policy refuses (Detail: the call and the rule)
	WhyAfterBudget     // the last session was stopped when the budget ran out (Detail: the reason)
)

// Why is the reason the next session runs, with detail (an error's text, an
// urgent message's id).
type Why struct {
	Kind   WhyKind
	Detail string
}

// PromptRequest is what a Prompter gets to build one session's prompt.
type PromptRequest struct {
	Agent     string
	Role      string
	SessionID string
	Seq       uint32
	Worktree  worktree.Worktree
	Why       Why
	// MayIdle: the last session said DONE, so a prompt with no mail and no
	// task is not worth a session (Prompt.Idle).
	MayIdle bool
}

// Prompt is a built prompt. Watermark is the highest mailbox message id the
// prompt accounts for: urgent mail at or below it is already in the prompt
// and needs no interrupt.
type Prompt struct {
	Text      string
	Watermark int64
	Mail      int   // messages the prompt carries
	Task      int64 // the task the prompt carries (claimed or continued), 0 for none
	NewTask   bool  // Task was claimed for this prompt: Started moves it on
	Review    int64 // the task whose review the prompt asks for, 0 for none
	// Idle: the agent said it is done and has no mail and no task. No
	// session starts; the runner waits for Wake.
	Idle bool
}

// Transition is one applied event, as observers and the event log see it.
type Transition struct {
	Agent     string
	At        time.Time
	From      agent.State
	Event     agent.Event
	To        agent.State
	Effect    agent.SideEffect
	Actor     string // runner, router, operator, daemon
	Reason    string
	SessionID string
	Seq       uint32
	// UrgentCommitted is when the urgent message behind an UrgentMessage
	// event was committed (zero otherwise): At minus it is the interrupt
	// latency.
	UrgentCommitted   time.Time
	ConsecutiveErrors uint32
	TotalErrors       uint32
}

// SessionRecord describes one finished backend session.
type SessionRecord struct {
	Agent      string
	SessionID  string
	Seq        uint32
	Outcome    agent.ExitOutcome
	Result     backend.Result
	Stopped    bool // ended because the agent was stopping
	LogPath    string
	HeadBefore string
	HeadAfter  string
	Commits    int // commits the session made (HEAD before..after)
	// ForceStopped: the runner killed the session after its timeout's or
	// its stop's grace period (a GraceExceeded force stop is a transition).
	ForceStopped bool
	// Interrupted: urgent mail interrupted the session and it did not
	// succeed (its Result's AbortReason is then backend.AbortUrgentMessage).
	// The state machine counts no error for it; see OutcomeLabel.
	Interrupted bool
	// TurnLimit: the session reached max_turns (its Result's AbortReason is
	// backend.AbortMaxTurns). Not an error either; see OutcomeLabel.
	TurnLimit bool
	// StoppedFor is why swarmd stopped the session on purpose (max_turns,
	// permission_denied, budget_exhausted; see stoppedFor), "" otherwise.
	StoppedFor string
	// Backend is the name of the backend the session ran on.
	Backend string
}

// Snapshot is the agent's observable state at one moment.
type Snapshot struct {
	Agent             string
	State             agent.State
	Seq               uint32 // the session sequence counter
	SessionID         string // current or last session
	SessionStarted    time.Time
	ConsecutiveErrors uint32
	TotalErrors       uint32
	Reason            string // why the last transition happened (the stop reason once Stopped)
	Since             time.Time
	Version           uint64 // increments on every transition
	// HotLoop: the last sessions each ended on their own within a second
	// of starting (a backend that exits at once), so the agent only runs
	// as fast as min_session_interval allows.
	HotLoop bool
	// DiskFull, if set, is how the last write of a session log or prompt
	// failed for lack of space; it clears at the next write that works.
	DiskFull string
	// Idle: waiting in BuildingPrompt for mail or a task (see Prompt.Idle).
	Idle bool
	// Paused: held by Pause (who, why, since when); Frozen: the running
	// session's processes are stopped (Pause.Now).
	Paused      bool
	PauseReason string
	PausedBy    string
	PausedSince time.Time
	Frozen      bool
	FrozenProcs int // how many processes the freeze stopped
	// Waiting, if set, is why the agent waits for its provider before its
	// next session (Config.Gate).
	Waiting string
}

// Config is everything one Runner needs. Zero durations take defaults.
type Config struct {
	Name        string
	Role        string
	Backend     Backend
	Workspace   Workspace
	Prompter    Prompter
	Observer    Observer // may be nil
	Logs        LogStore
	Hooks       Hooks // may be nil
	Logger      *zap.Logger
	Thresholds  agent.Thresholds
	Timeout     time.Duration // session_timeout (0 = none)
	GracePeriod time.Duration // default DefaultGracePeriod
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
	// Price, if set, is the cost in USD of a session's usage (whose CostUSD
	// is the backend's own record, 0 when it reported none) on the model
	// the stream named ("" when none).
	Price func(backendName, model string, u backend.Usage) float64
}

// DefaultGracePeriod is how long a cancelled or interrupted session gets to
// end before it is force-stopped, when Config.GracePeriod is zero; the
// config's defaults.grace_period default is this.
const DefaultGracePeriod = 10 * time.Second

// setDefaults fills the zero fields that have defaults; New calls it, so
// that every default of the runner is here.
func (c *Config) setDefaults() {
	if c.GracePeriod <= 0 {
		c.GracePeriod = DefaultGracePeriod
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
type Runner struct {
	cfg Config
	log *zap.Logger
	m   *agent.Machine

	stopCtx     context.Context // cancelled by Stop: aborts blocking steps
	stopCancel  context.CancelFunc
	forceCtx    context.Context // cancelled by ForceStop: kills hooks too
	forceCancel context.CancelFunc
	stopOnce    sync.Once
	forceCh     chan struct{}
	forceOnce   sync.Once
	pz          pauseState
	urgentCh    chan struct{} // capacity 1: coalesced wake-ups
	wakeCh      chan struct{} // capacity 1: an idle agent's wake-ups
	abortCh     chan struct{} // capacity 1: an Abort for the Run goroutine
	waiting     atomic.Bool   // idle, or building a prompt that may find it idle
	done        chan struct{}

	mu          sync.Mutex
	pending     *Settings // from a config reload, applied at the next BuildingPrompt
	snap        Snapshot
	changed     chan struct{}
	stopActor   string
	maxUrgent   int64
	urgentAt    time.Time
	sess        backend.Session
	sessStarted time.Time
	abortReq    *abortRequest

	// Owned by the Run goroutine.
	seq        uint32
	sessionID  string
	watermark  int64
	wt         worktree.Worktree
	why        Why
	lastPrompt string
	headBefore string
	retryAfter time.Time // a rate-limited session's provider reset time
	lastSpawn  time.Time // when the last session was spawned (min_session_interval counts from it)
	quick      int       // sessions in a row that ended on their own in under hotLoopSession
	diskFull   string    // Snapshot.DiskFull
	wtChecked  bool      // the worktree was prepared or verified since the last session
	claimed    bool      // a prompt claimed mail for sessionID, and no session has started with it
	carried    int       // messages the current session's prompt carried
	task       int64     // the task the current session's prompt carried
	review     int64     // the task the current session reviews
	newTask    bool      // task was claimed for the current prompt
	started    int       // sessions started in this run (max_sessions)
	signalled  bool      // the last session completed with the done signal
	timedOut   bool
	forced     bool // the runner force-stopped the session outside a GraceExceeded transition
	tm         timers

	// interrupted: urgent mail interrupted the session (UrgentMessage).
	interrupted bool
	aborted     *abortRequest // Abort cancelled the running session
	ticket      Ticket        // from Config.Gate, until the session it admitted ends
}

// New checks cfg and returns a Runner in Initializing.
func New(cfg Config) (*Runner, error) {
	switch {
	case cfg.Name == "":
		return nil, fmt.Errorf("%w: empty agent name", ErrConfig)
	case cfg.Backend == nil || cfg.Workspace == nil || cfg.Prompter == nil || cfg.Logs == nil:
		return nil, fmt.Errorf("%w: agent %s: backend, workspace, prompter and log store are required", ErrConfig, cfg.Name)
	}
	cfg.setDefaults()
	r := &Runner{
		cfg:      cfg,
		log:      cfg.Logger.With(zap.String("agent", cfg.Name)),
		m:        agent.Restore(cfg.Thresholds, agent.State{Kind: agent.Initializing}, 0, cfg.TotalErrors),
		forceCh:  make(chan struct{}),
		urgentCh: make(chan struct{}, 1),
		wakeCh:   make(chan struct{}, 1),
		abortCh:  make(chan struct{}, 1),
		done:     make(chan struct{}),
		changed:  make(chan struct{}),
		seq:      cfg.FirstSeq,
	}
	r.stopCtx, r.stopCancel = context.WithCancel(context.Background())
	r.forceCtx, r.forceCancel = context.WithCancel(context.Background())
	r.initPause(cfg.Paused)
	if cfg.StoppedReason != "" {
		r.m = agent.Restore(cfg.Thresholds, agent.State{Kind: agent.Stopped}, 0, cfg.TotalErrors)
	}
	r.snap = Snapshot{Agent: cfg.Name, State: r.m.State(), Seq: r.seq, Since: time.Now(),
		TotalErrors: cfg.TotalErrors, Reason: cfg.StoppedReason}
	r.fillPauseLocked(&r.snap)
	return r, nil
}

// Name is the agent's name.
func (r *Runner) Name() string { return r.cfg.Name }

// Settings are what a config reload may change in a running agent. They
// apply from the next session: a running session keeps what it started with.
type Settings struct {
	Role        string
	Backend     Backend
	Prompter    Prompter
	Env         []string
	DefaultEnv  []string
	Timeout     time.Duration
	GracePeriod time.Duration
	// MaxSessions replaces Config.MaxSessions (0 is no limit).
	MaxSessions int
	// MinSessionInterval replaces Config.MinSessionInterval (0 is no minimum).
	MinSessionInterval time.Duration
	// MaxTurns replaces Config.MaxTurns (0 is no limit).
	MaxTurns int
	// BackendName, Tools and Gate replace Config's (a nil Gate: none).
	BackendName string
	Tools       backend.ToolPolicy
	Gate        Gate
}

// Update queues new settings for the next session.
func (r *Runner) Update(s Settings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = &s
}

// applyPending takes queued settings; only the Run goroutine calls it.
func (r *Runner) applyPending() {
	r.mu.Lock()
	p := r.pending
	r.pending = nil
	r.mu.Unlock()
	if p == nil {
		return
	}
	r.cfg.Role, r.cfg.Env, r.cfg.Timeout, r.cfg.MinSessionInterval = p.Role, p.Env, p.Timeout, p.MinSessionInterval
	r.cfg.MaxSessions, r.cfg.MaxTurns, r.cfg.DefaultEnv = p.MaxSessions, p.MaxTurns, p.DefaultEnv
	r.cfg.BackendName, r.cfg.Tools, r.cfg.Gate = p.BackendName, p.Tools, p.Gate
	if p.Backend != nil {
		r.cfg.Backend = p.Backend
	}
	if p.Prompter != nil {
		r.cfg.Prompter = p.Prompter
	}
	if p.GracePeriod > 0 {
		r.cfg.GracePeriod = p.GracePeriod
	}
	r.log.Info("new settings from the reloaded config apply from this session")
}

// Stop requests an OperatorStop. actor says who asked ("operator", "daemon").
// It does not wait; see Done. Idempotent.
func (r *Runner) Stop(actor string) {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.stopActor = actor
		r.mu.Unlock()
		r.stopCancel()
	})
}

// ForceStop stops the agent and kills its session at once, without waiting
// for the grace period (a second SIGTERM). Idempotent.
func (r *Runner) ForceStop() {
	r.Stop("daemon")
	r.forceOnce.Do(func() {
		close(r.forceCh)
		r.forceCancel()
	})
}

// Interrupt tells the runner that urgent message id (committed at
// committedAt) waits for it. A Running session is interrupted unless its
// prompt already holds the message; in any other state the message goes into
// the next prompt, and a session that is Spawning is interrupted as soon as
// it is Running.
func (r *Runner) Interrupt(id int64, committedAt time.Time) {
	r.mu.Lock()
	if id > r.maxUrgent {
		r.maxUrgent = id
		r.urgentAt = committedAt
	}
	r.mu.Unlock()
	select {
	case r.urgentCh <- struct{}{}:
	default:
	}
}

// Wake tells an idle agent to look for mail and tasks again. It never
// blocks; wake-ups coalesce.
func (r *Runner) Wake() {
	select {
	case r.wakeCh <- struct{}{}:
	default:
	}
}

// Idle reports whether the agent waits, idle, for mail or a task, or is
// about to look whether it should: a wake-up sent from then on is kept, so
// mail or a task that lands while it looks is never missed.
func (r *Runner) Idle() bool { return r.waiting.Load() }

// Done is closed when Run has returned: the agent is Stopped and its session
// and cleanup are finished.
func (r *Runner) Done() <-chan struct{} { return r.done }

// Snapshot returns the current state.
func (r *Runner) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snap
}

// Watch returns the current state and a channel closed at the next change:
// observers wait on it instead of polling.
func (r *Runner) Watch() (Snapshot, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snap, r.changed
}

// LastOutput is the time the running session last printed (its start time
// before its first output); zero when no session runs.
func (r *Runner) LastOutput() time.Time {
	r.mu.Lock()
	s := r.sess
	r.mu.Unlock()
	if s == nil {
		return time.Time{}
	}
	return s.LastOutput()
}

// Run drives the agent until it is Stopped and cleaned up. Cancelling ctx is
// an OperatorStop by the daemon.
func (r *Runner) Run(ctx context.Context) error {
	defer close(r.done)
	defer context.AfterFunc(ctx, func() { r.Stop("daemon") })()
	defer r.forceCancel()
	for !r.m.State().IsTerminal() {
		r.step()
	}
	r.cleanup()
	return nil
}

// step runs the work of the current state and applies the event it yields.
func (r *Runner) step() {
	if r.external() {
		return
	}
	switch st := r.m.State(); st.Kind {
	case agent.Initializing:
		r.worktreeReady(r.cfg.Workspace.Ensure, func() {
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
		r.worktreeReady(r.cfg.Workspace.Verify, nil)
	case agent.CoolingDown:
		// A rate limit keeps the agent cooling down at least until the
		// provider's reset time, however short the backoff.
		until := st.Until
		if r.retryAfter.After(until) {
			r.log.Info("rate limited: cooling down until the provider's reset time", zap.Time("until", r.retryAfter))
			until = r.retryAfter
		}
		if sleep(r.stopCtx, time.Until(until)) {
			r.apply(agent.EvBackoffElapsed(), "runner", "")
		}
	}
}

// worktreeReady prepares (Ensure) or checks (Verify) the worktree and feeds
// WorktreeReady, running then first (the agent_start hook); a worktree that
// cannot be made ready is a FatalError.
func (r *Runner) worktreeReady(prepare func(context.Context, string) (worktree.Worktree, error), then func()) {
	r.clearLocks() // no session is alive here: at agent start, or after one ended
	wt, err := prepare(r.stopCtx, r.cfg.Name)
	if r.external() {
		return
	}
	if err != nil {
		r.apply(agent.EvFatalError(fmt.Sprintf("worktree: %v", err)), "runner", "")
		return
	}
	r.wt, r.wtChecked = wt, true
	if then != nil {
		then()
	}
	r.apply(agent.EvWorktreeReady(), "runner", wt.Path)
}

// external applies a pending OperatorStop, reporting whether it did.
func (r *Runner) external() bool {
	if r.stopCtx.Err() != nil && !r.m.State().IsTerminal() {
		r.mu.Lock()
		actor := r.stopActor
		r.mu.Unlock()
		r.apply(agent.EvOperatorStop(), actor, "stop requested by "+actor)
		return true
	}
	return false
}

func (r *Runner) buildPrompt() {
	r.applyPending()
	if r.cfg.MaxSessions > 0 && r.started >= r.cfg.MaxSessions {
		r.apply(agent.EvOperatorStop(), "runner", "max_sessions: "+strconv.Itoa(r.started)+" sessions run")
		return
	}
	r.sessionID = newSessionID(r.cfg.Name, r.seq)
	// Urgent mail the runner heard of before consuming was committed before
	// it, so the prompt holds it (or it was no longer pending).
	r.mu.Lock()
	known := r.maxUrgent
	r.mu.Unlock()
	if r.signalled {
		r.waiting.Store(true)
	}
	p, err := r.cfg.Prompter.Build(r.stopCtx, PromptRequest{
		Agent:     r.cfg.Name,
		Role:      r.cfg.Role,
		SessionID: r.sessionID,
		Seq:       r.seq,
		Worktree:  r.wt,
		Why:       r.why,
		MayIdle:   r.signalled,
	})
	if err == nil {
		r.claimed, r.carried = p.Mail > 0 || p.Task != 0, p.Mail
		r.task, r.newTask, r.review = p.Task, p.NewTask, p.Review
		r.watermark = max(r.watermark, p.Watermark, known)
	}
	stopping := r.external()
	if stopping || err != nil || p.Idle {
		r.settleTicket(backend.Result{}, false) // no session: the next waiter may go
	}
	if stopping {
		return
	}
	if err != nil {
		r.apply(agent.EvFatalError(fmt.Sprintf("build prompt: %v", err)), "runner", "")
		return
	}
	if p.Idle {
		r.waitIdle()
		return
	}
	r.waiting.Store(false)
	r.apply(agent.EvPromptReady(p.Text), "runner", strconv.Itoa(len(p.Text))+" bytes")
}

// waitIdle waits in BuildingPrompt, starting no session, until a wake-up
// (mail or a task may be there), urgent mail or a stop; step then builds the
// prompt again.
func (r *Runner) waitIdle() {
	r.setIdle(true)
	defer r.setIdle(false)
	select {
	case <-r.wakeCh:
	case <-r.urgentCh:
	case <-r.stopCtx.Done():
	}
	r.waiting.Store(false)
}

func (r *Runner) setIdle(idle bool) {
	now := time.Now()
	r.mu.Lock()
	if r.snap.Idle == idle {
		r.mu.Unlock()
		return
	}
	r.snap.Idle = idle
	r.snap.Version++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	if r.cfg.Observer != nil {
		r.cfg.Observer.OnIdle(r.cfg.Name, idle, now)
	}
}

func (r *Runner) logPath() string { return r.cfg.Logs.LogPath(r.cfg.Name, r.seq) }

func (r *Runner) spawn() {
	spec := backend.Spec{
		Agent:     r.cfg.Name,
		SessionID: r.sessionID,
		Seq:       r.seq,
		Dir:       r.wt.Path,
		Prompt:    r.lastPrompt,
		LogPath:   r.logPath(),

		MaxLogBytes: r.cfg.MaxLogBytes,
		MaxTurns:    r.cfg.MaxTurns,
		OnTool:      r.onTool(),
		Tools:       r.cfg.Tools,
		OnProgress:  r.onProgress(),
	}
	r.setSpecEnv(&spec)
	r.clearAbort()
	r.lastSpawn = time.Now()
	r.headBefore = r.head()
	spec.HeadBefore = r.headBefore
	err := r.hook(hooks.Payload{Event: hooks.SessionStart, State: agent.Spawning.String()})
	var sess backend.Session
	if err == nil {
		sess, err = r.cfg.Backend.Start(r.stopCtx, spec)
	}
	if err != nil {
		r.release()
		r.settleTicket(backend.Result{}, false)
		if r.external() {
			return
		}
		msg := "start: " + err.Error()
		switch {
		case errors.Is(err, hooks.ErrBlocked):
			msg = err.Error()
		case backend.IsDiskFull(err):
			msg = "disk full: " + msg
			r.setDiskFull(msg)
		}
		r.why = Why{Kind: WhyAfterError, Detail: msg}
		r.apply(agent.EvSessionExited(agent.ExitOutcome{Kind: agent.Error, Msg: msg}), "runner", msg)
		return
	}
	r.claimed = false
	r.timedOut, r.forced, r.interrupted = false, false, false
	r.mu.Lock()
	r.sess = sess
	r.sessStarted = time.Now()
	r.mu.Unlock()
	if r.cfg.Timeout > 0 {
		r.tm.startTimeout(r.cfg.Timeout)
	}
	r.started++
	r.apply(agent.EvSessionStarted(r.seq), "runner", "pid "+strconv.Itoa(sess.Pid()))
	if r.newTask {
		r.newTask = false
		if err := r.cfg.Prompter.Started(r.stopCtx, r.cfg.Name, r.sessionID, r.task); err != nil {
			r.log.Warn("start the session's task", zap.Int64("task", r.task), zap.Error(err))
		}
	}
	r.maybeInterrupt()
}

// maybeInterrupt interrupts a Running session when urgent mail newer than its
// prompt is waiting.
func (r *Runner) maybeInterrupt() {
	if r.m.State().Kind != agent.Running || r.held() {
		return
	}
	r.mu.Lock()
	pending, at := r.maxUrgent > r.watermark, r.urgentAt
	r.mu.Unlock()
	if !pending {
		return
	}
	r.why = Why{Kind: WhyAfterInterrupt}
	r.applyUrgent(at)
}

func (r *Runner) applyUrgent(committed time.Time) {
	r.applyT(agent.EvUrgentMessage(), "router", "urgent mail", committed)
	r.interrupted = true
	// The grace period now bounds the session; a session timeout no longer
	// applies to it.
	r.tm.interrupted(r.cfg.GracePeriod)
}

// waitSession waits in Running or Interrupting for whatever comes first.
func (r *Runner) waitSession() {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	select {
	case <-sess.Done():
		r.finishSession(false)
	case <-r.tm.timeout.C():
		r.tm.timeout.fired()
		r.timedOut = true
		r.log.Info("session timeout, cancelling", zap.String("session", r.sessionID), zap.Duration("timeout", r.cfg.Timeout))
		r.signal(sess.Cancel, "cancel")
		r.tm.cancelled(r.cfg.GracePeriod)
	case <-r.tm.kill.C():
		r.tm.kill.fired()
		r.forced = true
		r.signal(sess.ForceStop, "force stop")
	case <-r.tm.grace.C():
		r.tm.grace.fired()
		r.apply(agent.EvGraceExceeded(), "runner", "grace period "+r.cfg.GracePeriod.String()+" exceeded")
		// The next session must not start while this one has a live process.
		<-sess.Done()
		r.finishSession(false) // its SessionExited is late: the machine rejects it
		r.why = Why{Kind: WhyAfterInterrupt}
	case <-r.urgentCh:
		r.maybeInterrupt()
	case <-r.pz.ch:
		r.pauseChanged()
	case <-r.abortCh:
		r.takeAbort()
	case <-r.stopCtx.Done():
		r.external()
	}
}

// finishSession records the ended session and feeds SessionExited. stopping
// says the agent is already Stopped (cleanup).
func (r *Runner) finishSession(stopping bool) {
	r.mu.Lock()
	sess := r.sess
	r.sess = nil
	r.mu.Unlock()
	r.sessionGone()
	r.tm.stop()
	res, out, interrupted := r.sessionResult(sess)
	r.settleTicket(res, true)
	r.settle(res, out, stopping)
	r.noteSessionEnd(res, stopping)
	rec := r.sessionRecord(sess, res, out, stopping, interrupted)
	if r.cfg.Observer != nil {
		r.cfg.Observer.OnSessionEnd(rec)
	}
	_ = r.hook(hooks.Payload{
		Event: hooks.SessionEnd, State: r.m.State().Kind.String(), Outcome: out.Kind.String(), Reason: res.Reason,
		HeadBefore: rec.HeadBefore, HeadAfter: rec.HeadAfter, Commits: rec.Commits,
	})
	r.log.Info("session ended", zap.String("session", sess.ID()), zap.Stringer("outcome", out),
		zap.Int("exit_code", res.ExitCode), zap.String("signal", res.Signal), zap.String("abort_reason", res.AbortReason),
		zap.Duration("duration", res.Ended.Sub(res.Started)))
	if stopping {
		return
	}
	r.retryAfter = res.RetryAfter
	if res.Fatal != "" {
		// No retry can fix it (an invalid API key): stop now instead of
		// burning the error budget.
		r.apply(agent.EvFatalError(res.Fatal), "runner", res.Fatal)
		return
	}
	prev := r.m.State().Kind
	switch {
	case prev == agent.Interrupting:
		r.why = Why{Kind: WhyAfterInterrupt}
	case stoppedFor(res, r.timedOut) != "":
		_, r.why = stoppedNote(res)
	case out.Kind == agent.Success:
		r.why = Why{Kind: WhyAfterSuccess}
	default:
		r.why = Why{Kind: WhyAfterError, Detail: out.String()}
	}
	r.apply(agent.EvSessionExited(out), "runner", res.Reason)
}

// cleanup runs once the agent is Stopped: end the session (cancelled
// already by OperatorStop's side effect, or now for a FatalError), force it
// after the grace period or at once on ForceStop, and return unused mail.
func (r *Runner) cleanup() {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	if sess != nil {
		select {
		case <-sess.Done():
		default:
			r.signal(sess.Cancel, "cancel")
			t := time.NewTimer(r.cfg.GracePeriod)
			select {
			case <-sess.Done():
			case <-t.C:
				r.log.Warn("session ignored cancel for the grace period, force-stopping", zap.String("session", sess.ID()))
				r.forced = true
				r.signal(sess.ForceStop, "force stop")
			case <-r.forceCh:
				r.forced = true
				r.signal(sess.ForceStop, "force stop")
			}
			t.Stop()
			<-sess.Done()
		}
		r.finishSession(true)
	}
	r.settleTicket(backend.Result{}, false)
	r.release()
	if actor := r.stopActorName(); actor != "daemon" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := r.cfg.Prompter.Stopped(ctx, r.cfg.Name, "agent "+r.cfg.Name+" stopped: "+r.snapReason()); err != nil {
			r.log.Error("return the agent's tasks", zap.Error(err))
		}
		cancel()
	}
	// Archive and the agent_stopped hook run even while the daemon stops:
	// only a force stop cuts them short.
	if _, err := r.cfg.Logs.Archive(r.forceCtx, r.cfg.Name, time.Now()); err != nil {
		r.log.Error("archive session logs", zap.Error(err))
	}
	r.mu.Lock()
	reason := r.snap.Reason
	r.mu.Unlock()
	_ = r.hook(hooks.Payload{Event: hooks.AgentStopped, State: agent.Stopped.String(), StopReason: reason})
}

// hookCtx bounds a hook. A stop ends a running hook's tree at once, as it
// ends a session; the hooks that are part of the stop itself (session_end of
// the session it ended, agent_stopped) run to their end, and only a force
// stop cuts them short.
func (r *Runner) hookCtx(ev hooks.Event) context.Context {
	if (ev == hooks.SessionEnd || ev == hooks.AgentStopped) && r.stopCtx.Err() != nil {
		return r.forceCtx
	}
	return r.stopCtx
}

// hook runs the hooks of p.Event in the worktree with the session's
// environment. Only a blocking session_start hook returns an error.
func (r *Runner) hook(p hooks.Payload) error {
	if r.cfg.Hooks == nil || r.wt.Path == "" {
		return nil
	}
	p.Agent, p.SessionID, p.Time = r.cfg.Name, r.sessionID, time.Now()
	if p.Event != hooks.AgentStart && p.Event != hooks.AgentStopped {
		p.Seq = r.seq
	}
	return r.cfg.Hooks.Run(r.hookCtx(p.Event), r.wt.Path, r.env(), p)
}

// settle acknowledges the mail of a session that completed, or notes why it
// will be shown again, before the next prompt is built: the next session must
// see exactly the mail that no completed session saw.
func (r *Runner) settle(res backend.Result, out agent.ExitOutcome, stopping bool) {
	st := Settlement{Agent: r.cfg.Name, SessionID: r.sessionID, Seq: r.seq, Started: res.Started, Ended: res.Ended,
		Mail: r.carried, Task: r.task, Review: r.review, Result: res.Text}
	r.carried = 0
	prev := r.m.State().Kind
	switch {
	case stopping:
		st.Note = "that session was stopped with its agent (" + r.snapReason() + ")"
	case prev == agent.Interrupting:
		st.Note = "that session was interrupted by urgent mail"
	case res.Fatal != "":
		st.Note = "that session failed: " + res.Fatal
	case out.Kind == agent.Timeout:
		st.Note = "that session timed out"
	case stoppedFor(res, r.timedOut) != "":
		st.Note, _ = stoppedNote(res)
	case out.Kind == agent.Success && prev == agent.Running:
		st.Completed = true
	default:
		st.Note = "that session failed: " + out.String()
	}
	if r.forced && !st.Completed {
		st.Note += " and was force-stopped"
	}
	if st.Ended.IsZero() {
		st.Ended = time.Now()
	}
	if st.Started.IsZero() {
		st.Started = st.Ended
	}
	// Not stopCtx: settling must happen even while stopping.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sr, err := r.cfg.Prompter.Settle(ctx, st)
	if err != nil {
		// The mail stays pending: shown again rather than never.
		r.log.Error("settle the session's mail and task", zap.String("session", r.sessionID), zap.Error(err))
	}
	r.signalled = sr.Signalled
}

// stopActorName is who asked for the stop ("" when nobody did: the agent
// stopped by itself).
func (r *Runner) stopActorName() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopActor
}

func (r *Runner) snapReason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snap.Reason
}

// release returns mail claimed by a prompt whose session never started.
func (r *Runner) release() {
	if !r.claimed {
		return
	}
	r.claimed, r.carried, r.task, r.newTask = false, 0, 0, false
	// Not stopCtx: returning the mail must happen even while stopping.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.cfg.Prompter.Release(ctx, r.sessionID); err != nil {
		r.log.Error("return claimed mail", zap.String("session", r.sessionID), zap.Error(err))
	}
}

func (r *Runner) signal(f func() error, what string) {
	if err := f(); err != nil {
		r.log.Warn("session "+what, zap.String("session", r.sessionID), zap.Error(err))
	}
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
		// Not a bug: a late SessionExited after GraceExceeded is the common case.
		r.log.Debug("event ignored", zap.Error(err))
		return
	}
	to := r.m.State()
	switch eff.Kind {
	case agent.StorePrompt:
		if err := r.storePrompt(eff.Prompt); err != nil {
			defer r.promptNotStored(err)
		} else {
			r.setDiskFull("")
		}
	case agent.CancelSession:
		if s := r.session(); s != nil {
			r.signal(s.Cancel, "cancel")
		}
	case agent.ForceStopSession:
		if s := r.session(); s != nil {
			r.signal(s.ForceStop, "force stop")
		}
	case agent.IncrementSession:
		r.seq++
	case agent.LogFatal:
		reason = eff.Msg
		r.log.Error("agent stopped", zap.String("reason", eff.Msg))
	}
	if to.IsTerminal() && reason == "" {
		reason = ev.String()
	}
	// Observers first: whoever wakes on the new snapshot finds the
	// transition already recorded.
	if r.cfg.Observer != nil {
		r.cfg.Observer.OnTransition(Transition{
			Agent: r.cfg.Name, At: now, From: from, Event: ev, To: to, Effect: eff, Actor: actor, Reason: reason,
			SessionID: r.sessionID, Seq: r.seq, UrgentCommitted: urgentCommitted,
			ConsecutiveErrors: r.m.ConsecutiveErrors(), TotalErrors: r.m.TotalErrors(),
		})
	}
	r.mu.Lock()
	r.snap = Snapshot{
		Agent: r.cfg.Name, State: to, Seq: r.seq, SessionID: r.sessionID, SessionStarted: r.sessStarted,
		ConsecutiveErrors: r.m.ConsecutiveErrors(), TotalErrors: r.m.TotalErrors(),
		Reason: reason, Since: now, Version: r.snap.Version + 1,
		HotLoop: r.quick >= hotLoopAfter, DiskFull: r.diskFull,
	}
	r.snapPause(&r.snap)
	if r.sess == nil {
		r.snap.SessionStarted = time.Time{}
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func (r *Runner) session() backend.Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sess
}

// storePrompt keeps the prompt for the session about to spawn and writes
// it where the log store says; package logs owns the file itself.
func (r *Runner) storePrompt(p string) error {
	r.lastPrompt = p
	return logs.WritePrompt(r.cfg.Logs.PromptPath(r.cfg.Name, r.seq), p)
}

// AgentOfSession is the agent a session id (newSessionID's form) belongs to;
// ok is false for anything else, such as a hook's tree id.
func AgentOfSession(id string) (string, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 || len(id)-i-1 != 12 {
		return "", false
	}
	if _, err := hex.DecodeString(id[i+1:]); err != nil {
		return "", false
	}
	j := strings.LastIndexByte(id[:i], '-')
	if j <= 0 {
		return "", false
	}
	if _, err := strconv.ParseUint(id[j+1:i], 10, 32); err != nil {
		return "", false
	}
	return id[:j], true
}

// newSessionID is unique across daemon restarts: agent, seq and 48 random bits.
func newSessionID(agentName string, seq uint32) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return agentName + "-" + strconv.FormatUint(uint64(seq), 10) + "-" + hex.EncodeToString(b[:])
}
