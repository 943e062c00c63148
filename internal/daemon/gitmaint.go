package daemon

import (
	"context"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/gitmaint"
	"github.com/swarmd/swarmd/internal/service"
)

// openMaintenance makes the daemon's git gc (package gitmaint), once the
// repository and the quarantines are open, unless maintenance.gc turns
// it off. Its runs are process trees of the daemon's, like a release's
// git; the quarantines are its alternates.
func (d *Daemon) openMaintenance(cfg *config.Config) {
	m := cfg.Maintenance
	if !m.GC {
		d.log.Info("the daemon runs no git gc (maintenance.gc: false): the repository's maintenance is the operator's")
		return
	}
	d.host.maint = gitmaint.New(gitmaint.Options{
		GitDir: d.trees.CommonDir(), LooseObjects: m.LooseObjects, Packs: m.Packs, Every: m.Every, Timeout: m.Timeout,
		Alternates: d.host.quarantine.Dirs, Procs: d.host.sup, Log: d.log.Named("gitmaint"),
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
