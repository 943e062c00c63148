package daemon

import (
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
)

// onProgress is every runner's Config.OnProgress: a running session's
// spend goes to the budgets, its trouble with its provider to the
// provider's health. It runs on the session's output goroutine.
func (d *Daemon) onProgress(rec runner.ProgressRecord) {
	d.budget.Progress(rec)
	d.gates.providers.Progress(rec)
}

// toolDenials writes a ToolDenied event for each session stopped for a
// tool call its policy refuses, naming the call and the rule.
type toolDenials struct{ j *store.Journal }

func (o toolDenials) OnSessionEnd(s runner.SessionRecord) {
	d := s.Result.Denied
	if d == nil || s.StoppedFor != runner.OutcomePermissionDenied {
		return
	}
	st := agent.Running.String()
	o.j.Event(store.EventRecord{At: s.Result.Ended, Agent: s.Agent, From: st, Event: store.EventToolDenied, To: st,
		Actor: "runner", Reason: "tool " + d.String() + ": session stopped (permission_denied)", SessionID: s.SessionID, Seq: s.Seq})
}

func (toolDenials) OnTransition(runner.Transition) {}
func (toolDenials) OnIdle(string, bool, time.Time) {}
