package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/cgroup"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/sandbox"
)

// isolation is what contains the process trees this daemon starts
// (sessions, hooks, merge gates), as config key isolation asked and the
// host allowed.
type isolation struct {
	level   string            // config.IsolationAuto, Strict or Off
	cgroups *cgroup.Hierarchy // nil: not in force
	sandbox *sandbox.Sandbox  // nil: not in force
	missing []string          // what is not in force, and why
	homes   *sharedHomes      // what the agents share of their HOMEs (homes.go)
}

// String says which parts are in force and why the others are not: the
// start log, /readyz and status carry it.
func (i isolation) String() string {
	var b strings.Builder
	b.WriteString("isolation " + i.level + ": ")
	switch {
	case i.level == config.IsolationOff:
		b.WriteString("off (process groups and markers only)")
	case i.cgroups != nil:
		fmt.Fprintf(&b, "a cgroup per process tree under %s", i.cgroups.Dir())
		if cs := i.cgroups.Controllers(); len(cs) > 0 {
			b.WriteString(" (controllers: " + strings.Join(cs, ", ") + ")")
		} else {
			b.WriteString(" (no controller delegated: no memory_max)")
		}
	}
	if i.sandbox != nil {
		if i.cgroups != nil {
			b.WriteString("; ")
		}
		b.WriteString("a bubblewrap sandbox per session (" + i.sandbox.Path() + ")")
	}
	missing := i.missing
	if h := i.homes.get(); h != "" {
		missing = append(slices.Clip(missing), h)
	}
	if len(missing) > 0 {
		b.WriteString("; NOT in force: " + strings.Join(missing, "; "))
	}
	return b.String()
}

// openIsolation sets up what cfg.Isolation asks for, after the supervisor
// is made and before any tree starts. strict refuses to start without it.
func (d *Daemon) openIsolation(cfg *config.Config) error {
	d.host.iso = isolation{level: cfg.Isolation, homes: &sharedHomes{}}
	if cfg.Isolation == config.IsolationOff {
		return nil
	}
	// One directory per state dir: daemons of other swarms on the host
	// have their own.
	sum := sha256.Sum256([]byte(cfg.StateDir))
	h, err := cgroup.Open("swarmd-" + hex.EncodeToString(sum[:6]))
	if err != nil {
		d.host.iso.missing = append(d.host.iso.missing, "cgroups: "+err.Error()+
			" (run as root, or under systemd with Delegate=yes, or in `systemd-run --user --scope -p Delegate=yes`)")
	} else {
		d.host.iso.cgroups = h
		d.host.sup.UseCgroups(h)
		// A daemon of this state dir killed before its trees ended left
		// their cgroups (and maybe processes in them) here.
		if n, err := h.RemoveLeft(); err != nil {
			d.log.Warn("remove the cgroups of trees an earlier daemon left", zap.Int("removed", n), zap.Error(err))
		} else if n > 0 {
			d.log.Warn("removed the cgroups of trees an earlier daemon left", zap.Int("count", n))
		}
	}
	if sb, err := sandbox.Probe(context.Background(), cfg.Sandbox.Bwrap); err != nil {
		known := "their environment"
		if d.host.iso.cgroups != nil {
			known = "their cgroup (which a session of root can leave)"
		}
		d.host.iso.missing = append(d.host.iso.missing, "sandbox: "+err.Error()+
			": sessions see the whole file system, the state directory included, and are known by "+known)
	} else if err := makeEmptyFile(cfg); err != nil {
		return err
	} else {
		d.host.iso.sandbox = sb
		d.host.sandboxes = newSessionSandboxes(d)
		// Sockets of an earlier daemon's sessions (sandbox.go): the state
		// lock says none of them is served any more.
		_ = os.RemoveAll(filepath.Join(cfg.StateDir, "s"))
	}
	if cfg.Isolation == config.IsolationStrict && len(d.host.iso.missing) > 0 {
		return setupErrorf("isolation: strict, and %s", strings.Join(d.host.iso.missing, "; "))
	}
	return d.checkHomes(cfg)
}

// logIsolation says at start what contains the trees: a warning when a
// part is not in force.
func (d *Daemon) logIsolation() {
	if len(d.host.iso.missing) > 0 || d.host.iso.homes.get() != "" || d.host.iso.level == config.IsolationOff {
		d.log.Warn(d.host.iso.String())
		return
	}
	d.log.Info(d.host.iso.String())
}

// closeIsolation removes what openIsolation made, once no tree runs.
func (d *Daemon) closeIsolation() {
	if d.host.iso.cgroups != nil {
		if err := d.host.iso.cgroups.Close(); err != nil {
			d.log.Warn("remove the cgroup of the process trees", zap.Error(err))
		}
	}
}

// container is what the runners get as their Container: nil while no
// sandbox is in force.
func (d *Daemon) container() runner.Container {
	if d.host.sandboxes == nil {
		return nil
	}
	return d.host.sandboxes
}
