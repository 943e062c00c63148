package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/store"
	"go.uber.org/zap"
)

// A swarm has one merge target. On a shared store each daemon records its
// config's merge.into as its own and as the swarm's, once it holds its
// agents' leases (store.DB.ClaimDaemonSetting), and a daemon whose config
// says otherwise than one that runs is refused at start: with two targets,
// or one daemon without a merge queue, its agents' tasks would be merged
// elsewhere or closed with no gate, while the store's one merge.into
// setting, which commands outside a daemon follow, would say whichever
// started last. Which daemon runs, its leases say; one that stopped or
// died no longer counts, so the target can be changed by stopping every
// daemon and starting them with the new config. The check and the record
// are one write transaction taken after the leases: of two daemons
// starting at the same moment with different targets, the second to
// claim sees the first's leases and target and is refused.

// claimSwarmTarget records cfg's merge target as this daemon's own and as
// the swarm's, or refuses it (a *SetupError) when a daemon of the swarm
// that holds live leases recorded another: a refused daemon records
// nothing.
//
// On a store of its own (no leases) the daemon records it all the same:
// `swarmd daemons` shows it, and commands outside a daemon follow it.
func (d *Daemon) claimSwarmTarget(ctx context.Context, cfg *config.Config) error {
	mine := mergeInto(cfg)
	err := d.db.ClaimDaemonSetting(ctx, d.leaseHolder().Daemon, SettingMergeInto, mine, time.Now())
	var conflict *store.SettingConflictError
	if errors.As(err, &conflict) {
		return setupErrorf("merge.into: this config %s, but daemon %s, which runs on this store, %s: a swarm has one merge target; give every daemon's config the same merge section (to change it, stop every daemon first)",
			describeTarget(mine), conflict.Daemon, describeTarget(conflict.Theirs))
	}
	if err != nil {
		return fmt.Errorf("record this daemon's merge target: %w", err)
	}
	return nil
}

// claimAtStart is claimSwarmTarget at the daemon's start, after it took
// its agents' leases: a refused daemon gives them up at once, so that a
// start with the config put right need not wait for them to expire.
func (d *Daemon) claimAtStart(ctx context.Context, cfg *config.Config) error {
	err := d.claimSwarmTarget(ctx, cfg)
	var setup *SetupError
	if errors.As(err, &setup) {
		if rerr := d.db.ReleaseLeases(ctx, d.leaseHolder().Daemon, nil); rerr != nil {
			d.log.Warn("give up the agents' leases of a refused start (they expire on their own)", zap.Error(rerr))
		}
	}
	return err
}

func describeTarget(into string) string {
	if into == "" {
		return "has no merge queue"
	}
	return fmt.Sprintf("merges into %q", into)
}
