package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/config"
)

// Agents that write the daemon's HOME, or one another's, are named; agents
// with HOMEs of their own are not.
func TestHomeSharing(t *testing.T) {
	own := t.TempDir() // the daemon's HOME
	t.Setenv("HOME", own)
	t.Setenv("CODEX_HOME", "")
	t.Setenv("CLAUDE_CONFIG_DIR", "")
	alice, bob := t.TempDir(), t.TempDir()
	sub := filepath.Join(alice, "nested")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "home")
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	agent := func(name, home string) config.Agent {
		a := config.Agent{Name: name}
		if home != "" {
			a.Env = map[string]string{"HOME": home}
		}
		return a
	}
	for _, tc := range []struct {
		name   string
		agents []config.Agent
		want   []string // in the message; none: ""
	}{
		{"each its own", []config.Agent{agent("alice", alice), agent("bob", bob)}, nil},
		{"the daemon's by default", []config.Agent{agent("alice", ""), agent("rita", "")},
			[]string{"alice and rita write " + own + " (the daemon's HOME)"}},
		{"one agent alone in the daemon's", []config.Agent{agent("alice", alice), agent("bob", "")},
			[]string{"bob writes " + own + " (the daemon's HOME)"}},
		{"one inside another's", []config.Agent{agent("alice", alice), agent("bob", sub)},
			[]string{"alice and bob write " + alice}},
		{"a link to the daemon's", []config.Agent{agent("alice", alice), agent("bob", link)},
			[]string{"bob writes " + own + " (the daemon's HOME)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := homeSharing(&config.Config{Agents: tc.agents}, own)
			if len(tc.want) == 0 {
				if got != "" {
					t.Errorf("homeSharing = %q, want nothing shared", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("homeSharing = %q, want it to say %q", got, w)
				}
			}
		})
	}
}
