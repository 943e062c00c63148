package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/runner"
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
	if err := d.trees.KeepLine(ctx, s.Task, s.HeadAfter); err != nil {
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

func (lineKeeper) OnTransition(runner.Transition) {}
func (lineKeeper) OnIdle(string, bool, time.Time) {}
