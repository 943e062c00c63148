package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/service"
)

// pushDrain bounds how long a stopping daemon spends on the pushes still
// pending, so that the last sessions' work reaches the remote without a
// dead remote holding the shutdown.
const pushDrain = 30 * time.Second

// errNoBranch: a push found no branch to push.
var errNoBranch = errors.New("no branch to push")

// pusher pushes branches to the swarm's remote (config key remote) in a
// goroutine of its own: a session's end must not wait for the network.
// Requests are coalesced per branch: a push sends the branch as it is
// when the push runs, so only the latest head matters. It is a service:
// Start runs the pushes until Stop, which pushes what is pending (within
// pushDrain) and waits for the goroutine.
type pusher struct {
	service.Service
	log    *zap.Logger
	pushed func(ok bool) // swarmd_pushes_total

	mu      sync.Mutex
	pending map[string]func(context.Context) error // by branch
	order   []string                               // pending branches, oldest request first
	wake    chan struct{}                          // capacity 1
}

func newPusher(log *zap.Logger, pushed func(ok bool)) *pusher {
	p := &pusher{log: log, pushed: pushed, pending: map[string]func(context.Context) error{}, wake: make(chan struct{}, 1)}
	p.Service = service.Loop(p.run)
	return p
}

// request asks for branch to be pushed by push; a request for a branch
// already pending replaces it. It never blocks.
func (p *pusher) request(branch string, push func(context.Context) error) {
	p.mu.Lock()
	if _, ok := p.pending[branch]; !ok {
		p.order = append(p.order, branch)
	}
	p.pending[branch] = push
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run pushes until stop ends its context; a push under way then goes on,
// and what is pending is pushed within pushDrain.
func (p *pusher) run(stop context.Context) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(stop))
	defer cancel()
	for {
		select {
		case <-stop.Done():
			dctx, dcancel := context.WithTimeout(ctx, pushDrain)
			p.pushAll(dctx)
			dcancel()
			return
		case <-p.wake:
		}
		p.pushAll(ctx)
	}
}

// pushAll runs every pending push, oldest first; a failure is logged and
// dropped (the branch's next change asks again).
func (p *pusher) pushAll(ctx context.Context) {
	for {
		p.mu.Lock()
		if len(p.order) == 0 {
			p.mu.Unlock()
			return
		}
		branch := p.order[0]
		p.order = p.order[1:]
		push := p.pending[branch]
		delete(p.pending, branch)
		p.mu.Unlock()
		if ctx.Err() != nil {
			p.log.Warn("push not done: the daemon is stopping", zap.String("branch", branch))
			continue
		}
		err := push(ctx)
		if errors.Is(err, errNoBranch) {
			continue // nothing to push
		}
		p.pushed(err == nil)
		if err != nil {
			p.log.Error("push to the remote failed", zap.String("branch", branch), zap.Error(err))
			continue
		}
		p.log.Debug("pushed", zap.String("branch", branch))
	}
}

// pushObserver asks for an agent's branch to be pushed after each session
// that moved it (made commits, or rewrote them), when the config in force
// names a remote.
type pushObserver struct{ d *Daemon }

func (o pushObserver) OnSessionEnd(s runner.SessionRecord) {
	if s.HeadAfter == "" || s.HeadAfter == s.HeadBefore {
		return
	}
	o.d.pushAgent(s.Agent)
}

func (pushObserver) OnTransition(runner.Transition) {}
func (pushObserver) OnIdle(string, bool, time.Time) {}

// pushAgent asks for swarm/AGENT to be pushed to the remote (none: nothing).
func (d *Daemon) pushAgent(agent string) {
	cfg, _ := d.current()
	if cfg.Remote == "" {
		return
	}
	remote := cfg.Remote
	branch := d.trees.Branch(agent)
	d.pusher.request(branch, func(ctx context.Context) error {
		if _, err := d.trees.BranchCommit(ctx, branch); err != nil {
			return errNoBranch // a new agent: its worktree is not made yet
		}
		return d.trees.Push(ctx, agent, remote)
	})
}

// pushTarget asks for the merge target to be pushed to the remote after the
// merge queue advanced it, so that every daemon of the swarm sees it; never
// forced: a remote target that moved otherwise is the operator's to settle.
func (d *Daemon) pushTarget(branch string) {
	cfg, _ := d.current()
	if cfg.Remote == "" {
		return
	}
	remote := cfg.Remote
	d.pusher.request(branch, func(ctx context.Context) error {
		return d.trees.PushBranch(ctx, branch, remote)
	})
}

// publishTarget pushes into to remote, never forced, unless the target last
// pushed from here holds commit already (a batch's results are reported
// one by one, and one push carries them all). The merge queue's report
// calls it before it closes a merged task on a shared store: a leader
// killed between closing the task and a push in the background left the
// task closed with its work on its own disk alone, while the next leader
// built on a remote target without it.
func (d *Daemon) publishTarget(ctx context.Context, into, remote, commit string) error {
	if last := d.merge.published; last != "" {
		if ok, err := d.trees.IsAncestor(ctx, commit, last); err == nil && ok {
			return nil
		}
	}
	tip, err := d.trees.BranchCommit(ctx, into)
	if err != nil {
		return fmt.Errorf("publish %s: %w", into, err)
	}
	if err := d.trees.PushBranch(ctx, into, remote); err != nil {
		d.metrics.Pushed(false)
		return fmt.Errorf("publish %s before closing its merged tasks: %w", into, err)
	}
	d.metrics.Pushed(true)
	d.merge.published = tip
	return nil
}
