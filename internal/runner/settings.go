package runner

import (
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

// Update queues new settings for the next session.
func (r *Runner) Update(s Settings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = &s
}

// applyPending takes queued settings; only the Run goroutine calls it.
func (r *Runner) applyPending() {
	r.mu.Lock()
	p := r.pending
	r.pending = nil
	r.mu.Unlock()
	if p == nil {
		return
	}
	r.cfg.Role, r.cfg.Env, r.cfg.Timeout, r.cfg.MinSessionInterval = p.Role, p.Env, p.Timeout, p.MinSessionInterval
	r.cfg.MaxSessions, r.cfg.MaxTurns, r.cfg.DefaultEnv = p.MaxSessions, p.MaxTurns, p.DefaultEnv
	r.cfg.MaxSilent, r.cfg.MemoryMax = p.MaxSilent, p.MemoryMax
	r.cfg.BackendName, r.cfg.Tools, r.cfg.Gate = p.BackendName, p.Tools, p.Gate
	if p.Backend != nil {
		r.cfg.Backend = p.Backend
	}
	if p.Prompter != nil {
		r.cfg.Prompter = p.Prompter
	}
	if p.Settler != nil {
		r.cfg.Settler = p.Settler
	}
	if p.GracePeriod > 0 {
		r.cfg.GracePeriod = p.GracePeriod
	}
	r.log.Info("new settings from the reloaded config apply from this session")
}
