// Package registry holds the agents' runners (seed 001's AgentRegistry):
// registration under unique names, state snapshots, the interrupt senders the
// router uses, and shutdown.
package registry

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/swarmd/swarmd/internal/runner"
)

// Sentinel errors.
var (
	ErrDuplicate    = errors.New("registry: agent already registered")
	ErrUnknownAgent = errors.New("unknown agent")
	ErrClosed       = errors.New("registry: shut down")
)

// UnknownAgentError names the agent that was asked for and the known ones.
type UnknownAgentError struct {
	Name  string
	Known []string
}

func (e *UnknownAgentError) Error() string {
	return fmt.Sprintf("unknown agent %q (agents: %s)", e.Name, strings.Join(e.Known, ", "))
}

func (e *UnknownAgentError) Unwrap() error { return ErrUnknownAgent }

// InterruptSender delivers an UrgentMessage for mail id committed at the
// given time to one agent's runner. It never blocks.
type InterruptSender func(id int64, committed time.Time)

// handle is seed 001's AgentHandle: the runner (config, state watch,
// interrupt sender) and its join handle.
type handle struct {
	r   *runner.Runner // its Done is the join handle
	err error
}

// Registry holds the runners of one daemon.
type Registry struct {
	mu      sync.Mutex
	agents  map[string]*handle
	closed  bool
	wg      sync.WaitGroup
	onError func(name string, err error)
}

// New returns an empty registry. onError (may be nil) is told when a runner's
// Run returns an error.
func New(onError func(name string, err error)) *Registry {
	return &Registry{agents: make(map[string]*handle), onError: onError}
}

// Register adds r under its unique name and starts its goroutine. ctx bounds
// the runner: cancelling it stops the agent. A name that belongs to a
// Stopped runner may be registered again (swarmd start AGENT).
func (g *Registry) Register(ctx context.Context, r *runner.Runner) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	name := r.Name()
	if old, ok := g.agents[name]; ok {
		select {
		case <-old.r.Done():
		default:
			return fmt.Errorf("%w: %s", ErrDuplicate, name)
		}
	}
	h := &handle{r: r}
	g.agents[name] = h
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		h.err = r.Run(ctx)
		if h.err != nil && g.onError != nil {
			g.onError(name, h.err)
		}
	}()
	return nil
}

// Remove drops a Stopped agent (its runner has returned) from the registry:
// a config reload removed it.
func (g *Registry) Remove(name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, ok := g.agents[name]
	if !ok {
		return &UnknownAgentError{Name: name, Known: g.namesLocked()}
	}
	select {
	case <-h.r.Done(): // the runner's own signal: callers wait on the same one
		delete(g.agents, name)
		return nil
	default:
		return fmt.Errorf("registry: remove %s: still running", name)
	}
}

// Names returns the registered agent names, sorted.
func (g *Registry) Names() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.namesLocked()
}

func (g *Registry) namesLocked() []string {
	names := make([]string, 0, len(g.agents))
	for n := range g.agents {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Runner returns the runner registered under name.
func (g *Registry) Runner(name string) (*runner.Runner, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, ok := g.agents[name]
	if !ok {
		return nil, &UnknownAgentError{Name: name, Known: g.namesLocked()}
	}
	return h.r, nil
}

// Runners returns every registered runner, sorted by name.
func (g *Registry) Runners() []*runner.Runner {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*runner.Runner, 0, len(g.agents))
	for _, n := range g.namesLocked() {
		out = append(out, g.agents[n].r)
	}
	return out
}

// States returns a snapshot of every agent's state, keyed by name.
func (g *Registry) States() map[string]runner.Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]runner.Snapshot, len(g.agents))
	for n, h := range g.agents {
		out[n] = h.r.Snapshot()
	}
	return out
}

// Interrupt sends an UrgentMessage to one agent.
func (g *Registry) Interrupt(name string, id int64, committed time.Time) error {
	r, err := g.Runner(name)
	if err != nil {
		return err
	}
	r.Interrupt(id, committed)
	return nil
}

// Stop sends OperatorStop to one agent and returns without waiting.
func (g *Registry) Stop(name, actor string) error {
	r, err := g.Runner(name)
	if err != nil {
		return err
	}
	r.Stop(actor)
	return nil
}

// Shutdown sends OperatorStop to every agent and waits for every runner to
// finish. If ctx ends first, every session is force-stopped and Shutdown
// still waits for the runners (force stops are SIGKILL, so that is quick).
// Registering afterwards fails with ErrClosed.
func (g *Registry) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	runners := make([]*runner.Runner, 0, len(g.agents))
	for _, h := range g.agents {
		runners = append(runners, h.r)
	}
	g.mu.Unlock()
	for _, r := range runners {
		r.Stop("daemon")
	}
	all := make(chan struct{})
	go func() { g.wg.Wait(); close(all) }()
	select {
	case <-all:
		return nil
	case <-ctx.Done():
		g.ForceStop()
		<-all
		return ctx.Err()
	}
}

// ForceStop stops every agent and kills their sessions at once.
func (g *Registry) ForceStop() {
	for _, r := range g.Runners() {
		r.ForceStop()
	}
}

// IdleAgents lists the agents waiting, idle, for mail or a task.
func (g *Registry) IdleAgents() []string {
	var out []string
	for _, r := range g.Runners() {
		if r.Idle() {
			out = append(out, r.Name())
		}
	}
	return out
}

// Wake tells an idle agent to look for mail and tasks again.
func (g *Registry) Wake(name string) error {
	r, err := g.Runner(name)
	if err != nil {
		return err
	}
	r.Wake()
	return nil
}
