package worktree

import (
	"context"
	"sync"
)

// agentLocks serialises the operations on one agent's worktree within the
// process. A worktree is checked out after the repository lock is released
// (only its registration needs that lock), so until the checkout is done
// the worktree looks ready to anyone not holding the agent's lock.
type agentLocks struct {
	mu    sync.Mutex
	locks map[string]*agentLock
}

type agentLock struct {
	held chan struct{} // a token while held
	refs int           // holders and waiters; the entry goes at zero
}

// lock takes the agent's lock, or returns ctx's error.
func (a *agentLocks) lock(ctx context.Context, agent string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.locks == nil {
		a.locks = map[string]*agentLock{}
	}
	l := a.locks[agent]
	if l == nil {
		l = &agentLock{held: make(chan struct{}, 1)}
		a.locks[agent] = l
	}
	l.refs++
	a.mu.Unlock()
	release := func() {
		a.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(a.locks, agent)
		}
		a.mu.Unlock()
	}
	select {
	case l.held <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	return func() { <-l.held; release() }, nil
}
