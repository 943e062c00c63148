package runner

import (
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/hooks"
)

// Sessions and hooks get one environment: each key once, a configured PATH
// kept, swarmd's directory first in it.
func TestRealSessionAndHookEnvironment(t *testing.T) {
	sup := newSupervisor(t)
	out := t.TempDir()
	be, err := backend.NewCommand(sup, backend.CommandConfig{Command: "/bin/sh",
		Args: []string{"-c", `env > "$OUT/session.tmp" && mv "$OUT/session.tmp" "$OUT/session.env"; sleep 3600`}})
	if err != nil {
		t.Fatal(err)
	}
	hk := hooks.New(sup, hooks.Config{Commands: map[hooks.Event][]string{
		hooks.SessionStart: {`env > "$OUT/hook.tmp" && mv "$OUT/hook.tmp" "$OUT/hook.env"`},
	}}, zaptest.NewLogger(t), nil)
	h := realHarness(t, be, func(c *Config) {
		c.Hooks = hk
		c.PathPrepend = "/opt/swarmd/bin"
		c.Env = []string{"OUT=" + out, "PATH=/custom/bin:/usr/bin:/bin", "HOME=/agent/home"}
	})
	h.start()
	for _, f := range []string{"hook.env", "session.env"} {
		env := waitFile(t, filepath.Join(out, f))
		seen := map[string]int{}
		for _, kv := range strings.Split(strings.TrimSpace(env), "\n") {
			k, _, _ := strings.Cut(kv, "=")
			seen[k]++
		}
		for k, n := range seen {
			if n > 1 {
				t.Errorf("%s: %s appears %d times", f, k, n)
			}
		}
		for _, want := range []string{"PATH=/opt/swarmd/bin:/custom/bin:/usr/bin:/bin", "HOME=/agent/home", "SWARM_AGENT_ID=alice"} {
			if !strings.Contains("\n"+env, "\n"+want+"\n") {
				t.Errorf("%s lacks %s:\n%s", f, want, env)
			}
		}
	}
	h.stop()
	assertNoLeftovers(t, h)
}
