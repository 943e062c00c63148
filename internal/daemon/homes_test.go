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
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("GEMINI_CLI_HOME", "")
	alice, bob := t.TempDir(), t.TempDir()
	sub := filepath.Join(alice, "nested")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "home")
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	underOwn := []string{filepath.Join(own, "agents", "alice"), filepath.Join(own, "agents", "rita")}
	for _, d := range underOwn {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	away := filepath.Join(alice, "away") // in alice's HOME, a link to a directory of bob's
	if err := os.Symlink(bob, away); err != nil {
		t.Fatal(err)
	}
	agent := func(name, home string) config.Agent {
		a := config.Agent{Name: name}
		if home != "" {
			a.Env = map[string]string{"HOME": home}
		}
		return a
	}
	xdg := agent("bob", bob)
	xdg.Env["XDG_CONFIG_HOME"] = filepath.Join(alice, ".config")
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
		{"each its own under the daemon's", []config.Agent{agent("alice", underOwn[0]), agent("rita", underOwn[1])}, nil},
		{"one not made yet inside another's", []config.Agent{agent("alice", alice), agent("bob", filepath.Join(alice, "later"))},
			[]string{"alice and bob write " + alice}},
		{"a link inside another's, leading elsewhere", []config.Agent{agent("alice", alice), agent("bob", away)},
			[]string{"alice and bob write " + alice}},
		{"settings read from another's", []config.Agent{agent("alice", alice), xdg},
			[]string{"alice and bob write " + alice}},
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

// Every agent writes sandbox.writable's paths: a HOME inside one is shared.
func TestHomeSharingInASharedPath(t *testing.T) {
	own, shared, bob := t.TempDir(), t.TempDir(), t.TempDir()
	t.Setenv("HOME", own)
	a := config.Agent{Name: "alice"}
	a.Env = map[string]string{"HOME": filepath.Join(shared, "alice")}
	b := config.Agent{Name: "bob"}
	b.Env = map[string]string{"HOME": bob}
	cfg := &config.Config{Agents: []config.Agent{a, b}, Sandbox: config.Sandbox{Writable: []string{shared}}}
	got := homeSharing(cfg, own)
	if want := "alice writes " + shared + " (sandbox.writable: every agent writes it)"; !strings.Contains(got, want) {
		t.Errorf("homeSharing = %q, want it to say %q", got, want)
	}
}
