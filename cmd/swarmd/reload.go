package main

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// reload applies a new config (SIGHUP): new agents start, removed agents get
// OperatorStop, and changed role, backend, env and timeouts apply from each
// agent's next session. Keys that shape the daemon itself (repo, state dir,
// base ref, listen, logs, hooks, mailbox) need a restart; a change to them is
// logged and ignored. An invalid config is refused and the running one kept.
func (d *daemon) reload(path string) error {
	if !d.ready.Load() {
		return fmt.Errorf("still starting (agents are being registered); send SIGHUP again once it runs")
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	logConfigWarnings(d.log, cfg)
	old, _ := d.current()
	for key, changed := range map[string]bool{
		"repo": cfg.Repo != old.Repo, "state_dir": cfg.StateDir != old.StateDir, "base_ref": cfg.BaseRef != old.BaseRef,
		"listen": cfg.Listen != old.Listen, "logs": cfg.Logs != old.Logs, "mailbox": cfg.Mailbox != old.Mailbox,
		"hooks": fmt.Sprint(cfg.Hooks) != fmt.Sprint(old.Hooks),
	} {
		if changed {
			d.log.Warn("config reload: this key takes effect at the next restart", zap.String("key", key))
		}
	}
	backends, err := buildBackends(cfg, d.sup)
	if err != nil {
		return err
	}
	// Check every agent's settings before changing anything.
	for _, a := range cfg.Agents {
		if _, err := d.settings(cfg, backends, a); err != nil {
			return err
		}
	}
	d.cfgMu.Lock()
	d.cfg, d.backends = cfg, backends
	d.cfgMu.Unlock()

	running := make(map[string]bool)
	for _, n := range d.reg.Names() {
		running[n] = true
	}
	var added, updated, removed []string
	for _, a := range cfg.Agents {
		if running[a.Name] {
			delete(running, a.Name)
			r, err := d.reg.Runner(a.Name)
			if err != nil {
				continue
			}
			st, _ := d.settings(cfg, backends, a)
			r.Update(st)
			updated = append(updated, a.Name)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		seq, err := d.mail.MaxSeq(ctx, a.Name)
		cancel()
		if err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		r, err := d.newRunner(a, recovered{seq: seq + 1})
		if err != nil {
			return err
		}
		d.metrics.AddAgent(a.Name)
		if err := d.reg.Register(d.agentCtx, r); err != nil {
			return fmt.Errorf("reload: start %s: %w", a.Name, err)
		}
		added = append(added, a.Name)
	}
	for name := range running {
		r, err := d.reg.Runner(name)
		if err != nil {
			continue
		}
		r.Stop("operator")
		removed = append(removed, name)
		go func() {
			<-r.Done()
			if err := d.reg.Remove(name); err == nil {
				d.metrics.RemoveAgent(name)
			}
		}()
	}
	d.log.Info("config reloaded", zap.Strings("added", added), zap.Strings("updated", updated), zap.Strings("removed", removed))
	return nil
}
