package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/hooks"
)

// A stop while a hook runs ends the hook's whole process tree at once, as it
// ends a session's, instead of waiting for hooks.timeout; the agent_stopped
// hook, part of the stop itself, still runs.
func TestRealStopEndsRunningHook(t *testing.T) {
	for _, ev := range []hooks.Event{hooks.AgentStart, hooks.SessionStart, hooks.SessionEnd} {
		t.Run(string(ev), func(t *testing.T) {
			sup := newSupervisor(t)
			dir := t.TempDir()
			hk := hooks.New(sup, hooks.Config{Timeout: time.Hour, Commands: map[hooks.Event][]string{
				ev:                 {`setsid sleep 3600 & echo $! > ` + filepath.Join(dir, "hook.pid") + `; wait`},
				hooks.AgentStopped: {`echo yes > ` + filepath.Join(dir, "stopped")},
			}}, zaptest.NewLogger(t), nil)
			h := realHarness(t, scripted(t, sup, backend.ScriptStep{}), func(c *Config) { c.Hooks = hk })
			h.start()
			waitFile(t, filepath.Join(dir, "hook.pid"))
			h.r.Stop("operator")
			select {
			case <-h.r.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("the stop did not end the running %s hook within 5s", ev)
			}
			if err := <-h.err; err != nil {
				t.Fatal(err)
			}
			if s := h.r.Snapshot(); s.State.Kind != agent.Stopped {
				t.Errorf("state %v", s.State)
			}
			pid := strings.TrimSpace(waitFile(t, filepath.Join(dir, "hook.pid")))
			if _, err := os.Stat("/proc/" + pid); err == nil {
				if stat, _ := os.ReadFile("/proc/" + pid + "/stat"); !strings.Contains(string(stat), ") Z ") {
					t.Errorf("the hook's setsid grandchild %s survived the stop", pid)
				}
			}
			if got := waitFile(t, filepath.Join(dir, "stopped")); got != "yes\n" {
				t.Errorf("agent_stopped hook: %q", got)
			}
		})
	}
}
