package daemon

import (
	"context"

	"github.com/swarmd/swarmd/internal/admission"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/runner"
)

// admissionLimits are cfg's limits as package admission takes them.
func admissionLimits(cfg *config.Config) admission.Limits {
	return admission.Limits{MaxRunning: cfg.Limits.MaxRunning, PerProvider: cfg.Limits.PerProvider,
		MinAvailable: int64(cfg.Limits.MinAvailableMemory)}
}

// admitGate is an agent's runner.Gate: its provider's gate (a rate limit,
// a circuit breaker), then a slot of the swarm's admission (limits). The
// runner holds the ticket from before its prompt is built until its
// session ended (or did not start), so a slot is a running session.
type admitGate struct {
	adm      *admission.Admission
	provider string // the agent's backend type: limits.per_provider's key
	next     runner.Gate
}

func (g admitGate) Acquire(ctx context.Context, agent string, waiting func(string)) (runner.Ticket, error) {
	var next runner.Ticket
	if g.next != nil {
		t, err := g.next.Acquire(ctx, agent, waiting)
		if err != nil {
			return nil, err
		}
		next = t
	}
	release, err := g.adm.Acquire(ctx, agent, g.provider, waiting)
	if err != nil {
		if next != nil {
			next.Done(backend.Result{}, false)
		}
		return nil, err
	}
	return admitTicket{release: release, next: next}, nil
}

type admitTicket struct {
	release func()
	next    runner.Ticket
}

// Probe passes the provider's word on: the session is its probe.
func (t admitTicket) Probe() bool {
	p, ok := t.next.(runner.Prober)
	return ok && p.Probe()
}

func (t admitTicket) Done(res backend.Result, ran bool) {
	if t.next != nil {
		t.next.Done(res, ran)
	}
	t.release()
}
