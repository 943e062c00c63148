package runner

import (
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/environ"
	"github.com/swarmd/swarmd/internal/hooks"
)

// Sessions and hooks get one environment: each key once, a configured PATH
// kept, swarmd's directory first in it, the agent's git identity under
// everything configured (the backend's env, in a session, and the agent's).
func TestRealSessionAndHookEnvironment(t *testing.T) {
	sup := newSupervisor(t)
	out := t.TempDir()
	be, err := backend.NewCommand(sup, backend.CommandConfig{Command: "/bin/sh",
		Args: []string{"-c", `env > "$OUT/session.tmp" && mv "$OUT/session.tmp" "$OUT/session.env"; sleep 3600`},
		Env:  []string{"GIT_COMMITTER_EMAIL=backend@example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	hk := hooks.New(sup, hooks.Config{Commands: map[hooks.Event][]string{
		hooks.SessionStart: {`env > "$OUT/hook.tmp" && mv "$OUT/hook.tmp" "$OUT/hook.env"`},
	}}, zaptest.NewLogger(t), nil)
	h := realHarness(t, be, func(c *Config) {
		c.Hooks = hk
		c.PathPrepend = "/opt/swarmd/bin"
		c.Env = []string{"OUT=" + out, "PATH=/custom/bin:/usr/bin:/bin", "HOME=/agent/home", "GIT_AUTHOR_EMAIL=me@example.com"}
		c.DefaultEnv = environ.GitIdentity("alice", "swarmd.invalid")
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
		committer := "GIT_COMMITTER_EMAIL=alice@swarmd.invalid" // hooks have no backend env
		if f == "session.env" {
			committer = "GIT_COMMITTER_EMAIL=backend@example.com"
		}
		for _, want := range []string{"PATH=/opt/swarmd/bin:/custom/bin:/usr/bin:/bin", "HOME=/agent/home", "SWARM_AGENT_ID=alice",
			"GIT_AUTHOR_NAME=alice (swarmd)", "GIT_COMMITTER_NAME=alice (swarmd)", "GIT_AUTHOR_EMAIL=me@example.com", committer} {
			if !strings.Contains("\n"+env, "\n"+want+"\n") {
				t.Errorf("%s lacks %s:\n%s", f, want, env)
			}
		}
	}
	h.stop()
	assertNoLeftovers(t, h)
}
