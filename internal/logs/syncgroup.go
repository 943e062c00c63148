package logs

import "sync"

// syncGroup coalesces the fsyncs of one directory. A caller needs a sync
// that starts after its call (its change is in the directory by then);
// callers that arrive while a sync runs share the next one, which one of
// them runs. A daemon's stop creates every agent's archive directory in the
// archive root at once: a few fsyncs of the root serve them all instead of
// one each.
type syncGroup struct {
	mu      sync.Mutex
	running bool
	next    *syncCall // the sync after the running one, shared by who waits for it
}

type syncCall struct {
	ready   chan struct{} // closed when the sync before it has ended
	done    chan struct{}
	claimed bool // one waiter runs it
	err     error
}

// do runs sync, or waits for a run of it that starts after this call.
func (g *syncGroup) do(sync func() error) error {
	g.mu.Lock()
	if !g.running {
		g.running = true
		g.mu.Unlock()
		err := sync()
		g.finish()
		return err
	}
	if g.next == nil {
		g.next = &syncCall{ready: make(chan struct{}), done: make(chan struct{})}
	}
	c := g.next
	g.mu.Unlock()
	<-c.ready
	g.mu.Lock()
	if c.claimed {
		g.mu.Unlock()
		<-c.done
		return c.err
	}
	c.claimed = true
	g.mu.Unlock()
	c.err = sync()
	close(c.done)
	g.finish()
	return c.err
}

// finish ends a sync; the next one, when anybody waits for it, is run by
// one of its waiters (running stays true for it).
func (g *syncGroup) finish() {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.next
	if c == nil {
		g.running = false
		return
	}
	g.next = nil
	close(c.ready)
}
