package daemon

import (
	"context"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/gitmaint"
	"github.com/swarmd/swarmd/internal/service"
)

// openMaintenance makes the daemon's git gc (package gitmaint), once the
// repository and the quarantines are open, unless maintenance.gc turns
// it off. Its runs are process trees of the daemon's, like a release's
// git. Before each, the quarantines' objects are moved into the
// repository, checked (quarantine.Move, as a task done does): a running
// sandbox's branch may name them, and git gc must read no object directory
// a sandbox writes.
func (d *Daemon) openMaintenance(cfg *config.Config) {
	m := cfg.Maintenance
	if !m.GC {
		d.log.Info("the daemon runs no git gc (maintenance.gc: false): the repository's maintenance is the operator's")
		return
	}
	d.host.maint = gitmaint.New(gitmaint.Options{
		GitDir: d.trees.CommonDir(), Git: d.host.tools.git, LooseObjects: m.LooseObjects, Packs: m.Packs, Every: m.Every, Timeout: m.Timeout,
		Prepare: d.moveAllObjects, Procs: d.host.sup, Log: d.log.Named("gitmaint"),
		Observe: func(r gitmaint.Run) { d.metrics.GitMaintenance(string(r.Result), r.Duration) },
	})
}

// maintenance is the git gc's service, or one that does nothing when it
// is off.
func (d *Daemon) maintenance() service.Service {
	if d.host.maint == nil {
		return service.Func(func(context.Context) (func(), error) { return nil, nil })
	}
	return d.host.maint
}

// moveAllObjects moves the checked objects of every agent's quarantine
// into the repository (quarantine.Move: nothing is removed, a running
// session's git goes on writing) until ctx ends; what it refuses is
// reported at its session's end.
func (d *Daemon) moveAllObjects(ctx context.Context) {
	for _, dir := range d.host.quarantine.Dirs() {
		if ctx.Err() != nil {
			return
		}
		agent := filepath.Base(dir)
		r, err := d.host.quarantine.Move(ctx, agent)
		if err != nil {
			d.log.Warn("move a quarantine's objects into the repository before git gc", zap.String("agent", agent), zap.Error(err))
		}
		if r.Moved > 0 {
			d.log.Debug("moved a quarantine's objects into the repository before git gc", zap.String("agent", agent), zap.Int("objects", r.Moved))
		}
	}
}
