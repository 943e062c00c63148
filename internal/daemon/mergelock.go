package daemon

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/merge"
)

const (
	// mergeLockName names the store lock whose holder runs the merge
	// queue: on a shared store, one daemon of the swarm at a time.
	mergeLockName = "swarmd merge queue"
	// mergeLockRetry is how often a daemon without the lock tries to take
	// it, and how often the holder checks that it still holds it. A dead
	// holder's lock is freed by PostgreSQL when its connection drops.
	mergeLockRetry = 3 * time.Second
)

// mergeLockSilence is how long the merge lock's holder may go silent (its
// daemon stopped, or cut off) before the server ends its session and
// frees the lock for another daemon: its lease timeout, as for its agents,
// and several of its checks (every mergeLockRetry) at least.
func mergeLockSilence(lease time.Duration) time.Duration {
	return max(lease, 3*mergeLockRetry)
}

// leadMerge runs the merge queue while this daemon holds the merge lock,
// trying to take it every mergeLockRetry, until stop is closed; the queue
// is stopped and the lock released before it returns.
func (d *Daemon) leadMerge(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(mergeLockRetry)
	defer t.Stop()
	for {
		if !d.holdMerge(ctx, stop, t.C) {
			return
		}
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// holdMerge takes the merge lock if it can and runs the queue until the
// lock is lost (false: until stop or ctx ended).
func (d *Daemon) holdMerge(ctx context.Context, stop <-chan struct{}, tick <-chan time.Time) bool {
	cfg, _ := d.current()
	lock, ok, err := d.db.TryLockFor(ctx, mergeLockName, mergeLockSilence(cfg.LeaseTimeout))
	if err != nil {
		d.log.Warn("merge queue: take the merge lock", zap.Error(err))
		return true
	}
	if !ok {
		return true // another daemon runs the queue
	}
	defer func() {
		if err := lock.Release(); err != nil {
			d.log.Warn("merge queue: release the merge lock", zap.Error(err))
		}
	}()
	d.log.Info("this daemon runs the swarm's merge queue")
	// Under taking: a follow of the target (follow.go) that began before
	// is over, and none begins once the queue runs.
	d.merge.taking.Lock()
	d.merge.leading.Store(true)
	d.merge.taking.Unlock()
	defer d.merge.leading.Store(false)
	d.merge.published = "" // the remote's target may have moved since this daemon last led
	d.merge.queue.Start(ctx)
	defer d.merge.queue.Stop()
	for {
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		case <-tick:
		}
		// Bounded: a server out of reach without a word (a dead network)
		// would hold the check, and the queue with it, for hours.
		cctx, cancel := context.WithTimeout(ctx, mergeLockRetry)
		err := lock.Check(cctx)
		cancel()
		if err != nil {
			// PostgreSQL freed the lock with the connection: another daemon
			// may run the queue now. Stop at once, try again later.
			d.log.Error("merge queue: the merge lock is lost; stopping the queue", zap.Error(err))
			return true
		}
	}
}

// fetchHead is the merge queue's Prepare on a shared store: the entry's
// head, recorded by the daemon that runs its agent, was pushed by that
// daemon to the remote after the session that made it. The queue merges
// that exact commit (merge-tree, commit-tree, rebase all take e.Head), so
// it is enough to hold the commit: when it is missing the branch is
// fetched into refs/swarmd/remote/ (worktree.FetchedPrefix), never into
// refs/heads, where this daemon's own agents' branches are checked out and
// another's local copy would be rewritten. The target is fetched too: the
// merges of a daemon that held the lock before are fast-forwarded into the
// local target, and a remote target that diverged makes the entry wait
// rather than merge onto a target whose push would be refused.
func (d *Daemon) fetchHead(ctx context.Context, e merge.Entry) error {
	cfg, _ := d.current()
	if cfg.Remote == "" || cfg.Merge == nil {
		return nil
	}
	if err := d.checkTarget(ctx, cfg.Merge.Into, cfg.Remote); err != nil {
		return err
	}
	ok, err := d.trees.HasCommit(ctx, e.Head)
	if err != nil || ok {
		return err
	}
	got, err := d.trees.FetchBranch(ctx, e.Branch, cfg.Remote)
	if err != nil {
		return err
	}
	if ok, err := d.trees.HasCommit(ctx, e.Head); err != nil || ok {
		return err
	}
	return fmt.Errorf("%s on %s is at %s, which does not hold %s yet (its daemon pushes it after the session)",
		e.Branch, cfg.Remote, got, e.Head)
}

// remoteHolds is the merge queue's Holds on a shared store: whether the
// remote's target holds commit, which a daemon that held the queue before
// merged and pushed (the local target is then brought up to it, so that
// this daemon's report pushes it on). An unreachable remote is an error:
// the report waits, rather than merge a task again that is merged there.
func (d *Daemon) remoteHolds(ctx context.Context, commit string) (bool, error) {
	cfg, _ := d.current()
	if cfg.Remote == "" || cfg.Merge == nil {
		return false, nil
	}
	theirs, err := d.trees.FetchBranch(ctx, cfg.Merge.Into, cfg.Remote)
	if err != nil {
		return false, err
	}
	if ok, err := d.trees.HasCommit(ctx, commit); err != nil || !ok {
		return false, err
	}
	if ok, err := d.trees.IsAncestor(ctx, commit, theirs); err != nil || !ok {
		return false, err
	}
	return true, d.takeTarget(ctx, cfg.Merge.Into, cfg.Remote, theirs)
}

// checkTarget fails when the remote's into has commits the local one lacks.
func (d *Daemon) checkTarget(ctx context.Context, into, remote string) error {
	theirs, ferr := d.trees.FetchBranch(ctx, into, remote)
	if ferr != nil {
		ours, err := d.trees.BranchCommit(ctx, into)
		if err != nil {
			return err
		}
		return d.targetUnseen(ctx, into, remote, ours, ferr)
	}
	return d.takeTarget(ctx, into, remote, theirs)
}

// takeTarget is checkTarget once the remote's into is fetched (theirs).
func (d *Daemon) takeTarget(ctx context.Context, into, remote, theirs string) error {
	d.merge.taking.Lock() // the queue's loop and the feeder's follow
	defer d.merge.taking.Unlock()
	return d.takeTargetLocked(ctx, into, remote, theirs)
}

// takeTargetLocked is takeTarget with d.merge.taking held.
func (d *Daemon) takeTargetLocked(ctx context.Context, into, remote, theirs string) error {
	ours, err := d.trees.BranchCommit(ctx, into)
	if err != nil {
		return err
	}
	if ok, err := d.trees.IsAncestor(ctx, theirs, ours); err != nil || ok {
		return err // the remote's holds nothing ours lacks
	}
	// Another daemon merged there (it held the lock before): take its
	// merges, when that only adds commits to ours, and only a tip a merge
	// queue made: an agent (or anyone) that pushed to the remote's target
	// does not get its commits onto it past review and the gate.
	made, err := d.merge.queue.Made(ctx, theirs)
	if err != nil {
		return err
	}
	if !made {
		d.remoteTargetMoved(into, remote, theirs, ours)
		return fmt.Errorf("%s on %s is at %.12s, which no merge queue made (someone pushed to it): not taken; look at it, and bring in what belongs by hand (merge it into this repository's %s, at %.12s), then the queue goes on",
			into, remote, theirs, into, ours)
	}
	// Known as the daemon's own before it is made: a start after a stop
	// (or a kill) between the move and Took does not report it.
	if err := d.merge.queue.Taking(ctx, ours, theirs); err != nil {
		return err
	}
	err = d.trees.FastForward(ctx, into, theirs)
	if err != nil && d.targetAt(ctx, into, theirs) {
		// Cut off after git moved the ref (the stop ends git between its
		// move and its exit): the move is made, and the daemon's. Taken for
		// one not made (NotTaken), the next look reported it as someone
		// else's.
		err = nil
	}
	if err == nil {
		d.took(ctx, ours, theirs) // not a move to report (target.go)
		d.log.Info("merge queue: target fast-forwarded to the remote's", zap.String("into", into), zap.String("commit", theirs))
		return nil
	}
	// Diverged. Commits of ours that the remote lacks can be merges this
	// daemon made after it lost the queue without seeing it (stopped
	// between its last check and its move of the target, or killed before
	// it recorded them): the new leader merged those tasks again, and a
	// pull would merge them twice. Merges nobody recorded are set aside
	// (counted.go); anything else is the operator's to look at.
	set, serr := d.setAsideUncounted(ctx, into, theirs, ours)
	if !set {
		d.merge.queue.NotTaken()
	}
	if serr != nil || set {
		if set {
			d.took(ctx, ours, theirs) // recorded as target_set_aside
		}
		if serr != nil {
			return fmt.Errorf("%s on %s is at %.12s and this repository's %s at %.12s, with merges nobody recorded; cannot set them aside: %w",
				into, remote, theirs, into, ours, serr)
		}
		return nil
	}
	return fmt.Errorf("%s on %s is at %.12s and this repository's %s at %.12s: each has commits the other lacks, so it cannot be fast-forwarded (%v). "+
		"If this repository's own (git log %.12s..%s) are merges of tasks the remote's %s has merged too (this daemon lost the merge queue while it merged), "+
		"they are duplicates: reset this repository's %s to %.12s (git branch -f, or git reset --hard in its checkout); otherwise bring the remote's in (git pull %s %s). Then the queue goes on",
		into, remote, theirs, into, ours, err, theirs, into, into, into, theirs, remote, into)
}

// targetAtTimeout bounds targetAt's read of the target.
const targetAtTimeout = 10 * time.Second

// targetAt reports whether into is at tip, read even when ctx has ended
// (the stop): what a cut-off fast-forward left is known only from the ref.
func (d *Daemon) targetAt(ctx context.Context, into, tip string) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), targetAtTimeout)
	defer cancel()
	at, err := d.trees.BranchCommit(rctx, into)
	return err == nil && at == tip
}

// targetUnseen decides whether the queue merges on while it cannot fetch
// the remote's target (fetchErr): not on the remote yet (the first merge's
// push creates it), the remote out of reach, or a fetch this repository
// refuses (a sandboxed session's commit on an agent's branch, its objects
// still in quarantine, fails git fetch's connectivity check until the
// session ends). It merges on only when this repository's target (ours)
// holds the swarm's last merge as the store records it, any daemon's:
// then nothing another daemon merged is missing, and the push after the
// merge logs and counts a remote that stays unreachable. Otherwise another
// daemon held the queue since this one merged last: a merge onto the stale
// target would fork it from the remote's, tasks recorded merged that the
// remote's target never gets, which only the operator could bring
// together; the entry waits until the remote's target can be fetched.
func (d *Daemon) targetUnseen(ctx context.Context, into, remote, ours string, fetchErr error) error {
	last, err := d.merge.queue.LastMade(ctx)
	if err != nil {
		return err
	}
	if last != "" {
		held, err := d.tipHolds(ctx, ours, last)
		if err != nil {
			return err
		}
		if !held {
			return fmt.Errorf("cannot fetch %s from %s (%v), and this repository's %s (at %.12s) lacks the swarm's last merge (%.12s, made by another daemon): waiting for the remote's %s, not merging onto a stale one",
				into, remote, fetchErr, into, ours, last, into)
		}
	}
	d.log.Debug("merge queue: fetch the target; this repository's holds the swarm's last merge: merging on", zap.Error(fetchErr))
	return nil
}

// took tells the queue of the daemon's own move of the target from ours to
// theirs (merge.Queue.Took). A store that refuses to record it leaves the
// row at the move begun (Taking), which a start knows as the daemon's.
func (d *Daemon) took(ctx context.Context, ours, theirs string) {
	if err := d.merge.queue.Took(ctx, ours, theirs); err != nil {
		d.log.Warn("merge target: record the target taken", zap.String("to", theirs), zap.Error(err))
	}
}
