package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/service"
)

// spendSaveEvery is how often the settled spend is saved: swarmd status
// reads at most this long of sessions past it. A save writes only when a
// sum moved on.
const spendSaveEvery = time.Minute

// saveSpend saves every agent's settled spend (store.SpendTally.Save) every
// spendSaveEvery: swarmd status, a process of its own, and the next
// start's dashboards then read only the sessions since, where they summed
// every session ever recorded.
func (d *Daemon) saveSpend() service.Service {
	return service.Loop(func(ctx context.Context) { service.Every(ctx, spendSaveEvery, false, d.saveSpendOnce) })
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
