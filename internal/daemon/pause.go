package daemon

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
	"go.uber.org/zap"
)

// freezeWait bounds how long `swarmd pause --now` waits for the runner to
// freeze a session that is starting or running.
const freezeWait = 5 * time.Second

// PauseAgent holds an agent for whoever may act on it (see authorize).
func (a controlAPI) PauseAgent(ctx context.Context, name string, req control.PauseRequest) (control.PauseResult, error) {
	actor, err := a.d.authorize(ctx, "pause", name)
	if err != nil {
		return control.PauseResult{}, err
	}
	return a.d.pauseAgent(ctx, name, actor, req.Reason, req.Now)
}

// ResumeAgent lifts an agent's pause, unless its budget is still spent.
func (a controlAPI) ResumeAgent(ctx context.Context, name string) (control.ResumeResult, error) {
	actor, err := a.d.authorize(ctx, "resume", name)
	if err != nil {
		return control.ResumeResult{}, err
	}
	if msg, held := a.d.budget.Holds(name); held {
		return control.ResumeResult{}, fmt.Errorf("%w: %s", control.ErrConflict, msg)
	}
	if strings.HasPrefix(actor, "agent:") {
		// An agent lifts only an agent's pause: the operator's, and
		// swarmd's own hold, are the operator's to lift (a session that
		// resumed its own agent undid the operator's pause of it).
		if r, err := a.d.reg.Runner(name); err == nil {
			if p, paused := r.Paused(); paused && !strings.HasPrefix(p.Actor, "agent:") {
				return control.ResumeResult{}, fmt.Errorf("%w: agent %s was paused by %s: only the operator resumes it", control.ErrForbidden, name, p.Actor)
			}
		}
	}
	return a.d.resumeAgent(ctx, name, actor)
}

// actorSwarmd is the actor of the pauses swarmd itself makes.
const actorSwarmd = "swarmd"

// holdAgent pauses an agent for swarmd itself (its sessions keep ending
// without reporting on the work they hold), as an operator's pause would:
// stored, with its event, shown with its reason, lifted by swarmd resume.
func (d *Daemon) holdAgent(name, reason string) {
	if _, err := d.pauseAgent(context.Background(), name, actorSwarmd, reason, false); err != nil {
		d.log.Error("hold an agent whose sessions do not report", zap.String("agent", name), zap.Error(err))
		return
	}
	d.log.Warn("agent held: "+reason, zap.String("agent", name))
}

// pauseAgent stores the pause (with its event) before the runner hears of
// it: once the operator is told it took, it survives a crash. With now it
// waits until the running session is frozen.
func (d *Daemon) pauseAgent(ctx context.Context, name, actor, reason string, now bool) (control.PauseResult, error) {
	r, err := d.reg.Runner(name)
	if err != nil {
		return control.PauseResult{}, fmt.Errorf("%w: %v", control.ErrUnknownAgent, err)
	}
	at := time.Now()
	prev, already := r.Paused()
	since := at
	if already {
		since = prev.Since
	}
	s := r.Snapshot()
	why := reason
	if now {
		why = JoinReason(why, "--now: the running session is frozen")
	}
	err = d.journal.SetPause(ctx, store.PauseRecord{Agent: name, Actor: actor, Reason: reason, Freeze: now, Since: since},
		stateEvent(s, at, store.EventPaused, actor, why))
	if err != nil {
		return control.PauseResult{}, fmt.Errorf("pause %s: %w", name, err)
	}
	r.Pause(runner.Pause{Actor: actor, Reason: reason, Since: since, Now: now})
	d.metrics.SetPaused(name, true)
	if now {
		s = waitSnapshot(ctx, r, func(s runner.Snapshot) bool {
			k := s.State.Kind
			return s.Frozen || k != agent.Spawning && k != agent.Running
		})
	} else {
		s = r.Snapshot()
	}
	return control.PauseResult{Agent: name, State: s.State.Kind.String(), Already: already, SessionID: runningSession(s),
		Frozen: s.Frozen, Processes: s.FrozenProcs}, nil
}

// resumeAgent deletes the pause (with its event), then lets the runner go
// on: a frozen session is thawed, a held one starts its next session.
func (d *Daemon) resumeAgent(ctx context.Context, name, actor string) (control.ResumeResult, error) {
	return d.resumeAgentFor(ctx, name, actor, "")
}

// resumeAgentFor is resumeAgent with the reason for the event log ("":
// how long the agent was paused, and by whom).
func (d *Daemon) resumeAgentFor(ctx context.Context, name, actor, why string) (control.ResumeResult, error) {
	r, err := d.reg.Runner(name)
	if err != nil {
		return control.ResumeResult{}, fmt.Errorf("%w: %v", control.ErrUnknownAgent, err)
	}
	s := r.Snapshot()
	at := time.Now()
	if why == "" {
		why = "paused"
		if s.Paused {
			why = fmt.Sprintf("paused %s by %s", at.Sub(s.PausedSince).Round(time.Second), s.PausedBy)
		}
	}
	_, stored, err := d.journal.ClearPause(ctx, name, stateEvent(s, at, store.EventResumed, actor, why))
	if err != nil {
		return control.ResumeResult{}, fmt.Errorf("resume %s: %w", name, err)
	}
	held := r.Resume()
	d.metrics.SetPaused(name, false)
	if !stored && !held {
		return control.ResumeResult{}, fmt.Errorf("%w: agent %s is not paused", control.ErrConflict, name)
	}
	frozen := s.Frozen
	s = waitSnapshot(ctx, r, func(s runner.Snapshot) bool { return !s.Frozen })
	return control.ResumeResult{Agent: name, State: s.State.Kind.String(), Thawed: frozen && !s.Frozen}, nil
}

// restoredPause is the agent's stored pause, for a runner that starts (at
// daemon start, by swarmd start, by a reload), and sets the paused metric.
func (d *Daemon) restoredPause(name string) (*runner.Pause, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := d.db.Pauses(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the pause of %s: %w", name, err)
	}
	p, ok := ps[name]
	d.metrics.SetPaused(name, ok)
	if !ok {
		return nil, nil
	}
	return &runner.Pause{Actor: p.Actor, Reason: p.Reason, Since: p.Since}, nil
}

// stateEvent is an event-log line about an agent that is not a transition:
// from and to are the state it is in.
func stateEvent(s runner.Snapshot, at time.Time, event, actor, reason string) store.EventRecord {
	st := s.State.Kind.String()
	return store.EventRecord{At: at, Agent: s.Agent, From: st, Event: event, To: st, Actor: actor, Reason: reason,
		SessionID: runningSession(s), Seq: s.Seq}
}

// runningSession is the snapshot's session if one runs.
func runningSession(s runner.Snapshot) string {
	if s.SessionStarted.IsZero() {
		return ""
	}
	return s.SessionID
}

func JoinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + " (" + b + ")"
}

// waitSnapshot waits until cond holds for the runner's snapshot, ctx ends
// or freezeWait passes, and returns the last snapshot.
func waitSnapshot(ctx context.Context, r *runner.Runner, cond func(runner.Snapshot) bool) runner.Snapshot {
	t := time.NewTimer(freezeWait)
	defer t.Stop()
	for {
		s, ch := r.Watch()
		if cond(s) {
			return s
		}
		select {
		case <-ch:
		case <-t.C:
			return s
		case <-ctx.Done():
			return s
		}
	}
}

// journalAudit writes every tool call of every session to swarm.db through
// the batching journal (one enqueue on the session's output goroutine).
type journalAudit struct{ j *store.Journal }

func (a journalAudit) ToolCall(r runner.ToolRecord) {
	c := r.Call
	rec := store.ToolCallRecord{SessionID: r.SessionID, Agent: r.Agent, Seq: r.Seq, CallID: c.ID, Tool: c.Name,
		Input: c.Input, Started: c.Start, Status: store.ToolUnfinished}
	if !c.End.IsZero() {
		rec.Ended, rec.Duration, rec.Status = true, c.End.Sub(c.Start), store.ToolOK
		if c.Failed {
			rec.Status = store.ToolError
		}
	}
	a.j.ToolCall(rec)
}

// pausedHealth is the status HEALTH cell of a paused agent.
func pausedHealth(s runner.Snapshot) string {
	if s.Frozen {
		return "paused (frozen)"
	}
	return "paused"
}
