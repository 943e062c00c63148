package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/gitmaint"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/service"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// lineKeeper keeps every task's line branch (swarm/task/N) where the agent's
// branch stood when a session on the task ended, and has it pushed to the
// swarm's remote: the agent's branch moves on to its next task's line, and
// the merge queue (perhaps another machine's) merges the line's frozen
// head. Only with a merge queue: without one, tasks have no lines.
type lineKeeper struct{ d *Daemon }

func (o lineKeeper) OnSessionEnd(s runner.SessionRecord) {
	cfg, _ := o.d.current()
	if cfg.Merge == nil || s.Task == 0 || s.HeadAfter == "" {
		return
	}
	d := o.d
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head := s.HeadAfter
	if t, err := d.tasks.Get(ctx, s.Task); err == nil && lineTakenFrom(t, s.SessionID) {
		// The session's attempt was fenced off while it ran (its daemon
		// lost the agent's lease, and the daemon that reaped it requeued
		// the task): the line is the next attempt's now, here and on the
		// remote, where this head would replace the one the queue merges.
		d.log.Info("the task's line is not kept: the session no longer holds the task",
			zap.Int64("task", s.Task), zap.String("session", s.SessionID), zap.String("holder", t.ClaimSession))
		return
	} else if err == nil && t.Head != "" && (t.State == task.Done || t.State == task.Closed) {
		// Reported done (`swarmd task done`) before the session ended:
		// the line stays at the frozen head, which the review was shown
		// and the queue merges, whatever the session did to its HEAD
		// afterwards (an amend, a reset). Kept at that HEAD, the line,
		// and the remote's copy the merging daemon fetches the head
		// from, no longer held the commit to merge.
		head = t.Head
	}
	if err := d.trees.KeepLine(ctx, s.Task, head); err != nil {
		d.log.Warn("keep the task's line", zap.Int64("task", s.Task), zap.String("session", s.SessionID), zap.Error(err))
		return
	}
	if cfg.Remote == "" {
		return
	}
	remote, task := cfg.Remote, s.Task
	d.pusher.request(d.trees.LineBranch(task), func(ctx context.Context) error {
		return d.trees.PushLine(ctx, task, remote)
	})
}

// lineTakenFrom reports whether task t, read after the session's end was
// settled, went from the session to another attempt: another session holds
// it, or it was released for a new line (requeued or orphaned: no holder,
// no work kept).
func lineTakenFrom(t taskboard.Task, session string) bool {
	if t.ClaimSession != "" {
		return t.ClaimSession != session
	}
	return (t.State == task.Open || t.State == task.Orphaned) && t.WorkHead == "" && t.Head == ""
}

func (lineKeeper) OnTransition(runner.Transition) {}
func (lineKeeper) OnIdle(string, bool, time.Time) {}

// lineSweeper removes the lines of merged tasks (CLOSED) every
// maintenance.every, with git gc's checks: their work is on the merge
// target, and kept they were a branch a task for good (a soak run made
// 5,681 in ten minutes), which every listing of the repository's refs
// reads. A line kept again since
// the sweep listed it stays (worktree.Manager.PruneLines), here and on the
// remote (PruneRemoteLines).
func (d *Daemon) lineSweeper() service.Service {
	cfg, _ := d.current()
	every := cfg.Maintenance.Every // as the daemon started with
	if every <= 0 {
		every = gitmaint.DefaultEvery
	}
	return service.Loop(func(ctx context.Context) {
		// The first sweep a whole period after the start, then on the
		// clock's multiples: a daemon that runs for less than a period
		// (a test's, a short run's) leaves its merged lines to the
		// operator's swarmd worktree prune --tasks.
		first := time.NewTimer(every)
		defer first.Stop()
		select {
		case <-ctx.Done():
			return
		case <-first.C:
		}
		service.Every(ctx, every, true, d.sweepLines)
	})
}

// sweepLines removes the lines of the CLOSED tasks once: this
// repository's, and the remote's, which every daemon of the swarm pushes
// to (each push reads the remote's whole list of branches first).
func (d *Daemon) sweepLines(ctx context.Context) {
	removed, err := d.trees.PruneLines(ctx, d.tasks.Closed)
	if err != nil && ctx.Err() == nil {
		d.log.Warn("remove the lines of merged tasks", zap.Int("removed", len(removed)), zap.Error(err))
	}
	if len(removed) > 0 {
		d.log.Debug("removed the lines of merged tasks", zap.Int("removed", len(removed)))
	}
	cfg, _ := d.current()
	if cfg.Remote == "" || cfg.Merge == nil {
		return
	}
	n, err := d.trees.PruneRemoteLines(ctx, cfg.Remote, d.tasks.Closed)
	if err != nil && ctx.Err() == nil {
		d.log.Warn("remove the lines of merged tasks from the remote", zap.String("remote", cfg.Remote), zap.Int("removed", n), zap.Error(err))
	}
	if n > 0 {
		d.log.Debug("removed the lines of merged tasks from the remote", zap.String("remote", cfg.Remote), zap.Int("removed", n))
	}
}
