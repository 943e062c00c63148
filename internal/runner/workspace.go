package runner

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// beforeSession runs in BuildingPrompt before each prompt: it waits while
// the agent is paused, waits out min_session_interval, waits for its
// provider (Config.Gate; a pause that came meanwhile gives the turn back),
// then makes sure the worktree is fit for a session
// when nothing has checked it since the last one ended (after an error or an
// interrupt): stale git locks go, and a worktree left on another branch is
// switched back. It reports false when the agent is stopping or stopped.
func (r *Runner) beforeSession() bool {
	for {
		if !r.holdWhilePaused() || !r.pace() || !r.admit() {
			return false
		}
		if _, paused := r.Paused(); !paused {
			break
		}
		r.settleTicket(backend.Result{}, false)
	}
	if r.wtChecked {
		r.wtChecked = false
		return true
	}
	r.clearLocks()
	wt, err := r.cfg.Workspace.Verify(r.stopCtx, r.cfg.Name)
	if r.stopCtx.Err() != nil {
		return false
	}
	if err != nil {
		r.apply(agent.EvFatalError(fmt.Sprintf("worktree: %v", err)), "runner", "")
		return false
	}
	r.wt = wt
	return true
}

// clearLocks removes git lock files that a git killed mid-commit left in
// the agent's worktree (a force stop, or the sweep of an earlier daemon's
// processes): they would fail every later session. Only called while no
// process of the agent is alive, so no lock can be a live git's.
func (r *Runner) clearLocks() {
	removed, err := r.cfg.Workspace.ClearStaleLocks(r.stopCtx, r.cfg.Name)
	if err != nil && r.stopCtx.Err() == nil {
		r.log.Warn("clear stale git locks", zap.Error(err))
	}
	if len(removed) > 0 {
		r.log.Warn("removed git lock files left by a killed git; no process of the agent is alive",
			zap.Strings("files", removed))
	}
}
