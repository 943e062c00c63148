package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/service"
	"github.com/swarmd/swarmd/internal/store"
)

// HealthInterval is how often the daemon checks what it cannot be told:
// that swarm.db was deleted or replaced, that the database stopped
// answering, that the state dir's disk filled up. It is a slow safety net;
// every write also checks the database file itself.
const HealthInterval = 5 * time.Second

// minFreeBytes below which the state dir's filesystem counts as full: a
// session log, an archive and a WAL checkpoint need room to land.
const minFreeBytes = 64 << 20

// healthMonitor holds the daemon's last health verdict ("" when healthy).
type healthMonitor struct {
	fault atomic.Pointer[string]
}

// faultText is the current fault, "" when none.
func (h *healthMonitor) faultText() string {
	if p := h.fault.Load(); p != nil {
		return *p
	}
	return ""
}

// set records fault and says so once per change, loudly; it reports
// whether the fault changed.
func (h *healthMonitor) set(fault string, log *zap.Logger) bool {
	if fault == h.faultText() {
		return false
	}
	h.fault.Store(&fault)
	if fault == "" {
		log.Warn("daemon healthy again")
		return true
	}
	log.Error("DAEMON UNHEALTHY: "+fault, zap.String("fault", fault))
	return true
}

// check runs the checks once and returns the first fault, "" if none.
func (d *Daemon) checkHealth(ctx context.Context) string {
	if err := d.db.Check(); err != nil {
		return fmt.Sprintf("%s was deleted or replaced under the running daemon: no session starts and nothing more is written; restart swarmd", d.db.Path())
	}
	if _, err := d.mail.DataVersion(ctx); err != nil {
		return "database: " + err.Error()
	}
	var st unix.Statfs_t
	cfg, _ := d.current()
	if err := unix.Statfs(cfg.StateDir, &st); err == nil {
		return spaceFault(st, cfg.StateDir)
	}
	return ""
}

// spaceFault is what the state dir's filesystem lacks, "" when nothing:
// minFreeBytes free, or a twentieth of a smaller filesystem (one of 8 MiB
// is not full with 6 free), and a free inode (a file is one each).
func spaceFault(st unix.Statfs_t, dir string) string {
	need := min(uint64(minFreeBytes), st.Blocks*uint64(st.Bsize)/20)
	if free := st.Bavail * uint64(st.Bsize); free < need {
		return fmt.Sprintf("disk full: %d KiB free on the filesystem of %s (need %d KiB)", free>>10, dir, need>>10)
	}
	if st.Files > 0 && st.Ffree == 0 {
		return fmt.Sprintf("disk full: no free inode on the filesystem of %s (every file takes one)", dir)
	}
	return ""
}

// healthWatch is the service that checks the daemon's health every
// interval, and tells the operator of a new fault and of providers down.
func (d *Daemon) healthWatch(interval time.Duration) service.Service {
	return service.Loop(func(ctx context.Context) {
		// At the wall clock's multiples of interval, as the router's and the
		// reaper's safety checks: an idle daemon wakes once for the three.
		t := time.NewTimer(service.UntilAligned(interval))
		defer t.Stop()
		for {
			// A check under way finishes: Stop waits for it.
			if fault := d.checkHealth(context.WithoutCancel(ctx)); d.health.set(fault, d.log) && fault != "" {
				d.notifyUnhealthy(fault)
			}
			d.notifyProvidersDown(time.Now())
			d.releaseStuck(time.Now())
			d.load.note(time.Now(), d.db.WriterStats())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				t.Reset(service.UntilAligned(interval))
			}
		}
	})
}

// readiness is /readyz and what feeds the systemd watchdog: the daemon can
// do its job. Every agent registered, the database is the file it opened and
// answers, the disk has room, and at least one agent is not Stopped.
func (d *Daemon) readiness() string {
	if w := d.run.storeWait.Load(); w != nil {
		return *w // the start waits for the store (storewait.go)
	}
	if !d.run.ready.Load() {
		return "agents not registered yet"
	}
	if err := d.db.Check(); errors.Is(err, store.ErrDatabaseGone) {
		return d.db.Path() + " was deleted or replaced under the running daemon"
	}
	if f := d.health.faultText(); f != "" {
		return f
	}
	if n := d.journal.Backlog(); n >= store.DefaultMaxQueued/10 {
		return fmt.Sprintf("event log: %d records waiting to be written, %d dropped: swarm.db refuses writes", n, d.journal.Dropped())
	}
	if f := d.agentDiskFull(); f != "" {
		return f
	}
	if w := d.agentStoreWait(); w != "" {
		return w
	}
	states := d.reg.States()
	if len(states) == 0 {
		return "no agents configured"
	}
	for _, s := range states {
		if s.State.Kind != agent.Stopped {
			return ""
		}
	}
	return "every agent is Stopped (swarmd start AGENT)"
}

// storeWaiters are the snapshots of the agents waiting on the store.
func (d *Daemon) storeWaiters() []runner.Snapshot {
	var out []runner.Snapshot
	for _, r := range d.reg.Runners() {
		if s := r.Snapshot(); s.StoreWait != "" {
			out = append(out, s)
		}
	}
	return out
}

// agentStoreWait says how many agents wait on the store to record what
// their sessions did (outcomes, starts, claims), naming the longest
// waiting, or is "".
func (d *Daemon) agentStoreWait() string {
	ws := d.storeWaiters()
	if len(ws) == 0 {
		return ""
	}
	first := ws[0]
	for _, s := range ws[1:] {
		if s.StoreWaitSince.Before(first.StoreWaitSince) {
			first = s
		}
	}
	return fmt.Sprintf("%d agents waiting on the store; the longest, %s, for %s: %s", len(ws), first.Agent,
		time.Since(first.StoreWaitSince).Round(time.Second), first.StoreWait)
}

// agentsStoreWaiting counts the agents waiting on the store (a metric).
func (d *Daemon) agentsStoreWaiting() int { return len(d.storeWaiters()) }

// agentDiskFull names an agent whose last session log or prompt write failed
// for lack of space (ENOSPC or a quota, which statfs does not see), or is "".
func (d *Daemon) agentDiskFull() string {
	for _, r := range d.reg.Runners() {
		if s := r.Snapshot(); s.DiskFull != "" {
			return "disk full: agent " + s.Agent + ": " + s.DiskFull
		}
	}
	return ""
}
