// Package service is the one lifecycle of the daemon's background
// services, after River's startstop: Start(ctx) and Stop(), both
// idempotent. Start on a running service does nothing; Stop before Start,
// or twice, does nothing; Stop returns once what Start started has ended
// (its goroutines returned); a Start that fails leaves nothing running. A
// Group starts services in order and stops them in reverse, in one place.
package service

import (
	"context"
	"sync"
)

// Service is something that runs in the background between Start and
// Stop.
type Service interface {
	// Start starts the service; on a running one it does nothing. An
	// error means nothing of it runs.
	Start(ctx context.Context) error
	// Stop stops the service and waits until it has stopped; on a
	// service that does not run it does nothing.
	Stop()
}

// funcService is a Service made of a start function that returns its stop.
type funcService struct {
	start func(ctx context.Context) (stop func(), err error)

	mu      sync.Mutex // held through start and stop: a Stop waits for a Start under way
	running bool
	stop    func()
}

// Func is a Service made of start, which starts what it starts and returns
// the function that stops it (nil: nothing to stop), or an error and
// leaves nothing running. Func calls start once per Start of a service
// that does not run, and stop once per Stop of one that does.
func Func(start func(ctx context.Context) (stop func(), err error)) Service {
	return &funcService{start: start}
}

func (s *funcService) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	stop, err := s.start(ctx)
	if err != nil {
		return err
	}
	s.running, s.stop = true, stop
	return nil
}

func (s *funcService) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return
	}
	s.running = false
	if s.stop != nil {
		s.stop()
	}
	s.stop = nil
}

// Loop is a Service that runs run in a goroutine of its own from Start
// until Stop, or until run returns by itself. run's context ends at Stop
// (or when Start's context ends); Stop waits for run to return.
func Loop(run func(ctx context.Context)) Service {
	return Func(func(ctx context.Context) (func(), error) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			run(ctx)
		}()
		return func() { cancel(); <-done }, nil
	})
}

// Group is services started in order and stopped in reverse: each one
// started may use those before it until it has stopped. It is a Service.
type Group struct {
	services []Service

	mu      sync.Mutex
	started int // how many of services run (a prefix)
}

// NewGroup returns the group of services, in the order they start.
func NewGroup(services ...Service) *Group {
	return &Group{services: services}
}

// Start starts every service in order. When one fails, those started stop,
// in reverse order, and Start returns its error: nothing of the group
// runs. On a running group it does nothing.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started > 0 {
		return nil
	}
	for _, s := range g.services {
		if err := s.Start(ctx); err != nil {
			g.stopLocked()
			return err
		}
		g.started++
	}
	return nil
}

// Stop stops the services started, last started first, each once it has
// stopped the one after it.
func (g *Group) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopLocked()
}

func (g *Group) stopLocked() {
	for ; g.started > 0; g.started-- {
		g.services[g.started-1].Stop()
	}
}
