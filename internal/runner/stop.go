package runner

import (
	"context"
	"sync"

	"github.com/swarmd/swarmd/internal/agent"
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
	why         string // what the first asked for it, if they said; guarded by mu
	done        chan struct{}
}

func (s *stopper) init() {
	s.done = make(chan struct{})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.forceCtx, s.forceCancel = context.WithCancel(context.Background())
}

// stop asks for a stop; the first actor (and its why) is the one recorded.
// Idempotent.
func (s *stopper) stop(actor, why string) {
	s.once.Do(func() {
		s.mu.Lock()
		s.actor, s.why = actor, why
		s.mu.Unlock()
		s.cancel()
	})
}

// force stops at once, the daemon asking unless someone asked before.
func (s *stopper) force() {
	s.stop("daemon", "")
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

// reason is the requested stop as the agent's transition records it.
func (s *stopper) reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.why == "" {
		return "stop requested by " + s.actor
	}
	return "stop requested by " + s.actor + ": " + s.why
}

// stopCause is what stopped the agent's machine; it decides what becomes
// of the tasks the agent holds (cleanup). The zero value is a failure: an
// agent restored Stopped was stopped by its errors or a fatal error.
type stopCause int

const (
	// causeFailure: its error thresholds or a fatal error: the work
	// failed, and its tasks are orphaned (a retry).
	causeFailure stopCause = iota
	// causeAsked: the operator (or the agent itself) asked, a reload
	// removed it, or its own max_sessions: not the tasks' failure; they
	// are given back without a retry.
	causeAsked
	// causeDaemon: the daemon stops: it holds the tasks over for the
	// agent (the daemon's holdOver), and they stay where they are.
	causeDaemon
)

// causeOf is the stopCause of a transition to Stopped by ev, asked by actor.
func causeOf(ev agent.Event, actor string) stopCause {
	switch {
	case ev.Kind != agent.OperatorStop:
		return causeFailure
	case actor == "daemon":
		return causeDaemon
	default:
		return causeAsked
	}
}
