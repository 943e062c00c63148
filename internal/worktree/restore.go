package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
	"go.uber.org/zap"
)

// ErrOffBranch is matched (errors.Is) by the *OffBranchError that Ensure and
// Verify return when they cannot switch a worktree back to its agent's branch.
var ErrOffBranch = errors.New("worktree is not on its agent's branch")

// OffBranchError says that a session left the agent's worktree on another
// branch (or a detached HEAD) and git refused to switch back, with the
// commands that do it without losing anything.
type OffBranchError struct {
	Agent string
	Path  string
	Where string   // "on branch feature, want swarm/alice", "detached HEAD at …"
	Git   string   // what git said
	Fix   []string // shell commands that keep the work and switch back; empty when swarmd cannot tell
}

func (e *OffBranchError) Error() string {
	msg := fmt.Sprintf("worktree %s of agent %s is off its branch (%s), and git cannot switch back: %s", e.Path, e.Agent, e.Where, e.Git)
	if len(e.Fix) > 0 {
		return msg + "; keep the uncommitted work and switch back with: " + strings.Join(e.Fix, " && ") +
			"; then: swarmd start " + e.Agent
	}
	return msg + "; fix that, then: swarmd start " + e.Agent
}

func (e *OffBranchError) Is(target error) bool { return target == ErrOffBranch }

// restoreBranch switches a worktree that a session left on another branch or
// commit back to the agent's branch. The other branch stays as it is;
// commits on a detached HEAD that no branch holds get a branch of their own
// (swarmd-rescue/<agent>/<commit>); uncommitted changes come along, as
// "git checkout" carries them. The caller holds the lock.
func (m *Manager) restoreBranch(ctx context.Context, wt Worktree, in inspection) (Worktree, error) {
	if err := m.plainGitDir(wt.Agent, in.adminDir); err != nil {
		return Worktree{}, err
	}
	kept := in.branch
	if kept == "" && !in.head.IsZero() {
		held, err := m.onSomeBranch(ctx, wt.Path, in.adminDir)
		if err != nil {
			return Worktree{}, fmt.Errorf("restore branch of agent %s: %w", wt.Agent, err)
		}
		if !held {
			kept = rescueBranch(wt.Agent, in.head)
			if _, err := m.gitIn(ctx, wt.Path, in.adminDir, "branch", kept, in.head.String()); err != nil {
				return Worktree{}, fmt.Errorf("restore branch of agent %s: %w", wt.Agent, err)
			}
		}
	}
	if _, err := m.gitIn(ctx, wt.Path, in.adminDir, "checkout", "--quiet", wt.Branch); err != nil {
		if ctx.Err() != nil {
			return Worktree{}, fmt.Errorf("restore branch of agent %s: %w", wt.Agent, err)
		}
		return Worktree{}, m.offBranchError(ctx, wt, in, kept, err)
	}
	tip, _, err := m.branchTip(wt.Agent)
	if err != nil {
		return Worktree{}, err
	}
	wt.Head = tip.String()
	m.log.Warn("a session left the worktree off its branch; switched back",
		zap.String("agent", wt.Agent), zap.String("path", wt.Path), zap.String("was", in.reason),
		zap.String("kept_on", kept), zap.String("head", wt.Head))
	return wt, nil
}

// onSomeBranch reports whether the worktree's HEAD commit is on any branch.
func (m *Manager) onSomeBranch(ctx context.Context, path, adminDir string) (bool, error) {
	out, err := m.gitIn(ctx, path, adminDir, "for-each-ref", "--contains", "HEAD", "--count=1", "--format=%(refname)", "refs/heads/")
	return strings.TrimSpace(out) != "", err
}

func rescueBranch(agent string, h plumbing.Hash) string {
	return "swarmd-rescue/" + agent + "/" + h.String()[:12]
}

// offBranchError explains a refused switch. Uncommitted changes are the
// usual cause; they can always be committed where the session left them
// (on a new branch for a detached HEAD) and the switch then succeeds.
func (m *Manager) offBranchError(ctx context.Context, wt Worktree, in inspection, kept string, gitErr error) error {
	e := &OffBranchError{Agent: wt.Agent, Path: wt.Path, Where: in.reason, Git: gitErr.Error()}
	var gerr *GitError
	if errors.As(gitErr, &gerr) && gerr.Stderr != "" {
		e.Git = oneLine(gerr.Stderr)
	}
	dirty, err := m.dirtyFiles(ctx, wt.Path, in.adminDir)
	if err != nil || len(dirty) == 0 {
		return e
	}
	g := "git -C " + quoteArg(wt.Path)
	park := in.branch
	if park == "" { // a detached HEAD: the work needs a branch to be committed on
		if kept != "" {
			e.Fix = append(e.Fix, g+" checkout -q "+kept)
		} else {
			kept = rescueBranch(wt.Agent, in.head)
			e.Fix = append(e.Fix, g+" checkout -q -b "+kept)
		}
		park = kept
	}
	e.Fix = append(e.Fix, g+" add -A", g+" commit -q -m "+quoteArg("swarmd: uncommitted work left on "+park),
		g+" checkout -q "+wt.Branch)
	return e
}

// quoteArg quotes s for a POSIX shell unless it needs no quoting.
func quoteArg(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ClearStaleLocks removes the lock files git leaves when it is killed (by a
// force stop, or the sweep of an earlier daemon's processes) in the middle
// of a commit: *.lock in the worktree's own git directory (index.lock,
// HEAD.lock, ...) and the lock of the agent's branch. While one is there,
// every git command of the agent's next sessions that writes fails. The
// branch's lock is also removed when the agent has no worktree yet: a
// daemon killed while it created the branch (createBranchRef) leaves it,
// and every later Ensure would find the branch "being created" for ever.
// The caller must know that no process of the agent is alive, nor another
// Manager creating its worktree: a live git's lock is not stale. It
// returns the files it removed.
func (m *Manager) ClearStaleLocks(ctx context.Context, agent string) ([]string, error) {
	if err := checkName(agent); err != nil {
		return nil, err
	}
	// The agent's lock: a checkout in progress holds index.lock legitimately.
	unlockAgent, err := m.agents.lock(ctx, agent)
	if err != nil {
		return nil, fmt.Errorf("clear stale git locks of agent %s: %w", agent, err)
	}
	defer unlockAgent()
	in, err := m.inspect(agent)
	if err != nil {
		return nil, err
	}
	return m.clearLocks(agent, in)
}

// VerifyClean is ClearStaleLocks then Verify, after a session (the same
// caller's promise: no process of the agent is alive), with one look at a
// worktree that is fine: removing lock files changes nothing an
// inspection depends on. A failure to clear is logged, as the Verify
// still decides; the files removed are returned.
func (m *Manager) VerifyClean(ctx context.Context, agent string) (Worktree, []string, error) {
	if err := checkName(agent); err != nil {
		return Worktree{}, nil, err
	}
	unlockAgent, err := m.agents.lock(ctx, agent)
	if err != nil {
		return Worktree{}, nil, fmt.Errorf("verify worktree for agent %s: %w", agent, err)
	}
	in, err := m.inspect(agent)
	var removed []string
	if err == nil {
		if removed, err = m.clearLocks(agent, in); err != nil {
			m.log.Warn("clear stale git locks", zap.String("agent", agent), zap.Error(err))
		} else if in.state == wtOK {
			unlockAgent()
			return Worktree{Agent: agent, Path: m.Path(agent), Branch: m.Branch(agent), Head: in.head.String()}, removed, nil
		}
	}
	unlockAgent()
	wt, err := m.Verify(ctx, agent)
	return wt, removed, err
}

// clearLocks is ClearStaleLocks once the worktree is inspected, under the
// agent's lock.
func (m *Manager) clearLocks(agent string, in inspection) ([]string, error) {
	var removed []string
	remove := func(path string) error {
		err := os.Remove(path)
		if err == nil {
			removed = append(removed, path)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var err error
	switch in.state {
	case wtOK, wtOffBranch:
		if err := m.plainGitDir(agent, in.adminDir); err != nil {
			return nil, err
		}
		err = filepath.WalkDir(in.adminDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".lock") {
				return remove(path)
			}
			return nil
		})
	case wtMissing, wtEmpty, wtIncomplete:
		// No worktree yet, or its creation cut short: only the branch's
		// lock can be the agent's (its creation cut short too).
	default:
		return nil, nil // not a worktree of ours: nothing of the agent's to unlock
	}
	if err == nil {
		err = remove(filepath.Join(m.commonDir, filepath.FromSlash(branchRef(agent).String())+".lock"))
	}
	if err != nil {
		return removed, fmt.Errorf("clear stale git locks of agent %s: %w", agent, err)
	}
	return removed, nil
}

// plainGitDir removes from the git directories of agent's worktree that
// its sandbox writes (adminDir, the worktree's own, and its branch's
// reflog directory) whatever is not a directory or a file of its own:
// git makes nothing else there. git appends a reflog line wherever a
// symbolic link in a reflog's place leads, creating the file, and waits
// for good on a FIFO in the place of the index or a reflog: the daemon's
// git in the worktree (a task line's reset, the switch back to the
// agent's branch) appended, as the daemon and outside the sandbox, to any
// file a link named (a shell's startup file, with a branch name of the
// session's making in the line), or never ended. Called after each
// session and before each git of the daemon's that moves a ref there; the
// caller holds the agent's lock.
func (m *Manager) plainGitDir(agent, adminDir string) error {
	for _, dir := range []string{adminDir, filepath.Join(m.commonDir, "logs", filepath.FromSlash(branchDir(agent)))} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && path == dir {
				return nil
			}
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			if d.Type().IsRegular() {
				fi, err := d.Info()
				if err != nil {
					return err
				}
				// A hard link is a file of somebody else's too.
				if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Nlink == 1 {
					return nil
				}
			}
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			m.log.Warn("removed what a session left in its git directory that git makes none of", zap.String("agent", agent), zap.String("path", path))
			return nil
		})
		if err != nil {
			return fmt.Errorf("check the git directory of agent %s: %w", agent, err)
		}
	}
	return nil
}
