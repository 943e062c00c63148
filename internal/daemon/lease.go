package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/store"
)

// leaseHolder is this daemon as the holder of its agents' leases in a
// shared store: its host and state dir name it across restarts, so that a
// restarted daemon takes its own agents back at once.
func (d *Daemon) leaseHolder() store.Lease {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return store.Lease{Daemon: host + ":" + d.cfg.StateDir, Host: host, PID: os.Getpid()}
}

// acquireLeases takes the leases of agents (a shared store only): every one
// or none, refusing, as a setup error naming the holder, an agent another
// live daemon runs. The work of a daemon whose expired lease it replaced
// is recovered.
func (d *Daemon) acquireLeases(ctx context.Context, agents []string) error {
	cfg, _ := d.current()
	if !cfg.SharedStore() || len(agents) == 0 {
		return nil
	}
	expired, err := d.db.AcquireLeases(ctx, d.leaseHolder(), agents, time.Now(), cfg.LeaseTimeout)
	if errors.Is(err, store.ErrLeaseHeld) {
		return setupError(err)
	}
	if err != nil {
		return err
	}
	for _, l := range expired {
		d.recoverLease(ctx, l)
	}
	return nil
}

// recoverLease requeues the tasks of an agent whose daemon stopped renewing
// its lease: that daemon is dead (or cut off), and its sessions with it.
// Mail stays pending for the agent, wherever it runs next.
func (d *Daemon) recoverLease(ctx context.Context, l store.Lease) {
	why := fmt.Sprintf("daemon %s stopped renewing its lease on %s", l.Daemon, l.Agent)
	moved, err := d.tasks.Orphan(ctx, l.Agent, why)
	if err != nil {
		d.log.Error("requeue the tasks of a dead daemon's agent", zap.String("agent", l.Agent), zap.String("daemon", l.Daemon), zap.Error(err))
		return
	}
	d.log.Warn("a daemon's lease expired: its agent's tasks are requeued", zap.String("agent", l.Agent),
		zap.String("daemon", l.Daemon), zap.Int("tasks", len(moved)))
}

// keepLeases renews this daemon's leases every third of lease_timeout and
// reaps the expired leases of other daemons, recovering their work; stop
// ends it and gives the leases up.
func (d *Daemon) keepLeases() (stop func()) {
	cfg, _ := d.current()
	if !cfg.SharedStore() {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	holder := d.leaseHolder()
	go func() {
		defer close(done)
		t := time.NewTicker(cfg.LeaseTimeout / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			d.leaseRound(ctx, holder)
		}
	}()
	return func() {
		cancel()
		<-done
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		if err := d.db.ReleaseLeases(rctx, holder.Daemon, nil); err != nil {
			d.log.Warn("give up this daemon's agent leases (they expire on their own)", zap.Error(err))
		}
	}
}

// leaseRound is one heartbeat: renew ours, reap others' expired ones.
func (d *Daemon) leaseRound(ctx context.Context, holder store.Lease) {
	// A heartbeat goes ahead of the agents' claims and the event log: a
	// renewal that waited behind them could let the lease run out.
	ctx = store.WithPriority(ctx, store.Outcome)
	cfg, _ := d.current()
	now := time.Now()
	n, err := d.db.RenewLeases(ctx, holder.Daemon, now, cfg.LeaseTimeout)
	if err != nil {
		d.log.Error("renew agent leases", zap.Error(err))
		return
	}
	if want := len(d.reg.Names()); n < want {
		d.log.Error("agent leases lost: another daemon took agents this one runs (its lease had expired: was this daemon cut off from the store?)",
			zap.Int("held", n), zap.Int("running", want))
	}
	ls, err := d.db.Leases(ctx)
	if err != nil {
		d.log.Error("read agent leases", zap.Error(err))
		return
	}
	for _, l := range ls {
		if l.Daemon == holder.Daemon || l.Expires.After(now) {
			continue
		}
		if ok, err := d.db.ReapLease(ctx, l, now); err != nil {
			d.log.Error("reap an expired agent lease", zap.String("agent", l.Agent), zap.Error(err))
		} else if ok {
			d.recoverLease(ctx, l)
		}
	}
}
