package runner

import (
	"context"
	"time"

	"github.com/swarmd/swarmd/internal/hooks"
)

// The configured shell hooks, run in the worktree with the session's
// environment (env.go).

// hookCtx bounds a hook. A stop ends a running hook's tree at once, as it
// ends a session; the hooks that are part of the stop itself (session_end of
// the session it ended, agent_stopped) run to their end, and only a force
// stop cuts them short.
func (r *Runner) hookCtx(ev hooks.Event) context.Context {
	if (ev == hooks.SessionEnd || ev == hooks.AgentStopped) && r.stop.requested() {
		return r.stop.forceCtx
	}
	return r.stop.ctx
}

// hook runs the hooks of p.Event in the worktree with the session's
// environment. Only a blocking session_start hook returns an error.
func (r *Runner) hook(p hooks.Payload) error {
	if r.cfg.Hooks == nil || r.tree.wt.Path == "" {
		return nil
	}
	if h, ok := r.cfg.Hooks.(interface{ Has(hooks.Event) bool }); ok && !h.Has(p.Event) {
		return nil // no command for the event: no environment to build (most sessions)
	}
	p.Agent, p.SessionID, p.Time = r.cfg.Name, r.seq.id, time.Now()
	if p.Event != hooks.AgentStart && p.Event != hooks.AgentStopped {
		p.Seq = r.seq.n
	}
	return r.cfg.Hooks.Run(r.hookCtx(p.Event), r.tree.wt.Path, r.env(), p)
}
