package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/registry"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/view"
)

// controlAPI is the daemon as the control socket sees it.
type controlAPI struct{ d *Daemon }

var _ control.API = controlAPI{}

// Info is the control API's GET /v1/daemon: what contains the trees, and
// how busy the store's write connection was lately.
func (a controlAPI) Info() control.DaemonInfo {
	return control.DaemonInfo{Name: a.d.leaseHolder().Daemon, Isolation: a.d.host.iso.String(),
		Store: a.d.load.describe(time.Now(), a.d.db.WriterStats())}
}

func (a controlAPI) Agents() []control.AgentStatus {
	rs := a.d.reg.Runners()
	out := make([]control.AgentStatus, 0, len(rs))
	now := time.Now()
	for _, r := range rs {
		out = append(out, a.status(r, now))
	}
	return out
}

func (a controlAPI) Agent(name string) (control.AgentStatus, error) {
	r, err := a.d.reg.Runner(name)
	if err != nil {
		return control.AgentStatus{}, unknownAgent(err)
	}
	return a.status(r, time.Now()), nil
}

func (a controlAPI) status(r *runner.Runner, now time.Time) control.AgentStatus {
	s := r.Snapshot()
	st := control.AgentStatus{
		Name: s.Agent, State: s.State.Kind.String(), Seq: s.Seq, SessionID: s.SessionID,
		SessionStarted: s.SessionStarted, ConsecutiveErrors: s.ConsecutiveErrors, TotalErrors: s.TotalErrors,
		Branch: a.d.trees.Branch(s.Agent), Reason: s.Reason, Since: s.Since,
		Paused: s.Paused, PausedBy: s.PausedBy, PauseReason: s.PauseReason, PausedSince: s.PausedSince, Frozen: s.Frozen,
		Waiting: s.Waiting,
	}
	if s.State.Kind == agent.Running || s.State.Kind == agent.Interrupting {
		st.LastOutput = r.LastOutput()
	}
	if s.State.Kind == agent.Stopped {
		// No session age counts on: the runner's snapshot keeps the start
		// of a session that ended after the stop.
		st.SessionStarted = time.Time{}
	}
	st.Health = health(view.Condition{State: s.State.Kind, Since: s.Since, SessionStarted: st.SessionStarted, LastOutput: st.LastOutput},
		now, a.d.stallAfter())
	if s.Paused {
		st.Health = pausedHealth(s) // a frozen session prints nothing: not stalled
	} else if s.StoreWait != "" {
		// The agent holds where it is until the store takes the write.
		st.Health = s.StoreWait + " (for " + now.Sub(s.StoreWaitSince).Round(time.Second).String() + ")"
	} else if c := a.d.gates.providers.Condition(s.Agent); c != "" && s.State.Kind != agent.Stopped {
		st.Health = c
	} else if s.Waiting != "" {
		st.Health = "waiting for provider: " + s.Waiting
	}
	st.DaemonFault = a.d.health.faultText()
	if st.Health == "" && s.State.Kind != agent.Stopped {
		switch {
		case s.Idle:
			st.Health = "idle" // said DONE; waits for mail or a task, starting no session
		case s.DiskFull != "":
			st.Health = "disk full"
		case s.HotLoop:
			st.Health = "hot loop" // sessions keep ending within a second: min_session_interval paces them
		}
	}
	return st
}

// health is what status says of an agent's session by seed 004's visual
// classification, the dashboards' (view.Classify): "stalled" for a running
// session that printed nothing for stallAfter (counted from its start when
// it never printed), "spawning-timeout" for a launch the classification
// takes for dead (view.DefaultSpawnTimeout), "" otherwise.
func health(c view.Condition, now time.Time, stallAfter time.Duration) string {
	switch view.Classify(c, now, view.Thresholds{StallAfter: stallAfter}) {
	case view.Stalled:
		return "stalled"
	case view.Dead:
		if c.State == agent.Spawning {
			return "spawning-timeout"
		}
	}
	return ""
}

func (a controlAPI) StopAgent(ctx context.Context, name string) error {
	actor, err := a.d.authorize(ctx, "stop", name)
	if err != nil {
		return err
	}
	if err := a.d.reg.Stop(name, actor); err != nil {
		return unknownAgent(err)
	}
	return nil
}

// unknownAgent is the registry's error for a name it does not hold, as the
// control API reports it: matching control.ErrUnknownAgent, saying so once.
func unknownAgent(err error) error {
	var ue *registry.UnknownAgentError
	if errors.As(err, &ue) {
		return fmt.Errorf("%w %s (agents: %s)", control.ErrUnknownAgent, ue.Name, strings.Join(ue.Known, ", "))
	}
	return fmt.Errorf("%w: %v", control.ErrUnknownAgent, err)
}

// StartAgent runs a Stopped agent again with its counters reset; the
// decision goes into the event log.
func (a controlAPI) StartAgent(ctx context.Context, name string) error {
	actor, err := a.d.authorize(ctx, "start", name)
	if err != nil {
		return err
	}
	return a.d.startAgent(ctx, name, actor)
}

// authorize says who made a control request and whether they may act on
// target. The caller is recognised by the socket it came through (a
// sandboxed session's own), or else by the connecting process (its pid from
// the kernel, then the tree cgroup the kernel says it is in, where cgroups
// are in force, or else the tree marker in that process's environment),
// never by what the request says: a process in one of this daemon's session trees is
// that session's agent, which may act only on itself unless its config says
// allow_control. A process of one of this daemon's other trees (a hook, a
// merge gate) runs code an agent can edit (a script in its branch) and has
// no authority at all. Everyone else is the operator.
func (d *Daemon) authorize(ctx context.Context, verb, target string) (actor string, err error) {
	name, err := d.requester(ctx, verb+" agents")
	switch {
	case err != nil:
		return "", err
	case name == "":
		return "operator", nil
	case name == target:
		return "agent:" + name, nil
	}
	cfg, _ := d.current()
	if a, ok := cfg.Agent(name); ok && a.AllowControl {
		return "agent:" + name, nil
	}
	return "", fmt.Errorf("%w: agent %s may not %s agent %s (allow_control is off for %s)", control.ErrForbidden, name, verb, target, name)
}

// requester is who made a control request: the agent whose running
// session asks, or "" for the operator. A process of one of this daemon's
// other trees (a hook, the merge gate), and a sandbox's connection whose
// session has ended, are nobody: ErrForbidden, naming what they may not do.
// Never the operator: both run code an agent can change.
func (d *Daemon) requester(ctx context.Context, what string) (agent string, err error) {
	if name, ok := d.caller(ctx); ok {
		return name, nil
	}
	if tree, own := d.ownTreeCaller(ctx); own {
		if _, held := control.Holder(ctx); held {
			return "", fmt.Errorf("%w: the session %s has ended: it may not %s", control.ErrForbidden, tree, what)
		}
		return "", fmt.Errorf("%w: a process of this daemon's tree %s (a hook or the merge gate) may not %s: it runs code the agents can change, with no operator's authority",
			control.ErrForbidden, tree, what)
	}
	return "", nil
}

// caller names the agent whose session made a control request; ok is false
// for everyone else (the operator, hooks included).
func (d *Daemon) caller(ctx context.Context) (agentName string, ok bool) {
	agentName, _, ok = d.callerSession(ctx)
	return agentName, ok
}

// ownTreeCaller reports whether a control request comes from a process of
// one of this daemon's trees that is not a session's (a hook, a merge
// gate), with the tree's id.
func (d *Daemon) ownTreeCaller(ctx context.Context) (tree string, ok bool) {
	if id, held := control.Holder(ctx); held {
		return id, true // a sandbox's socket: never the operator's
	}
	pid, ok := control.PeerPID(ctx)
	if !ok {
		return "", false
	}
	if tree, in := d.treeCgroupOf(pid); in {
		return tree, true
	}
	c, ok := proc.CallerOf(pid)
	cfg, _ := d.current()
	if !ok || c.Owner != cfg.StateDir {
		return "", false
	}
	return c.TreeID, true
}

// callerSession is caller with the session's tree marker (its TreeID is the
// session id).
func (d *Daemon) callerSession(ctx context.Context) (agentName string, c proc.Caller, ok bool) {
	cfg, _ := d.current()
	if holder, held := control.Holder(ctx); held {
		// The socket made for an agent's sandbox: who connects to it is
		// that agent's running session, whatever its environment says.
		if d.host.sandboxes == nil {
			return "", proc.Caller{}, false
		}
		agentName, ok := d.host.sandboxes.session(holder)
		return agentName, proc.Caller{Owner: cfg.StateDir, Instance: d.host.sup.Instance(), TreeID: holder}, ok
	}
	pid, ok := control.PeerPID(ctx)
	if !ok {
		return "", proc.Caller{}, false
	}
	if tree, in := d.treeCgroupOf(pid); in {
		c = proc.Caller{Owner: cfg.StateDir, Instance: d.host.sup.Instance(), TreeID: tree}
	} else if c, ok = proc.CallerOf(pid); !ok || c.Owner != cfg.StateDir {
		return "", proc.Caller{}, false
	}
	agentName, ok = runner.AgentOfSession(c.TreeID) // not found: a hook, the operator's own command
	return agentName, c, ok
}

// treeCgroupOf names the tree of this daemon's whose cgroup process pid is
// in, where cgroups are in force: the kernel says, whatever the process
// did to its environment. A session that dropped its tree marker is still
// its agent, never the operator, and one that copied a peer's marker is
// still itself. A process in none of the trees' cgroups (the operator's
// command) is known by its marker, if it has one.
func (d *Daemon) treeCgroupOf(pid int) (tree string, ok bool) {
	if h := d.host.iso.cgroups; h != nil {
		return h.TreeOf(pid)
	}
	return "", false
}

func (a controlAPI) Events(ctx context.Context, agentName string, after int64, limit int) ([]control.Event, error) {
	a.d.readOwnWrites(ctx)
	evs, err := a.d.db.Events(ctx, store.EventQuery{Agent: agentName, AfterID: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]control.Event, len(evs))
	for i, e := range evs {
		out[i] = ControlEvent(e)
	}
	return out, nil
}

// startAgent replaces a Stopped agent's runner with a fresh one.
// startWait bounds how long `swarmd start` waits for a Stopped agent's
// cleanup before answering that it is still cleaning up.
const startWait = 5 * time.Second

func (d *Daemon) startAgent(ctx context.Context, name, actor string) error {
	old, err := d.reg.Runner(name)
	if err != nil {
		return unknownAgent(err)
	}
	if st := old.Snapshot().State.Kind; st != agent.Stopped {
		return fmt.Errorf("%w: agent %s is %s, not Stopped", control.ErrConflict, name, st)
	}
	// Stopped, but maybe still archiving its logs and running its
	// agent_stopped hooks: wait a little for that, not for as long as the
	// hooks may take, so that a request does not hold its handler (and the
	// caller) for minutes; the caller asks again.
	wait := time.NewTimer(startWait)
	defer wait.Stop()
	select {
	case <-old.Done():
	case <-ctx.Done():
		return ctx.Err()
	case <-wait.C:
		return fmt.Errorf("%w: agent %s is still cleaning up after its stop (archiving logs, agent_stopped hooks); try again", control.ErrConflict, name)
	}
	cfg, _ := d.current()
	a, ok := cfg.Agent(name)
	if !ok {
		return fmt.Errorf("%w: %s is no longer in the config", control.ErrUnknownAgent, name)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.journal.ResetAgent(ctx, name, time.Now(), actor); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	seq, err := d.nextSeq(name)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	r, err := d.newRunner(a, recovered{seq: seq})
	if err != nil {
		return err
	}
	d.adopt(cfg, a, r)
	if err := d.reg.Register(d.run.ctx, r); err != nil {
		if errors.Is(err, registry.ErrClosed) {
			return fmt.Errorf("%w: the daemon is stopping", control.ErrConflict)
		}
		return err
	}
	d.log.Info("agent started by "+actor, zap.String("agent", name))
	return nil
}

// journalObserver writes every transition, agent state and session to
// swarm.db through the batching journal (off the runner's hot path).
type journalObserver struct{ j *store.Journal }

func (o journalObserver) OnTransition(t runner.Transition) {
	o.j.Event(store.EventRecord{
		At: t.At, Agent: t.Agent, From: t.From.Kind.String(), Event: t.Event.Kind.String(), To: t.To.Kind.String(),
		Effect: effectName(t.Effect), Actor: t.Actor, Reason: t.Reason, SessionID: t.SessionID, Seq: t.Seq,
	})
	rec := store.AgentRecord{
		Name: t.Agent, State: t.To.Kind.String(), Seq: t.Seq, ConsecutiveErrors: t.ConsecutiveErrors,
		TotalErrors: t.TotalErrors, UpdatedAt: t.At,
	}
	if t.To.Kind == agent.Stopped {
		rec.StopKind, rec.StopReason = store.StopOperator, t.Reason
		if t.Event.Kind != agent.OperatorStop {
			rec.StopKind = store.StopFatal // thresholds or FatalError: stays Stopped across restarts
		}
	}
	o.j.Agent(rec)
	// A session's row is not the journal's: package settle writes its start
	// before the process runs and its end with its outcome.
}

// Idle and awake are event-log lines of their own: not transitions of the
// seed's machine, which stays in BuildingPrompt.
const (
	eventIdle  = "Idle"
	eventAwake = "Awake"
)

func (o journalObserver) OnIdle(name string, idle bool, at time.Time) {
	e := store.EventRecord{At: at, Agent: name, From: agent.BuildingPrompt.String(), To: agent.BuildingPrompt.String(),
		Event: eventAwake, Actor: "runner", Reason: "mail or a task may be there"}
	if idle {
		e.Event, e.Reason = eventIdle, "said DONE, no mail and no task: no session until one arrives"
	}
	o.j.Event(e)
}

func (o journalObserver) OnSessionEnd(runner.SessionRecord) {}

func effectName(e agent.SideEffect) string {
	if e.Kind == agent.NoEffect {
		return ""
	}
	return e.Kind.String()
}

func (d *Daemon) stallAfter() time.Duration {
	cfg, _ := d.current()
	return cfg.StallAfter
}

// ControlEvent is the JSON shape of an event, the same from the CLI and the
// control socket.
func ControlEvent(e store.EventRecord) control.Event {
	return control.Event{ID: e.ID, At: e.At, Agent: e.Agent, From: e.From, Event: e.Event, To: e.To,
		Effect: e.Effect, Actor: e.Actor, Reason: e.Reason, SessionID: e.SessionID, TaskID: e.TaskID, AbortReason: e.AbortReason}
}
