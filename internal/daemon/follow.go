package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// On a shared store with a remote, only the daemon that leads the merge
// queue moved its own clone's target; the others kept the one they started
// with. Their agents then started every task line from an old target, and
// a worker told to resolve a conflict by merging the target into its line
// (rejectionTodo) merged the old one and was rejected again, up to
// merge.max_rejections. So a daemon that does not lead follows the
// remote's target: each time the swarm's last merge (as the store records
// it) is one its target lacks, it fetches the remote's and takes it as the
// leader does (takeTarget: only a target a queue made, never over anyone's
// own commits, uncounted merges set aside).

// following is what followTarget keeps between calls (the merge feeder's
// goroutine only).
type following struct {
	done, warned string    // the last merge held; the last one warned of
	tried        time.Time // the last try
}

// followRetry is how soon a follow that did not bring the target up to the
// swarm's last merge is tried again (the push after the merge not there
// yet, the remote away, the target checked out with local changes).
const followRetry = 5 * time.Second

// followFetchTimeout bounds a follow's fetch of the remote's target.
const followFetchTimeout = 15 * time.Second

// followTarget brings into up to the remote's (remote) when the swarm
// merged since this daemon last looked and it does not lead the queue.
// The merge feeder calls it, from one goroutine.
func (d *Daemon) followTarget(ctx context.Context, into, remote string) {
	f := &d.merge.follow
	if d.merge.leading.Load() {
		return // the queue takes the remote's target itself
	}
	last, err := d.merge.queue.LastMade(ctx)
	if err != nil || last == "" || last == f.done || time.Since(f.tried) < followRetry {
		return
	}
	f.tried = time.Now()
	if d.holdsMerge(ctx, into, last) {
		f.done = last
		return
	}
	// Bounded well below a push's limit: the merge feeder waits for it,
	// and a remote that hangs would hold the queueing of this daemon's
	// finished tasks.
	fctx, cancel := context.WithTimeout(ctx, followFetchTimeout)
	theirs, err := d.trees.FetchBranch(fctx, into, remote)
	cancel()
	if err == nil {
		err = d.followTo(ctx, into, remote, theirs)
	}
	if err == nil && d.holdsMerge(ctx, into, last) {
		f.done = last
		return
	}
	if err != nil && f.warned != last {
		f.warned = last
		d.log.Warn("merge target: cannot follow the remote's; new task lines start from this repository's", zap.String("target", into),
			zap.String("remote", remote), zap.String("last_merge", last), zap.Error(err))
	}
}

// followTo takes the remote's target (theirs) unless this daemon leads the
// queue by now: the lead is taken under the same lock (holdMerge), so a
// follow never moves the target under the queue's own advance.
func (d *Daemon) followTo(ctx context.Context, into, remote, theirs string) error {
	d.merge.taking.Lock()
	defer d.merge.taking.Unlock()
	if d.merge.leading.Load() {
		return nil
	}
	return d.takeTargetLocked(ctx, into, remote, theirs)
}

// holdsMerge reports whether into holds commit.
func (d *Daemon) holdsMerge(ctx context.Context, into, commit string) bool {
	tip, err := d.trees.BranchCommit(ctx, into)
	if err != nil {
		return false
	}
	ok, err := d.tipHolds(ctx, tip, commit)
	return err == nil && ok
}

// tipHolds reports whether the repository holds commit and tip has it.
func (d *Daemon) tipHolds(ctx context.Context, tip, commit string) (bool, error) {
	ok, err := d.trees.HasCommit(ctx, commit)
	if err != nil || !ok {
		return false, err
	}
	return d.trees.IsAncestor(ctx, commit, tip)
}
