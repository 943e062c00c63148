package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/registry"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/view"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
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

// A small state dir's filesystem is not full with most of it free (a
// fixed 64 MiB called an 8 MiB one full at 29% used), and one with no
// inode left is full whatever its free bytes.
func TestSpaceFault(t *testing.T) {
	const mib = 1 << 20
	fs := func(size, free, files, ffree uint64) unix.Statfs_t {
		return unix.Statfs_t{Bsize: 4096, Blocks: size / 4096, Bavail: free / 4096, Files: files, Ffree: ffree}
	}
	for _, c := range []struct {
		st   unix.Statfs_t
		want string
	}{
		{fs(8*mib, 6*mib, 100, 50), ""},
		{fs(8*mib, 200<<10, 100, 50), "disk full: 200 KiB free"},
		{fs(100<<30, 80*mib, 100, 50), ""},
		{fs(100<<30, 60*mib, 100, 50), "disk full: 61440 KiB free"},
		{fs(8*mib, 6*mib, 100, 0), "disk full: no free inode"},
	} {
		if got := spaceFault(c.st, "/s"); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.st, got, c.want)
		}
	}
}

// The event log's failed writes are logged once a fault, not once a retry,
// and its return once.
func TestJournalFaultsLoggedOnce(t *testing.T) {
	core, logged := observer.New(zap.DebugLevel)
	j := &journalFaults{log: zap.New(core)}
	for range 5 {
		j.failed(errors.New("database or disk is full"))
	}
	j.committed()
	j.committed()
	j.failed(errors.New("database or disk is full"))
	if got := logged.FilterLevelExact(zap.ErrorLevel).Len(); got != 2 {
		t.Errorf("%d errors logged for two faults, want 2", got)
	}
	if got := logged.FilterMessage("event log writes again").Len(); got != 1 {
		t.Errorf("the return logged %d times, want once", got)
	}
}
