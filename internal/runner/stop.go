package runner

import (
	"context"
	"sync"
)

// stopper is how the agent is ended: Stop cancels ctx, which aborts the
// Run goroutine's blocking steps; ForceStop cancels forceCtx too, which
// kills hooks and cuts short what a stop still lets finish (archiving,
// recording the last outcome). done is closed when Run has returned.
type stopper struct {
	ctx         context.Context // cancelled by Stop
	cancel      context.CancelFunc
	forceCtx    context.Context // cancelled by ForceStop, and when Run returns
	forceCancel context.CancelFunc
	once        sync.Once
	mu          sync.Mutex
	actor       string // who asked first; guarded by mu
	done        chan struct{}
}

func (s *stopper) init() {
	s.done = make(chan struct{})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.forceCtx, s.forceCancel = context.WithCancel(context.Background())
}

// stop asks for a stop; the first actor is the one recorded. Idempotent.
func (s *stopper) stop(actor string) {
	s.once.Do(func() {
		s.mu.Lock()
		s.actor = actor
		s.mu.Unlock()
		s.cancel()
	})
}

// force stops at once, the daemon asking unless someone asked before.
func (s *stopper) force() {
	s.stop("daemon")
	s.forceCancel()
}

// requested reports whether a stop was asked for.
func (s *stopper) requested() bool { return s.ctx.Err() != nil }

// forced is closed once ForceStop was called (or Run returned).
func (s *stopper) forced() <-chan struct{} { return s.forceCtx.Done() }

// by is who asked for the stop ("" when nobody did: the agent stopped by
// itself).
func (s *stopper) by() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.actor
}
