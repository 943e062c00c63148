package worktree

import (
	"context"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// discardTimeout bounds the clean-up of a worktree whose checkout failed,
// which runs even when the caller's context was cancelled.
const discardTimeout = 30 * time.Second

// checkout fills a worktree that "git worktree add --no-checkout"
// registered: the same "reset --hard" git's own add runs (without its
// post-checkout hook). A commit of the empty tree needs nothing: git reads
// a missing index as an empty one, so the worktree is clean already.
func (m *Manager) checkout(ctx context.Context, wt Worktree, adminDir string) error {
	empty, err := m.emptyTree(plumbing.NewHash(wt.Head))
	if err != nil {
		return err
	}
	if empty {
		return nil
	}
	done, err := m.acquireBusy(ctx)
	if err != nil {
		return err
	}
	defer done()
	// A new registration, but the branch's reflogs are older.
	if err := m.plainGitDir(wt.Agent, adminDir); err != nil {
		return err
	}
	if _, err := m.gitIn(ctx, wt.Path, adminDir, "reset", "--hard", "--no-recurse-submodules", "--quiet"); err != nil {
		return err
	}
	return nil
}

// acquireBusy takes a slot for a git process run outside the repository
// lock.
func (m *Manager) acquireBusy(ctx context.Context) (done func(), err error) {
	select {
	case m.busy <- struct{}{}:
		return func() { <-m.busy }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// emptyTree reports whether commit h has no files.
func (m *Manager) emptyTree(h plumbing.Hash) (bool, error) {
	r, err := m.openRepo()
	if err != nil {
		return false, err
	}
	c, err := r.CommitObject(h)
	if err != nil {
		return false, fmt.Errorf("read commit %s: %w", h, err)
	}
	t, err := c.Tree()
	if err != nil {
		return false, fmt.Errorf("read tree of commit %s: %w", h, err)
	}
	return len(t.Entries) == 0, nil
}

// discard removes a worktree whose checkout failed, as git's own add does,
// so that the next Ensure does not take it for a ready one. The branch
// stays, as with git.
func (m *Manager) discard(ctx context.Context, wt Worktree) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discardTimeout)
	defer cancel()
	unlock, err := m.lock(ctx)
	if err != nil {
		return fmt.Errorf("remove half created worktree %s: %w", wt.Path, err)
	}
	defer unlock()
	if _, err := m.git.run(ctx, m.repo, "worktree", "remove", "--force", "--force", wt.Path); err != nil {
		return fmt.Errorf("remove half created worktree %s: %w", wt.Path, err)
	}
	return nil
}
