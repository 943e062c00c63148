package daemon

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/providergate"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// Reload applies the config at path (SIGHUP): new agents start, removed
// agents get OperatorStop, and changed role, backend, env and timeouts apply
// from each agent's next session. Keys that shape the daemon itself (repo,
// state dir, the store, the remote, the merge queue, ...:
// config.KeepRestartKeys) need a restart; a change to them is logged and
// the running value kept. Everything that can fail is done before
// the new config replaces the running one: an invalid config, or an added
// agent whose runner cannot be built, is refused and the running one kept.
func (d *Daemon) Reload(path string) error {
	// One reload at a time, and none while retire decides an agent's fate.
	d.reload.mu.Lock()
	defer d.reload.mu.Unlock()
	if !d.run.ready.Load() {
		return fmt.Errorf("still starting (agents are being registered); send SIGHUP again once it runs")
	}
	cfg, err := d.opts.LoadConfig(path)
	if err != nil {
		return err
	}
	LogConfigWarnings(d.log, cfg)
	old, _ := d.current()
	for _, key := range cfg.KeepRestartKeys(old) {
		d.log.Warn("config reload: this key takes effect at the next restart; the running value stays", zap.String("key", key))
	}
	p, err := d.planReload(cfg)
	if err != nil {
		return err
	}
	if err := d.checkHomes(cfg); err != nil {
		return err
	}
	backends, settings, fresh, running := p.backends, p.settings, p.fresh, p.running

	d.live.mu.Lock()
	d.live.cfg, d.live.backends = cfg, backends
	d.live.mu.Unlock()
	if !cfg.SharedStore() {
		// The daemon's own mail (the merge queue's, the dashboard's) goes
		// to the agents of the config in force. (On a shared store it
		// checks no recipient: other daemons run agents this config does
		// not name.) The names are valid: the config was.
		_ = d.mail.SetAgents(cfg.AgentNames())
	}
	d.gates.providers.SetBackoff(cfg)
	d.gates.admission.SetLimits(admissionLimits(cfg))
	d.host.sup.SetNice(cfg.Limits.SessionNice)
	d.setCPUs(cfg)
	defer d.budget.Reload(context.Background(), cfg) // after the runners of added agents exist

	var added, updated, removed []string
	for _, a := range cfg.Agents {
		switch {
		case d.reload.retiring[a.Name]:
			// Removed by an earlier reload and still stopping: retire starts
			// it again, with this config, once it has stopped.
			delete(running, a.Name)
			added = append(added, a.Name)
		case running[a.Name]:
			delete(running, a.Name)
			if r, err := d.reg.Runner(a.Name); err == nil {
				r.Update(settings[a.Name])
				d.gates.providers.ForAgent(a.Name, providergate.AgentKey(cfg, a))
				updated = append(updated, a.Name)
			}
		default:
			r := fresh[a.Name]
			d.adopt(cfg, a, r)
			if err := d.reg.Register(d.run.ctx, r); err != nil {
				d.log.Error("start an agent a reload added", zap.String("agent", a.Name), zap.Error(err))
				continue
			}
			added = append(added, a.Name)
		}
	}
	for name := range running {
		r, err := d.reg.Runner(name)
		if err != nil || d.reload.retiring[name] {
			continue
		}
		r.StopFor("operator", "removed from the config by a reload")
		removed = append(removed, name)
		d.reload.retiring[name] = true
		d.reload.retirers.Go(func() { d.retire(name, r) })
	}
	d.log.Info("config reloaded", zap.Strings("added", added), zap.Strings("updated", updated), zap.Strings("removed", removed))
	return nil
}

// reloadPlan is what a reload checked and built before anything changes.
type reloadPlan struct {
	backends map[string]runner.Backend
	settings map[string]runner.Settings // every agent's, checked
	fresh    map[string]*runner.Runner  // the added agents' runners, not started
	running  map[string]bool            // the agents with a runner now
}

// planReload checks every agent's settings and builds the runners of added
// agents: everything of a reload that can fail, before it changes anything.
func (d *Daemon) planReload(cfg *config.Config) (*reloadPlan, error) {
	backends, err := buildBackends(cfg, d.host.sup)
	if err != nil {
		return nil, err
	}
	p := &reloadPlan{backends: backends, settings: make(map[string]runner.Settings, len(cfg.Agents)),
		fresh: map[string]*runner.Runner{}, running: map[string]bool{}}
	for _, a := range cfg.Agents {
		if p.settings[a.Name], err = d.settings(cfg, backends, a); err != nil {
			return nil, err
		}
	}
	for _, n := range d.reg.Names() {
		p.running[n] = true
	}
	var added []string
	for _, a := range cfg.Agents {
		if p.running[a.Name] || d.reload.retiring[a.Name] {
			continue
		}
		if p.fresh[a.Name], err = d.prepareRunner(cfg, backends, a); err != nil {
			return nil, fmt.Errorf("reload: start %s: %w", a.Name, err)
		}
		added = append(added, a.Name)
	}
	if err := d.acquireLeases(context.Background(), added, false); err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	if cfg.SharedStore() && len(added) > 0 {
		// An added agent may have run on another daemon, which held its
		// task over its stop (in its worktree, not here) or was cut off:
		// taken back before the agent runs, as at a start. (On a store of
		// its own, the start took back every task of an agent it did not
		// run.)
		if err := d.recoverTasks(context.Background(), cfg, added); err != nil {
			return nil, fmt.Errorf("reload: %w", err)
		}
	}
	if err := RecordMembers(context.Background(), d.db, d.leaseHolder().Daemon, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// retire waits until the runner of an agent a reload removed has stopped,
// then drops it, unless a later reload has put the agent back in the
// config meanwhile: then the agent starts again, as an added one does.
func (d *Daemon) retire(name string, r *runner.Runner) {
	<-r.Done()
	d.reload.mu.Lock()
	defer d.reload.mu.Unlock()
	delete(d.reload.retiring, name)
	if d.run.ctx.Err() != nil {
		return // the daemon is stopping: nothing starts again
	}
	cfg, _ := d.current()
	a, ok := cfg.Agent(name)
	if !ok {
		if err := d.reg.Remove(name); err == nil {
			d.metrics.RemoveAgent(name)
			d.gates.providers.Remove(name)
		}
		d.warnAssigned(cfg, name)
		if cfg.SharedStore() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := d.db.ReleaseLeases(ctx, d.leaseHolder().Daemon, []string{name}); err != nil {
				d.log.Warn("give up a removed agent's lease (it expires on its own)", zap.String("agent", name), zap.Error(err))
			}
		}
		return
	}
	if err := d.startNew(a); err != nil {
		d.log.Error("start an agent a reload put back", zap.String("agent", name), zap.Error(err))
		return
	}
	d.log.Info("agent put back by a reload started again", zap.String("agent", name))
}

// warnAssigned tells the operator of the tasks that wait for an agent a
// reload removed: assigned to it (by the operator, or sent back to it for
// rework), no other agent may claim them until they are assigned again;
// and the parents waiting for their subtasks whose review's rework goes to
// it (taskboard.WorkerUnknown), whoever they are assigned to; and the DONE
// tasks waiting for its verdict (taskboard.ReviewerUnknown). On a shared
// store, none when another daemon's config names the agent (SwarmAgents):
// it runs the tasks.
func (d *Daemon) warnAssigned(cfg *config.Config, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cfg.SharedStore() {
		swarm, err := SwarmAgents(ctx, d.db, cfg)
		if err != nil {
			d.log.Warn("read whether another daemon runs a removed agent", zap.String("agent", name), zap.Error(err))
			return
		}
		if slices.Contains(swarm, name) {
			return
		}
	}
	ts, err := d.tasks.List(ctx, taskboard.Filter{Agent: name})
	if err == nil {
		st := task.WaitingForSubtasks
		var parents []taskboard.Task
		parents, err = d.tasks.List(ctx, taskboard.Filter{State: &st})
		ts = append(ts, parents...)
	}
	if err != nil {
		d.log.Warn("list the tasks assigned to a removed agent", zap.String("agent", name), zap.Error(err))
		return
	}
	var waiting []int64
	for _, t := range ts {
		rework := t.Worker == name && taskboard.WorkerUnknown(t, []string{})
		if (t.Assignee == name && taskboard.Assignable(t.State) || rework) && !slices.Contains(waiting, t.ID) {
			waiting = append(waiting, t.ID)
		}
	}
	slices.Sort(waiting)
	if len(waiting) > 0 {
		msg := "tasks wait for an agent a reload removed (assigned to it, or parents whose review's rework goes to it): " +
			"no other agent gets them; give each to another agent with 'swarmd task assign ID AGENT', or to any with 'swarmd task assign ID --anyone'"
		d.log.Warn(msg, zap.String("agent", name), zap.Int64s("tasks", waiting))
	}
	reviewing, err := d.tasks.Reviewing(ctx)
	if err != nil {
		d.log.Warn("list the tasks a removed agent reviews", zap.String("agent", name), zap.Error(err))
		return
	}
	var reviews []int64
	for _, t := range reviewing {
		if t.Reviewer == name {
			reviews = append(reviews, t.ID)
		}
	}
	if len(reviews) > 0 {
		d.log.Warn("tasks wait for the verdict of an agent a reload removed: nothing else moves a DONE task; "+
			"give each review to another agent with 'swarmd task assign ID --reviewer AGENT'", zap.String("agent", name), zap.Int64s("tasks", reviews))
	}
}

// startNew registers a fresh runner for an agent of the config in force,
// its session seq continuing from the last session recorded.
func (d *Daemon) startNew(a config.Agent) error {
	cfg, backends := d.current()
	r, err := d.prepareRunner(cfg, backends, a)
	if err != nil {
		return err
	}
	d.adopt(cfg, a, r)
	return d.reg.Register(d.run.ctx, r)
}

// prepareRunner builds, without starting it, the runner of an agent that
// has none, its session seq continuing from the last session recorded.
func (d *Daemon) prepareRunner(cfg *config.Config, backends map[string]runner.Backend, a config.Agent) (*runner.Runner, error) {
	seq, err := d.nextSeq(a.Name)
	if err != nil {
		return nil, err
	}
	return d.newRunnerFor(cfg, backends, a, recovered{seq: seq})
}

// nextSeq is the seq of an agent's next session: one after the last session
// recorded, once what the journal holds is written (the agent's runner may
// have just ended). A seq no session started with is used again.
func (d *Daemon) nextSeq(name string) (uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.journal.Flush(ctx); err != nil {
		return 0, fmt.Errorf("session seq of %s: %w", name, err)
	}
	seq, err := d.db.MaxSeq(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("session seq of %s: %w", name, err)
	}
	return seq + 1, nil
}
