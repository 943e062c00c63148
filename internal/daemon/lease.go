package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/fence"
	"github.com/swarmd/swarmd/internal/service"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// leaseHolder is this daemon as the holder of its agents' leases in a
// shared store: its host and state dir name it across restarts, so that a
// restarted daemon takes its own agents back at once.
func (d *Daemon) leaseHolder() store.Lease {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return store.Lease{Daemon: host + ":" + d.live.cfg.StateDir, Host: host, PID: os.Getpid(), Boot: d.host.boot}
}

// acquireLeases takes the leases of agents (a shared store only): every one
// or none, refusing, as a setup error naming the holder, an agent another
// live daemon runs. From then on this daemon's writes for those agents are
// fenced by the leases' epochs (store.FenceTx). The work of a daemon whose
// expired lease it replaced is recovered. Leases under this daemon's own
// name that a live namesake may hold (namesake.go) are waited for at start
// (wait), and refused at a reload, which must not block.
func (d *Daemon) acquireLeases(ctx context.Context, agents []string, wait bool) error {
	cfg, _ := d.current()
	if !cfg.SharedStore() || len(agents) == 0 {
		return nil
	}
	holder := d.leaseHolder()
	every := namesakeLook(cfg.LeaseTimeout)
	if !wait {
		every = 0
	}
	if err := d.awaitNamesakes(ctx, holder, agents, every); err != nil {
		if errors.Is(err, ErrNamesake) {
			return setupError(err)
		}
		return err
	}
	held, expired, err := d.db.AcquireLeases(ctx, holder, agents, time.Now(), cfg.LeaseTimeout)
	if errors.Is(err, store.ErrLeaseHeld) {
		return setupError(err)
	}
	if err != nil {
		return err
	}
	d.db.Fence(holder.Daemon)
	for _, l := range held {
		d.db.SetFence(l.Agent, l.Epoch)
	}
	for _, l := range expired {
		d.recoverLease(ctx, l)
	}
	return nil
}

// recoverLease closes the sessions and requeues the tasks of an agent whose
// daemon stopped renewing its lease: that daemon is dead, paused or cut
// off, and its lease guard killed its sessions before the lease ran out
// (package fence), so they are over. Mail stays pending for the agent,
// wherever it runs next, marked as shown to a session that was cut off.
func (d *Daemon) recoverLease(ctx context.Context, l store.Lease) {
	why := leaseExpiredWhy(l)
	closed, err := d.db.CloseOrphanSessions(ctx, time.Now(), []string{l.Agent})
	if err != nil {
		d.log.Error("close the sessions of a dead daemon's agent", zap.String("agent", l.Agent), zap.String("daemon", l.Daemon), zap.Error(err))
	}
	moved, err := d.tasks.Orphan(ctx, l.Agent, why)
	if err != nil {
		d.log.Error("requeue the tasks of a dead daemon's agent", zap.String("agent", l.Agent), zap.String("daemon", l.Daemon), zap.Error(err))
		return
	}
	d.leaseRecovered(l, len(closed), moved)
}

// leaseRecovery is what recoverLeaseTx did for one agent: the sessions it
// closed, the tasks it took back.
type leaseRecovery struct {
	sessions int
	moved    []taskboard.Task
}

// recoverLeaseTx is recoverLease in tx, the reap's (store.ReapExpired),
// recording what it did in n by agent.
func (d *Daemon) recoverLeaseTx(ctx context.Context, tx *sql.Tx, l store.Lease, n map[string]leaseRecovery) error {
	closed, err := store.CloseOrphanSessionsTx(ctx, tx, time.Now(), []string{l.Agent})
	if err != nil {
		return fmt.Errorf("close the sessions: %w", err)
	}
	moved, err := d.tasks.OrphanTx(ctx, tx, l.Agent, leaseExpiredWhy(l))
	if err != nil {
		return fmt.Errorf("requeue the tasks: %w", err)
	}
	n[l.Agent] = leaseRecovery{sessions: len(closed), moved: moved}
	return nil
}

func leaseExpiredWhy(l store.Lease) string {
	return fmt.Sprintf("daemon %s stopped renewing its lease on %s", l.Daemon, l.Agent)
}

// leaseRecovered logs what the recovery of l did, once committed, and
// alerts for the tasks it left FAILED (their retries used up).
func (d *Daemon) leaseRecovered(l store.Lease, sessions int, moved []taskboard.Task) {
	d.log.Warn("a daemon's lease expired: its agent's sessions are closed and its tasks requeued", zap.String("agent", l.Agent),
		zap.String("daemon", l.Daemon), zap.Int("sessions", sessions), zap.Int("tasks", len(moved)))
	d.retriesUsedUp(l.Agent, leaseExpiredWhy(l), moved)
}

// namesakeLook paces a starting daemon's looks at leases a namesake may
// hold: several a renewal interval (a third of ttl), so that a renewal is
// seen well before the lease would have expired.
func namesakeLook(ttl time.Duration) time.Duration { return max(ttl/12, 50*time.Millisecond) }

// guardMargin is how long before its lease runs out a daemon that could not
// renew has its sessions killed by the lease guard: the time to kill them,
// and room for the clocks of the daemons comparing expiries.
func guardMargin(ttl time.Duration) time.Duration { return max(ttl/4, 100*time.Millisecond) }

// renewTimeout bounds one renewal (and a take-back): half the time to the
// next, which then has time to succeed before the lease guard's deadline.
func renewTimeout(ttl time.Duration) time.Duration { return ttl / 6 }

// leaseKeeper is the lease heartbeat and the guard it feeds.
type leaseKeeper struct {
	d      *Daemon
	holder store.Lease
	mu     sync.Mutex
	guard  *fence.Guard // nil until started, and after it fired until the next renewal
	// lost: the agents whose leases the last renewal found another
	// daemon's, already reported. Only renew touches it.
	lost []string
	// retook tells the reaps' goroutine that a renewal took leases back:
	// it records the daemon's agents again (a write, kept off the renewal).
	retook chan struct{}
}

// keepLeases renews this daemon's leases (a shared store only) at once and
// then every third of lease_timeout, feeding each renewal's deadline to the
// lease guard (started here, before any session), and reaps the expired
// leases of other daemons, recovering their work, every second; Stop ends
// it, closes the guard and gives the leases up. Start it before any agent
// runs.
func (d *Daemon) keepLeases() service.Service {
	return service.Func(d.startLeases)
}

func (d *Daemon) startLeases(context.Context) (stop func(), err error) {
	cfg, _ := d.current()
	if !cfg.SharedStore() {
		return nil, nil
	}
	k := &leaseKeeper{d: d, holder: d.leaseHolder(), retook: make(chan struct{}, 1)}
	if err := k.renew(context.Background()); err != nil {
		return nil, fmt.Errorf("start the lease guard: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.loop(ctx, cfg.LeaseTimeout)
	}()
	return func() {
		cancel()
		<-done
		k.mu.Lock()
		g := k.guard
		k.guard = nil
		k.mu.Unlock()
		if g != nil {
			if err := g.Close(); err != nil {
				d.log.Warn("the lease guard", zap.Error(err))
			}
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		if err := d.db.ReleaseLeases(rctx, k.holder.Daemon, nil); err != nil {
			d.log.Warn("give up this daemon's agent leases (they expire on their own)", zap.Error(err))
		}
	}, nil
}

func (k *leaseKeeper) loop(ctx context.Context, ttl time.Duration) {
	renewEvery := ttl / 3
	// The reaps on a goroutine of their own: a reap is a write, which
	// waits for this daemon's write queue and for the swarm's writer lock
	// (held for seconds by a daemon stopped inside a write transaction,
	// until the server ends it). A renewal waiting behind one let the
	// lease guard kill the sessions of a daemon whose leases were fine.
	var reaps sync.WaitGroup
	reaps.Go(func() {
		reap := time.NewTicker(min(renewEvery, time.Second))
		defer reap.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-reap.C:
				k.reap(ctx)
			case <-k.retook:
				k.recordAgain(ctx)
			}
		}
	})
	defer reaps.Wait()
	renew := time.NewTicker(renewEvery)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			if err := k.renew(ctx); err != nil && ctx.Err() == nil {
				k.d.log.Error("renew agent leases", zap.Error(err))
			}
		}
	}
}

// renew is one heartbeat: it extends this daemon's leases, moves the
// guard's deadline (starting a guard if none runs), fences the agents whose
// lease another daemon took, and tries to take back those that are free.
func (k *leaseKeeper) renew(ctx context.Context) error {
	d := k.d
	cfg, _ := d.current()
	now := time.Now()
	// Bounded: a connection stalled in a renewal (half-open, which no
	// error ends for many minutes) would hold every later renewal; cut
	// short, the next one, a third of lease_timeout on, takes another.
	rctx, cancel := context.WithTimeout(ctx, renewTimeout(cfg.LeaseTimeout))
	// Only at the epochs this process took them: a lease under its name at
	// another was taken by a daemon of the same host name and state dir
	// (on another machine), and is that daemon's.
	mine := d.db.FenceEpochs()
	held, err := d.db.RenewHeld(rctx, k.holder.Daemon, mine, now, cfg.LeaseTimeout)
	cancel()
	if err != nil {
		return err
	}
	deadline := now.Add(cfg.LeaseTimeout - guardMargin(cfg.LeaseTimeout))
	if err := k.extend(deadline); err != nil {
		return err
	}
	running := d.reg.Names()
	if len(running) == 0 {
		running = cfg.AgentNames() // before the runners register
	}
	renewed := map[string]bool{}
	for _, l := range held {
		renewed[l.Agent] = true
	}
	var lost []string
	for _, a := range running {
		if !renewed[a] {
			lost = append(lost, a)
		}
	}
	for _, a := range lost {
		if mine[a] == 0 {
			continue // lost before, or not taken yet (a reload's)
		}
		d.db.DropFence(a, mine[a])
		// Its lease was taken while this daemon still renewed it (by a
		// daemon of the same name): the guard did not stop its session.
		if r, err := d.reg.Runner(a); err == nil {
			r.Abort(backend.AbortParentAborted, "another daemon took the agent's lease: it runs the agent now")
		}
	}
	// The writes for the agents, a session's start among them, go on as
	// long as the guard is there to kill the sessions: no longer. Moved
	// once the lost leases are dropped: a daemon that continues after a
	// pause past its deadline writes nothing for them in between (an
	// agent's row, Journal.Agent, among them).
	d.db.SetFenceExpiry(now.Add(cfg.LeaseTimeout))
	d.db.SetFenceDeadline(deadline)
	if len(lost) == 0 {
		k.lost = k.lost[:0]
		return nil
	}
	// Take back the ones nobody holds now (their taker stopped): one at a
	// time, since a take is all or none.
	var still []string
	retook := false
	for _, a := range lost {
		actx, cancel := context.WithTimeout(ctx, renewTimeout(cfg.LeaseTimeout))
		got, expired, err := d.db.RetakeLease(actx, k.holder, a, time.Now(), cfg.LeaseTimeout)
		cancel()
		if err != nil {
			still = append(still, a)
			continue
		}
		retook = true
		d.db.SetFence(a, got.Epoch)
		for _, l := range expired {
			d.recoverLease(ctx, l)
		}
		d.log.Warn("agent lease taken back", zap.String("agent", a), zap.Int64("epoch", got.Epoch))
	}
	if retook {
		select {
		case k.retook <- struct{}{}:
		default: // one is pending
		}
	}
	slices.Sort(still)
	if news := k.lostNews(still); len(news) > 0 {
		d.log.Error("agent leases lost: another daemon runs these agents now (this daemon was paused or cut off from the store past lease_timeout); "+
			"their writes are refused here until the lease is free again",
			zap.Strings("agents", news))
	} else if len(still) > 0 {
		d.log.Debug("agent leases still lost", zap.Strings("agents", still))
	}
	return nil
}

// recordAgain records the daemon's agents again, as at its start, once it
// took leases back: while it was away (paused past its leases) an operator
// may have forgotten it (swarmd daemons forget), and its agents would
// otherwise stay off the swarm's list until its next start or reload, and
// its merge target out of the check of other daemons' starts.
func (k *leaseKeeper) recordAgain(ctx context.Context) {
	cfg, _ := k.d.current()
	if err := RecordMembers(ctx, k.d.db, k.holder.Daemon, cfg); err != nil && ctx.Err() == nil {
		k.d.log.Warn("record the swarm's agents after taking leases back", zap.Error(err))
	}
	// Refused when a daemon with another target started while this one
	// was away (its leases expired, it no longer counted): the swarm has
	// two targets now, which only the operator can settle.
	if err := k.d.claimSwarmTarget(ctx, cfg); err != nil && ctx.Err() == nil {
		k.d.log.Error("record the merge target after taking leases back", zap.Error(err))
	}
}

// lostNews records still (sorted) as the agents whose leases are lost now
// and returns those of them that were not at the last renewal: a loss is
// reported once, not at every renewal while it lasts (a third of
// lease_timeout), and again if the lease is lost anew after being held.
func (k *leaseKeeper) lostNews(still []string) (news []string) {
	for _, a := range still {
		if _, seen := slices.BinarySearch(k.lost, a); !seen {
			news = append(news, a)
		}
	}
	k.lost = append(k.lost[:0], still...)
	return news
}

// extend gives the guard its next deadline, starting a guard if none runs
// (the first renewal, or the last guard fired).
func (k *leaseKeeper) extend(deadline time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.d.guard.extended(deadline, time.Now())
	if k.guard != nil {
		select {
		case <-k.guard.Done():
			k.d.log.Error("the lease guard killed this daemon's sessions: the leases were not renewed in time")
			k.guard.Close()
			k.guard = nil
		default:
			if err := k.guard.Extend(deadline); err == nil {
				return nil
			}
			k.guard.Close()
			k.guard = nil
		}
	}
	g, err := fence.Start(k.d.guardArgv(), deadline)
	if err != nil {
		return err
	}
	k.guard = g
	return nil
}

// guardDeadlines are the lease guard's deadlines, for the runners to tell
// its kills (a SIGKILL swarmd did not send) from the OOM killer's. Read
// from the deadlines, not from the guard's exit: a daemon that continues
// after a pause sees its sessions end before it sees the guard gone.
type guardDeadlines struct {
	mu     sync.Mutex
	last   time.Time // the guard's deadline now
	lapsed time.Time // the last deadline that passed before the next renewal: the guard fired then
}

// extended records the guard's next deadline, given at now.
func (g *guardDeadlines) extended(deadline, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.last.IsZero() && !now.Before(g.last) {
		g.lapsed = g.last
	}
	g.last = deadline
}

// killedSince reports whether the guard fired at since or later: a
// deadline that passed without a renewal.
func (g *guardDeadlines) killedSince(since time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.last.IsZero() && !time.Now().Before(g.last) && !g.last.Before(since) {
		return true // passed, not renewed yet
	}
	return !g.lapsed.IsZero() && !g.lapsed.Before(since)
}

// reap deletes, in one statement, the expired leases of other daemons and
// recovers each dead daemon's agents, in the same transaction: a daemon
// that takes an agent back meanwhile (the dead one, continuing after a
// pause) waits for it, and its new session and claims are left alone.
func (k *leaseKeeper) reap(ctx context.Context) {
	d := k.d
	var n map[string]leaseRecovery
	ls, err := d.db.ReapExpired(ctx, k.holder.Daemon, time.Now(), func(tx *sql.Tx, l store.Lease) error {
		if n == nil {
			n = map[string]leaseRecovery{}
		}
		return d.recoverLeaseTx(ctx, tx, l, n)
	})
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("reap expired agent leases", zap.Error(err))
		}
		return
	}
	for _, l := range ls {
		d.leaseRecovered(l, n[l.Agent].sessions, n[l.Agent].moved)
	}
}

// guardArgv is the lease guard's command line: this binary (a test
// binary's TestMain plays the guard), told what to kill: the cgroup holding
// every tree of this daemon where there are cgroups, else the trees'
// markers.
func (d *Daemon) guardArgv() []string {
	exe, _ := os.Executable()
	dir := ""
	if d.host.iso.cgroups != nil {
		dir = d.host.iso.cgroups.Dir()
	}
	cfg, _ := d.current()
	return append([]string{exe}, fence.Args(dir, cfg.StateDir, d.host.sup.Instance())...)
}
