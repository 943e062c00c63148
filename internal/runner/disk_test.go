package runner

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/logs"
)

// fullDisk is a log store whose files are /dev/full while full is set:
// every write fails with ENOSPC, as on a full filesystem.
type fullDisk struct {
	*logs.Store
	prompts, logs atomic.Bool
}

func (d *fullDisk) PromptPath(agent string, seq uint32) string {
	if d.prompts.Load() {
		return "/dev/full"
	}
	return d.Store.PromptPath(agent, seq)
}

func (d *fullDisk) LogPath(agent string, seq uint32) string {
	if d.logs.Load() {
		return "/dev/full"
	}
	return d.Store.LogPath(agent, seq)
}

// A prompt that cannot be written for lack of space is waited out, not
// this agent's error: a full disk of a few seconds counted one error a
// try, and five stopped the agent for good. It waits in Spawning, its
// mail kept for the session, and runs once there is room.
func TestPromptOnFullDiskWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		disk := &fullDisk{Store: logs.New(t.TempDir(), 0, 0, nil)}
		disk.prompts.Store(true)
		h := newHarness(t, func(c *Config) { c.Logs = disk })
		h.start()
		s := h.waitState(agent.Spawning)
		time.Sleep(10 * diskRetry) // ten tries on a disk still full
		synctest.Wait()
		s = h.r.Snapshot()
		if s.State.Kind != agent.Spawning || !strings.Contains(s.DiskFull, "no space left on device") || s.ConsecutiveErrors != 0 || s.TotalErrors != 0 {
			t.Fatalf("after ten tries on a full disk: %+v", s)
		}
		if h.be.starts() != 0 || len(h.pr.released) != 0 {
			t.Errorf("%d sessions started, %d prompts' mail returned", h.be.starts(), len(h.pr.released))
		}
		disk.prompts.Store(false)
		s = h.waitState(agent.Running)
		if s.DiskFull != "" {
			t.Errorf("still disk full after a prompt was written: %q", s.DiskFull)
		}
		h.stop()
	})
}

// A session log on a full disk makes that session an error that says so;
// the agent backs off instead of losing output silently, and readiness can
// see it.
func TestRealSessionLogOnFullDisk(t *testing.T) {
	sup := newSupervisor(t)
	disk := &fullDisk{Store: logs.New(t.TempDir(), 0, 0, nil)}
	disk.logs.Store(true)
	h := realHarness(t, scripted(t, sup, backend.ScriptStep{Print: []string{"hello"}}), func(c *Config) { c.Logs = disk })
	h.start()
	s := h.waitReal("CoolingDown", func(s Snapshot) bool { return s.State.Kind == agent.CoolingDown })
	if !strings.Contains(s.Reason, "disk full") || s.DiskFull == "" {
		t.Fatalf("snapshot %+v", s)
	}
	h.stop()
}

// logs.max_session_bytes reaches the backend: a chatty session's log is cut
// and says how much it dropped, and the session still succeeds.
func TestRealSessionLogCapped(t *testing.T) {
	sup := newSupervisor(t)
	lines := make([]string, 100)
	for i := range lines {
		lines[i] = strings.Repeat("chatter ", 12)
	}
	h := realHarness(t, scripted(t, sup, backend.ScriptStep{Print: lines}), func(c *Config) { c.MaxLogBytes = 1000 })
	h.start()
	h.waitReal("session 1 complete", func(s Snapshot) bool { return s.Seq >= 2 })
	b, err := os.ReadFile(h.r.cfg.Logs.LogPath("alice", 1))
	if err != nil {
		t.Fatal(err)
	}
	h.stop()
	if strings.Count(string(b), "[swarmd: dropped ") != 1 || len(b) > 1000+400 {
		t.Errorf("log of %d bytes:\n%s", len(b), b)
	}
	if rec := h.sessions()[0]; rec.Outcome.Kind != agent.Success || rec.Result.LogDropped == 0 {
		t.Errorf("capped session: %v, %d bytes dropped", rec.Outcome, rec.Result.LogDropped)
	}
}

// A prompt's build that fails for a full disk (the task's line could not
// be checked out in the worktree) is tried again, counting no error: it
// was a FatalError, and the agent stopped for good at once.
func TestPromptBuildOnFullDiskWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.pr.mu.Lock()
		h.pr.buildErr = fmt.Errorf("start the line of task 3: %w", syscall.ENOSPC)
		h.pr.mu.Unlock()
		h.start()
		time.Sleep(10 * diskRetry)
		synctest.Wait()
		s := h.r.Snapshot()
		if s.State.Kind != agent.BuildingPrompt || !strings.Contains(s.DiskFull, "no space left on device") || s.TotalErrors != 0 {
			t.Fatalf("after ten builds on a full disk: %+v", s)
		}
		h.pr.mu.Lock()
		h.pr.buildErr = nil
		h.pr.mu.Unlock()
		if s = h.waitState(agent.Running); s.DiskFull != "" {
			t.Errorf("still disk full once a prompt was built: %q", s.DiskFull)
		}
		h.stop()
	})
}

// A store away for a while is logged once as it goes and once as it
// comes back, not at each try: minutes of it logged a line a second
// for each agent.
func TestAStoreWaitIsLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logged := observer.New(zap.DebugLevel)
		h := newHarness(t, func(c *Config) { c.Logger = zap.New(core) })
		h.pr.mu.Lock()
		h.pr.buildErr = errStoreBusy
		h.pr.mu.Unlock()
		h.start()
		time.Sleep(30 * time.Second) // tries at 0.1 s doubling to every few seconds
		synctest.Wait()
		h.pr.mu.Lock()
		h.pr.buildErr = nil
		h.pr.mu.Unlock()
		h.waitState(agent.Running)
		h.stop()
		tries := logged.FilterMessage("build prompt: the store refused; building again")
		if warned := tries.FilterLevelExact(zap.WarnLevel).Len(); warned != 1 || tries.Len() < 5 {
			t.Errorf("%d tries logged, %d of them as warnings; want one warning and the rest at debug", tries.Len(), warned)
		}
		if back := logged.FilterMessage("build prompt: the store answers again").Len(); back != 1 {
			t.Errorf("the store's return logged %d times, want once", back)
		}
	})
}
