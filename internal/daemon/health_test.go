package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/registry"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/view"
)

func TestHealth(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	stall := 5 * time.Minute
	cases := []struct {
		state      agent.StateKind
		started    time.Time // the session's start
		lastOutput time.Time
		since      time.Time
		want       string
	}{
		{agent.Running, now.Add(-time.Hour), now.Add(-4 * time.Minute), now.Add(-time.Hour), ""},
		{agent.Running, now.Add(-time.Hour), now.Add(-5 * time.Minute), now.Add(-time.Hour), "stalled"},
		// Silent since its start: as stale as a heartbeat that stopped
		// (the dashboards say stalled too).
		{agent.Running, now.Add(-5 * time.Minute), time.Time{}, now.Add(-5 * time.Minute), "stalled"},
		{agent.Running, now.Add(-4 * time.Minute), time.Time{}, now.Add(-4 * time.Minute), ""},
		{agent.Interrupting, now.Add(-time.Hour), now.Add(-time.Hour), now.Add(-time.Hour), "stalled"},
		{agent.Spawning, time.Time{}, time.Time{}, now.Add(-59 * time.Second), ""},
		{agent.Spawning, time.Time{}, time.Time{}, now.Add(-60 * time.Second), "spawning-timeout"},
		{agent.CoolingDown, time.Time{}, time.Time{}, now.Add(-time.Hour), ""},
		{agent.Stopped, time.Time{}, time.Time{}, now.Add(-time.Hour), ""},
	}
	for _, c := range cases {
		cond := view.Condition{State: c.state, Since: c.since, SessionStarted: c.started, LastOutput: c.lastOutput}
		got := health(cond, now, stall)
		if got != c.want {
			t.Errorf("health(%v, started %v ago, output %v ago, since %v ago) = %q, want %q",
				c.state, now.Sub(c.started), now.Sub(c.lastOutput), now.Sub(c.since), got, c.want)
		}
		// status and the dashboards agree
		if v := view.Classify(cond, now, view.Thresholds{StallAfter: stall}); (v == view.Stalled) != (got == "stalled") {
			t.Errorf("health(%v) = %q but the dashboards classify it %s", c.state, got, v)
		}
	}
}

// fullPrompts is a log store whose prompts land on /dev/full (ENOSPC).
type fullPrompts struct{ *logs.Store }

func (fullPrompts) PromptPath(string, uint32) string { return "/dev/full" }

// An agent whose prompts hit a full disk makes /readyz say so; the agent
// itself only backs off.
func TestReadinessReportsDiskFull(t *testing.T) {
	dir := t.TempDir()
	reg := registry.New(func(string, error) {})
	r, err := runner.New(runner.Config{Name: "alice", Backend: instantBackend{make(chan struct{})}, Workspace: plainDir{dir},
		Prompter: tinyPrompter{}, Settler: tinyPrompter{}, Logs: fullPrompts{logs.New(dir, 0, 0, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{reg: reg}
	if why := d.agentDiskFull(); why != "" {
		t.Fatalf("diskFull before any agent = %q", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := reg.Register(ctx, r); err != nil {
		t.Fatal(err)
	}
	for s, ch := r.Watch(); s.DiskFull == ""; s, ch = r.Watch() {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("never disk full: %+v", s)
		}
	}
	if why := d.agentDiskFull(); !strings.Contains(why, "disk full: agent alice") || !strings.Contains(why, "no space left") {
		t.Errorf("diskFull = %q", why)
	}
	if s := r.Snapshot(); s.State.Kind.String() != "Spawning" || s.ConsecutiveErrors != 0 {
		t.Errorf("state %v with %d errors, want Spawning (waiting on the disk) with none", s.State, s.ConsecutiveErrors)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := reg.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
}
