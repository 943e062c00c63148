package runner

import (
	"errors"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/backend"
)

// New fills the zero fields that have defaults, and only those.
func TestNewFillsDefaults(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.GracePeriod = 0 })
	if c := h.r.cfg; c.GracePeriod != backend.DefaultGracePeriod || c.FirstSeq != 1 || c.Logger == nil {
		t.Errorf("defaults: grace %v, first seq %d, logger %v", c.GracePeriod, c.FirstSeq, c.Logger)
	}
	if s := h.r.Snapshot(); s.Seq != 1 {
		t.Errorf("first seq %d, want 1", s.Seq)
	}
	h = newHarness(t, func(c *Config) { c.GracePeriod = 3 * time.Second; c.FirstSeq = 7 })
	if c := h.r.cfg; c.GracePeriod != 3*time.Second || c.FirstSeq != 7 {
		t.Errorf("set values overridden: grace %v, first seq %d", c.GracePeriod, c.FirstSeq)
	}
	if backend.DefaultGracePeriod != 10*time.Second {
		t.Errorf("backend.DefaultGracePeriod = %v; docs/configuration.md promises 10s", backend.DefaultGracePeriod)
	}
}

// New refuses a config without a name or without what it drives.
func TestNewRejectsIncompleteConfig(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"no name":    func(c *Config) { c.Name = "" },
		"no backend": func(c *Config) { c.Backend = nil },
		"no logs":    func(c *Config) { c.Logs = nil },
	} {
		cfg := Config{Name: "alice", Backend: &fakeBackend{}, Workspace: &fakeWorkspace{dir: t.TempDir()}, Prompter: &fakePrompter{}, Settler: &fakePrompter{}, Logs: &fullDisk{}}
		mod(&cfg)
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
}
