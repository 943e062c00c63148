package daemon

import (
	"context"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/gitmaint"
	"github.com/swarmd/swarmd/internal/service"
)

// saveSpend saves every agent's settled spend (store.SpendTally.Save) every
// maintenance.every, as the daemon started with: swarmd status, a process
// of its own, and the next start's dashboards then read only the sessions
// since, where they summed every session ever recorded.
func (d *Daemon) saveSpend() service.Service {
	cfg, _ := d.current()
	every := cfg.Maintenance.Every
	if every <= 0 {
		every = gitmaint.DefaultEvery
	}
	return service.Loop(func(ctx context.Context) { service.Every(ctx, every, false, d.saveSpendOnce) })
}

// saveSpendOnce brings the tally up to date and saves it.
func (d *Daemon) saveSpendOnce(ctx context.Context) {
	_, err := d.tally.Spend(ctx, d.db)
	if err == nil {
		err = d.tally.Save(ctx, d.db)
	}
	if err != nil && ctx.Err() == nil {
		d.log.Warn("save the agents' spend for swarmd status; the next check tries again", zap.Error(err))
	}
}
