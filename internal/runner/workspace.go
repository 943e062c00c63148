package runner

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/worktree"
)

// tree is the agent's worktree as the Run goroutine knows it, and the
// HEADs a session's commits are counted between (accounting.go).
type tree struct {
	wt         worktree.Worktree
	checked    bool   // the worktree was prepared or verified since the last session
	promptHead string // HEAD the last prompt was built on ("" unknown)
	headBefore string // HEAD when the session started
}

// ready keeps a worktree just prepared or verified.
func (t *tree) ready(wt worktree.Worktree) { t.wt, t.checked = wt, true }

// needsCheck reports whether the worktree must be verified before the next
// prompt: nothing checked it since the last session ended. A check counts
// for one prompt.
func (t *tree) needsCheck() bool {
	if t.checked {
		t.checked = false
		return false
	}
	return true
}

// startHead is the HEAD of the session about to start: the one its prompt
// was built on, else read. A prompt's HEAD serves one spawn.
func (t *tree) startHead(read func() string) string {
	t.headBefore = t.promptHead
	if t.headBefore == "" {
		t.headBefore = read()
	}
	t.promptHead = ""
	return t.headBefore
}

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
		r.limits.giveBack(backend.Result{}, false)
	}
	if !r.tree.needsCheck() {
		return true
	}
	wt, err := r.verify(r.stop.ctx, r.cfg.Name)
	if r.stop.requested() {
		return false
	}
	if err != nil {
		r.apply(agent.EvFatalError(fmt.Sprintf("worktree: %v", err)), "runner", "")
		return false
	}
	r.tree.wt = wt
	return true
}

// clearLocks removes git lock files that a git killed mid-commit left in
// the agent's worktree (a force stop, or the sweep of an earlier daemon's
// processes): they would fail every later session. Only called while no
// process of the agent is alive, so no lock can be a live git's.
func (r *Runner) clearLocks() {
	removed, err := r.cfg.Workspace.ClearStaleLocks(r.stop.ctx, r.cfg.Name)
	if err != nil && !r.stop.requested() {
		r.log.Warn("clear stale git locks", zap.Error(err))
	}
	r.logRemoved(removed)
}

// verifyCleaner is a Workspace that clears the stale locks and verifies
// in one look at the worktree (*worktree.Manager does).
type verifyCleaner interface {
	VerifyClean(ctx context.Context, agent string) (worktree.Worktree, []string, error)
}

// verify is clearLocks then Workspace.Verify: in one call when the
// Workspace can, as after every session.
func (r *Runner) verify(ctx context.Context, agent string) (worktree.Worktree, error) {
	vc, ok := r.cfg.Workspace.(verifyCleaner)
	if !ok {
		r.clearLocks()
		return r.cfg.Workspace.Verify(ctx, agent)
	}
	wt, removed, err := vc.VerifyClean(ctx, agent)
	r.logRemoved(removed)
	return wt, err
}

// ensure is clearLocks then Workspace.Ensure, at the agent's start.
func (r *Runner) ensure(ctx context.Context, agent string) (worktree.Worktree, error) {
	r.clearLocks()
	return r.cfg.Workspace.Ensure(ctx, agent)
}

func (r *Runner) logRemoved(removed []string) {
	if len(removed) > 0 {
		r.log.Warn("removed git lock files left by a killed git; no process of the agent is alive",
			zap.Strings("files", removed))
	}
}
