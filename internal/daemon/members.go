package daemon

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/view"
)

// The swarm's agents, as the store records them (store.Member): each daemon
// writes the agents of its config at its start and at every reload, under
// its lease holder name, with what its config says about reviewing their
// tasks. Processes that read no config go by it: a session's own `swarmd
// task claim` starts the review its agent is configured for (never what
// the session's environment says, which the agent could change), and on a
// store several daemons share, a command may name the agents any of them
// runs, and only those.

// RecordMembers writes cfg's agents as daemon's list of the swarm's agents,
// replacing the list it wrote before.
func RecordMembers(ctx context.Context, db *store.DB, daemon string, cfg *config.Config) error {
	ms := make([]store.Member, 0, len(cfg.Agents))
	for _, a := range cfg.Agents {
		ms = append(ms, store.Member{Agent: a.Name, Reviewer: a.Reviewer, MaxIterations: a.MaxIterations, ReviewOnly: cfg.ReviewOnly(a.Name)})
	}
	if err := db.SetMembers(ctx, daemon, ms, time.Now()); err != nil {
		return fmt.Errorf("record the swarm's agents: %w", err)
	}
	return nil
}

// ReviewPolicy is what the config says about reviews: who reviews an
// agent's tasks and in how many rounds, and which agents only review
// (claim no unassigned task). Either func may be nil.
type ReviewPolicy struct {
	ReviewerOf func(agent string) (reviewer string, maxIterations int)
	ReviewOnly func(agent string) bool
}

// RecordedReviewPolicy is what the daemons recorded about reviewing each
// agent's tasks (RecordMembers); an agent none recorded has no reviewer
// and claims. Of several daemons whose configs name an agent, the one that
// holds its lease says, else the one that recorded last: on a store they
// share, each daemon's agents keep their own reviewers whoever wrote last.
func RecordedReviewPolicy(ctx context.Context, db *store.DB) (*ReviewPolicy, error) {
	byAgent, err := recordedMembers(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read the recorded reviewers: %w", err)
	}
	return &ReviewPolicy{
		ReviewerOf: func(agent string) (string, int) { m := byAgent[agent]; return m.Reviewer, m.MaxIterations },
		ReviewOnly: func(agent string) bool { return byAgent[agent].ReviewOnly },
	}, nil
}

// recordedMembers is each recorded agent's entry, as RecordedReviewPolicy
// chooses it.
func recordedMembers(ctx context.Context, db *store.DB) (map[string]store.Member, error) {
	ms, leases, err := readSwarm(ctx, db)
	if err != nil {
		return nil, err
	}
	holder := make(map[string]string, len(leases))
	for _, l := range leases {
		holder[l.Agent] = l.Daemon
	}
	out := make(map[string]store.Member, len(ms))
	for _, m := range ms { // by agent, the latest recorded first
		if _, ok := out[m.Agent]; !ok || m.Daemon == holder[m.Agent] {
			out[m.Agent] = m
		}
	}
	return out, nil
}

// SwarmAgents are the agents a command may name: the config's, and on a
// shared store those of every other daemon's config as it recorded them
// (RecordMembers), and any agent a daemon holds the lease of (one that
// has not recorded its list yet). An agent removed from every config is
// not among them: a task assigned to it waits for a person.
func SwarmAgents(ctx context.Context, db *store.DB, cfg *config.Config) ([]string, error) {
	names := cfg.AgentNames()
	if !cfg.SharedStore() {
		return names, nil
	}
	ms, leases, err := readSwarm(ctx, db)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		names = append(names, m.Agent)
	}
	for _, l := range leases {
		names = append(names, l.Agent)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// readSwarm is every daemon's recorded agents and every lease.
func readSwarm(ctx context.Context, db *store.DB) ([]store.Member, []store.Lease, error) {
	ms, err := db.Members(ctx)
	if err != nil {
		return nil, nil, err
	}
	leases, err := db.Leases(ctx)
	if err != nil {
		return nil, nil, err
	}
	return ms, leases, nil
}

// Daemons is the swarm's daemons as the dashboards show them, this one
// marked.
func (s viewSource) Daemons(ctx context.Context) ([]view.Daemon, error) {
	ds, err := s.d.db.Daemons(ctx, time.Now())
	if err != nil {
		return nil, err
	}
	self := s.d.leaseHolder().Daemon
	out := make([]view.Daemon, 0, len(ds))
	for _, d := range ds {
		v := view.Daemon{Name: d.Name, Agents: d.Agents, Self: d.Name == self, Live: d.Live, Expired: d.Expired}
		if !d.LiveUntil.IsZero() {
			v.LiveUntil = &d.LiveUntil
		}
		out = append(out, v)
	}
	return out, nil
}
