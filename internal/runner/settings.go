package runner

import (
	"sync"
	"time"

	"github.com/swarmd/swarmd/internal/backend"
)

// What a config reload changes in a running agent.

// Settings are what a config reload may change in a running agent. They
// apply from the next session: a running session keeps what it started with.
type Settings struct {
	Role        string
	Backend     Backend
	Prompter    Prompter
	Settler     Settler
	Env         []string
	DefaultEnv  []string
	Timeout     time.Duration
	GracePeriod time.Duration
	// MaxSessions replaces Config.MaxSessions (0 is no limit).
	MaxSessions int
	// MinSessionInterval replaces Config.MinSessionInterval (0 is no minimum).
	MinSessionInterval time.Duration
	// MaxTurns replaces Config.MaxTurns (0 is no limit).
	MaxTurns int
	// MemoryMax replaces Config.MemoryMax (0 is no limit).
	MemoryMax int64
	// MaxSilent replaces Config.MaxSilent (0 is never).
	MaxSilent int
	// BackendName, Tools and Gate replace Config's (a nil Gate: none).
	BackendName string
	Tools       backend.ToolPolicy
	Gate        Gate
}

// updates holds settings queued by a reload, from any goroutine, until
// the Run goroutine takes them at the next BuildingPrompt.
type updates struct {
	mu      sync.Mutex
	pending *Settings
}

func (u *updates) put(s Settings) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pending = &s
}

// take returns the queued settings, nil when none, and forgets them.
func (u *updates) take() *Settings {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.pending
	u.pending = nil
	return p
}

// apply lays reloaded settings over the config: what a reload may
// change, except that a nil Backend, Prompter or Settler and a zero grace
// period keep the old one.
func (c *Config) apply(p *Settings) {
	c.Role, c.Env, c.Timeout, c.MinSessionInterval = p.Role, p.Env, p.Timeout, p.MinSessionInterval
	c.MaxSessions, c.MaxTurns, c.DefaultEnv = p.MaxSessions, p.MaxTurns, p.DefaultEnv
	c.MaxSilent, c.MemoryMax = p.MaxSilent, p.MemoryMax
	c.BackendName, c.Tools, c.Gate = p.BackendName, p.Tools, p.Gate
	if p.Backend != nil {
		c.Backend = p.Backend
	}
	if p.Prompter != nil {
		c.Prompter = p.Prompter
	}
	if p.Settler != nil {
		c.Settler = p.Settler
	}
	if p.GracePeriod > 0 {
		c.GracePeriod = p.GracePeriod
	}
}

// Update queues new settings for the next session.
func (r *Runner) Update(s Settings) { r.updates.put(s) }

// applyPending takes queued settings; only the Run goroutine calls it.
func (r *Runner) applyPending() {
	if p := r.updates.take(); p != nil {
		r.cfg.apply(p)
		r.log.Info("new settings from the reloaded config apply from this session")
	}
}
