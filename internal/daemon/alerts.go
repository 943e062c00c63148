package daemon

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/notify"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// openNotifier starts telling the operator (notify.webhook) of what needs
// a person, first of what restart recovery found (heldAlerts); without a
// webhook it sends nothing. Close stops it (closeNotifier).
func (d *Daemon) openNotifier(cfg *config.Config) {
	dash := ""
	if d.serve.http != nil {
		dash = "http://" + d.serve.http.Addr() + "/"
	}
	d.notifier = notify.New(notify.Options{URL: cfg.Notify.Webhook, Format: cfg.Notify.Format, Dashboard: dash,
		Log: d.log.Named("notify")})
	d.notifier.Start(context.Background())
	for _, a := range d.heldAlerts {
		d.notifier.Notify(a)
	}
	d.heldAlerts = nil
}

// closeNotifier stops the notifier, which first sends what is queued, for
// a few seconds, and logs what it cannot (notify.Stop). Alerts held for a
// notifier that never opened (Open failed after recovery raised them) are
// logged the same way, where a webhook was to have them: sent to nobody,
// they must not vanish unseen.
func (d *Daemon) closeNotifier() {
	if d.notifier != nil {
		d.notifier.Stop()
		return
	}
	if cfg, _ := d.current(); cfg != nil && cfg.Notify.Webhook != "" {
		for _, a := range d.heldAlerts {
			notify.LogNotDelivered(d.log.Named("notify"), a)
		}
	}
	d.heldAlerts = nil
}

// alert hands a to the notifier, which sends it without holding the
// caller up. Before the notifier opens, at the end of Open (its alerts
// name the dashboard's address, known once HTTP listens), a is held for
// it: restart recovery commits outcomes before then, and what it commits
// must alert as a live outcome does. Only Open's goroutine runs before.
func (d *Daemon) alert(a notify.Alert) {
	if d.notifier == nil {
		if a.At.IsZero() {
			a.At = time.Now()
		}
		d.heldAlerts = append(d.heldAlerts, a)
		return
	}
	d.notifier.Notify(a)
}

// notifyAgentStopped: an agent stopped on its own, for good (its error
// thresholds, a fatal error): nothing runs it until someone starts it.
func (d *Daemon) notifyAgentStopped(agentName, reason string) {
	d.alert(notify.Alert{Kind: notify.AgentStopped, Agent: agentName, Reason: reason,
		Fix: "swarmd start " + agentName})
}

// notifyTaskFailed: a task failed past its limits; the board gives it to
// nobody until someone retries it.
func (d *Daemon) notifyTaskFailed(task int64, agentName, reason string) {
	d.alert(notify.Alert{Kind: notify.TaskFailed, Task: task, Agent: agentName, Reason: reason,
		Fix: fmt.Sprintf("swarmd task retry %d", task)})
}

// retriesUsedUp alerts for each task of moved (taken from agent, for why,
// by taskboard.Orphan) that its max_retries left FAILED: the board gives
// it to nobody until someone retries it.
func (d *Daemon) retriesUsedUp(agentName, why string, moved []taskboard.Task) {
	for _, t := range moved {
		if t.State == task.Failed {
			d.notifyTaskFailed(t.ID, cmp.Or(agentName, t.Claimant),
				fmt.Sprintf("orphaned, and its %d retries are used up: %s", t.MaxRetries, why))
		}
	}
}

// notifyBudgetExhausted: an agent's (or, scope "swarm", every agent's)
// budget is spent; they stay paused until the window rolls over or someone
// raises it.
func (d *Daemon) notifyBudgetExhausted(scope, reason string) {
	a := notify.Alert{Kind: notify.BudgetExhausted, Agent: scope, Reason: reason, Fix: "swarmd budget set " + scope + " USD"}
	if scope == "swarm" {
		a.Agent, a.Fix = "", "swarmd budget set --swarm USD"
	}
	d.alert(a)
}

// providerDownAfter is how long a provider takes no session before the
// operator is told (once per outage): its agents wait and count no error,
// and resume by themselves, so a short outage needs nobody.
const providerDownAfter = 15 * time.Minute

// notifyProvidersDown tells the operator of each provider out for
// providerDownAfter (the health watch calls it).
func (d *Daemon) notifyProvidersDown(now time.Time) {
	for _, o := range d.gates.providers.Overdue(now, providerDownAfter) {
		d.alert(notify.Alert{Kind: notify.ProviderDown,
			Reason: fmt.Sprintf("provider %s has taken no session since %s (%s); its agents (%s) wait and resume by themselves when it answers",
				o.Key, o.Since.UTC().Format(time.RFC3339), o.Cause, strings.Join(o.Agents, ", "))})
	}
}

// notifyUnhealthy: /readyz fails for a fault of the daemon's own (the store
// gone, the disk full).
func (d *Daemon) notifyUnhealthy(fault string) {
	d.alert(notify.Alert{Kind: notify.Unhealthy, Reason: fault})
}
