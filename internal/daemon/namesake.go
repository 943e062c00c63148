package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/store"
)

// A daemon holds its leases under its host name and state dir, which a
// restart keeps, so that a restarted daemon takes its agents back at once.
// Two daemons that share both (cloned machines) are one name to the store:
// the later one would take the earlier one's agents as a restart does, and
// until the earlier one's next renewal found them gone both ran them. At
// start a daemon therefore tells its own dead predecessor (this boot, its
// pid gone) from a holder that may be alive, and waits on the latter's
// leases: expired, they are taken; renewed, the holder is alive and the
// daemon refuses to start.
//
// A pid means something only in its pid namespace: two containers on one
// machine (one boot id) with the same host name (host networking, a pod
// copied into another namespace on the same node) see none of each
// other's processes, and each runs its daemon as pid 1. So a lease keeps,
// as its boot, the boot id and the holder's pid namespace, and only a pid
// of this very namespace is looked for. A container restarted on its state
// dir has a new pid namespace: its predecessor is known by the state dir's
// lock file instead, which the holder writes its pid and boot in, and
// which only a holder gone lets this daemon take.

// ErrNamesake: a live process elsewhere holds agents under this daemon's
// own name. The error wrapping it is a *NamesakeError.
var ErrNamesake = errors.New("agents held under this daemon's name by another live process")

// NamesakeError names the namesake's lease.
type NamesakeError struct{ Lease store.Lease }

func (e *NamesakeError) Error() string {
	l := e.Lease
	return fmt.Sprintf("agent %s is held under this daemon's own name (%s) by another live swarmd (pid %d, boot %s), "+
		"which renewed its lease while this one waited: two daemons share a host name and state dir; "+
		"give each machine a host name of its own, or stop the other daemon",
		l.Agent, l.Daemon, l.PID, shortBoot(l.Boot))
}

func (e *NamesakeError) Unwrap() error { return ErrNamesake }

func shortBoot(b string) string {
	if len(b) > 8 {
		return b[:8]
	}
	return b
}

// bootID is this machine's boot id and this process's pid namespace
// ("BOOT_ID/pid:[INODE]"): another machine, this one after a reboot, or
// another container has another. "" when the kernel does not say.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b)) + "/" + ns
}

// machineBoot is the boot id of a lease's boot, without its pid namespace.
func machineBoot(boot string) string {
	b, _, _ := strings.Cut(boot, "/")
	return b
}

// pidGone reports whether no process has pid on this machine.
func pidGone(pid int) bool {
	return pid <= 0 || errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

// maybeLive is the leases among ls, unexpired at now, held under self's
// name by a process that may be alive: not self, not a process of this boot
// and pid namespace that is gone (self holds the state dir's lock, so a
// process of this boot under its name is its predecessor), not the last
// holder of self's state dir's lock on this boot (prev: it let the lock go,
// so it is gone too, whatever pid namespace it ran in), and not written
// before leases kept their boot (those are taken as before).
func maybeLive(ls []store.Lease, self, prev store.Lease, agents map[string]bool, now time.Time, gone func(int) bool) []store.Lease {
	var out []store.Lease
	for _, l := range ls {
		switch {
		case l.Daemon != self.Daemon || !agents[l.Agent] || !l.Expires.After(now):
		case l.Boot == "" || self.Boot == "":
		case prev.Boot != "" && l.Boot == prev.Boot && l.PID == prev.PID && machineBoot(l.Boot) == machineBoot(self.Boot):
		case l.Boot == self.Boot && (l.PID == self.PID || gone(l.PID)):
		default:
			out = append(out, l)
		}
	}
	return out
}

// renewedSince is a lease of waiting that cur shows renewed by the same
// holder (a later expiry at the same epoch) or taken again under the same
// name (another epoch), if any; the rest of waiting that is still
// unexpired at now is left.
func renewedSince(waiting map[string]store.Lease, cur []store.Lease, now time.Time) (renewed store.Lease, ok bool, left map[string]store.Lease) {
	byAgent := make(map[string]store.Lease, len(cur))
	for _, l := range cur {
		byAgent[l.Agent] = l
	}
	left = map[string]store.Lease{}
	for a, w := range waiting {
		l, held := byAgent[a]
		switch {
		case !held || l.Daemon != w.Daemon:
			// Released, or another daemon's now: taking it is the
			// store's usual business.
		case l.Epoch != w.Epoch || l.Expires.After(w.Expires):
			return l, true, nil
		case l.Expires.After(now):
			left[a] = w
		}
	}
	return store.Lease{}, false, left
}

// awaitNamesakes waits until no lease of agents is held under holder's name
// by a process that may be alive: each such lease expires (its holder is
// dead or cut off, and its lease guard has ended its sessions), or one is
// renewed, and then it refuses with a *NamesakeError. every paces the
// looks; 0 refuses at once, without waiting. ctx ends the wait.
func (d *Daemon) awaitNamesakes(ctx context.Context, holder store.Lease, agents []string, every time.Duration) error {
	want := make(map[string]bool, len(agents))
	for _, a := range agents {
		want[a] = true
	}
	ls, err := d.db.Leases(ctx)
	if err != nil {
		return err
	}
	live := maybeLive(ls, holder, d.host.lock.last(), want, time.Now(), pidGone)
	if len(live) == 0 {
		return nil
	}
	if every == 0 {
		return &NamesakeError{Lease: live[0]}
	}
	waiting := make(map[string]store.Lease, len(live))
	var until time.Time
	for _, l := range live {
		waiting[l.Agent] = l
		if l.Expires.After(until) {
			until = l.Expires
		}
	}
	d.log.Warn("leases held under this daemon's own name by a process that may be alive elsewhere: waiting for them to expire, "+
		"or to be renewed (another daemon with this host name and state dir: refused)",
		zap.Int("agents", len(live)), zap.String("agent", live[0].Agent), zap.Int("pid", live[0].PID),
		zap.String("boot", shortBoot(live[0].Boot)), zap.Time("until", until))
	t := time.NewTicker(every)
	defer t.Stop()
	for len(waiting) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the leases held under this daemon's name: %w", ctx.Err())
		case <-t.C:
		}
		cur, err := d.db.Leases(ctx)
		if err != nil {
			return err
		}
		renewed, ok, left := renewedSince(waiting, cur, time.Now())
		if ok {
			return &NamesakeError{Lease: renewed}
		}
		waiting = left
	}
	d.log.Info("the leases held under this daemon's name expired unrenewed: taking the agents")
	return nil
}
