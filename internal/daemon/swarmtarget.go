package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/swarmd/swarmd/internal/config"
)

// A swarm has one merge target. On a shared store each daemon records its
// config's merge.into as its own (store.DB.SetDaemonSetting), and a daemon
// whose config says otherwise than one that runs is refused at start: with
// two targets, or one daemon without a merge queue, its agents' tasks would
// be merged elsewhere or closed with no gate, while the store's one
// merge.into setting, which commands outside a daemon follow, says
// whichever started last. Which daemon runs, its leases say; one that
// stopped or died no longer counts, so the target can be changed by
// stopping every daemon and starting them with the new config.

// checkSwarmTarget refuses (a *SetupError) cfg's merge target when a
// daemon of the swarm that holds live leases recorded another.
func (d *Daemon) checkSwarmTarget(ctx context.Context, cfg *config.Config) error {
	if !cfg.SharedStore() {
		return nil
	}
	recorded, err := d.db.DaemonSettings(ctx, SettingMergeInto)
	if err != nil {
		return err
	}
	daemons, err := d.db.Daemons(ctx, time.Now())
	if err != nil {
		return err
	}
	self, mine := d.leaseHolder().Daemon, mergeInto(cfg)
	for _, o := range daemons {
		theirs, ok := recorded[o.Name]
		if o.Name == self || o.Live == 0 || !ok || theirs == mine {
			continue
		}
		return setupErrorf("merge.into: this config %s, but daemon %s, which runs on this store, %s: a swarm has one merge target; give every daemon's config the same merge section (to change it, stop every daemon first)",
			describeTarget(mine), o.Name, describeTarget(theirs))
	}
	return nil
}

// recordSwarmTarget records cfg's merge target as this daemon's own and
// as the swarm's (the setting commands outside a daemon follow), once its
// agents' leases are its own: a refused daemon records nothing.
func (d *Daemon) recordSwarmTarget(ctx context.Context, cfg *config.Config) error {
	if !cfg.SharedStore() {
		return nil
	}
	into := mergeInto(cfg)
	if err := d.db.SetDaemonSetting(ctx, d.leaseHolder().Daemon, SettingMergeInto, into); err != nil {
		return fmt.Errorf("record this daemon's merge target: %w", err)
	}
	return d.db.SetSetting(ctx, SettingMergeInto, into)
}

func describeTarget(into string) string {
	if into == "" {
		return "has no merge queue"
	}
	return fmt.Sprintf("merges into %q", into)
}
