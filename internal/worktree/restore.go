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
	if err := m.plainRefs(agent); err != nil {
		return nil, err
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
// session's making in the line), or never ended. HEAD may be a link in
// the form git writes a symbolic ref in under core.preferSymlinkRefs
// (git reads it, never follows it): it stops the agent, naming the
// setting (inspect), and stays for the operator to see. Called after each
// session and before each git of the daemon's that moves a ref there; the
// caller holds the agent's lock.
func (m *Manager) plainGitDir(agent, adminDir string) error {
	var fifos fifoHold
	defer fifos.release()
	return m.plainGitDirHolding(agent, adminDir, &fifos)
}

// plainGitDirHolding is plainGitDir that holds the FIFOs it removes open
// in fifos.
func (m *Manager) plainGitDirHolding(agent, adminDir string, fifos *fifoHold) error {
	head := filepath.Join(adminDir, "HEAD")
	// The repositories of the worktree's submodules (git submodule update
	// clones them there): the daemon's git reads none of them (it looks
	// into no submodule), and git clone of a local path makes their
	// objects hard links to the source's, which the rule below took for a
	// session's doing: the submodule lost its objects.
	modules := filepath.Join(adminDir, "modules")
	for _, dir := range []string{adminDir, filepath.Join(m.commonDir, "logs", filepath.FromSlash(branchDir(agent)))} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && path == dir {
				return nil
			}
			if err != nil {
				return err
			}
			if path == modules && d.IsDir() {
				return fs.SkipDir
			}
			return m.removeStrange(agent, path, d, path == head, fifos, "removed what a session left in its git directory that git makes none of")
		})
		if err != nil {
			return fmt.Errorf("check the git directory of agent %s: %w", agent, err)
		}
	}
	return nil
}

// removeStrange removes path, an entry of a git directory a sandbox
// writes, unless it is a directory or a file of its own (a hard link is a
// file of somebody else's too), or, where symref says so, a symbolic link
// whose text git reads as a symbolic ref, never following it. A FIFO is
// opened for writing first and held in fifos (fifoHold).
func (m *Manager) removeStrange(agent, path string, d fs.DirEntry, symref bool, fifos *fifoHold, msg string) error {
	switch t := d.Type(); {
	case t.IsDir():
		return nil
	case t.IsRegular():
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Nlink == 1 {
			return nil
		}
	case t&fs.ModeSymlink != 0 && symref:
		if target, err := os.Readlink(path); err == nil && symrefText(target) {
			return nil
		}
	case t&fs.ModeNamedPipe != 0:
		fifos.open(path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	m.log.Warn(msg, zap.String("agent", agent), zap.String("path", path), zap.String("was", d.Type().String()))
	return nil
}

// fifoHold holds open for writing the FIFOs a scrub removes: a git (the
// operator's, the daemon's for another agent) waiting to open one for
// reading opens it then, and reads its end once the scrub is over and
// they are closed, with nothing left for it to wait on next. A FIFO met
// only through a link is not opened: it may be anybody's.
type fifoHold struct{ fds []int }

func (h *fifoHold) open(path string) {
	if fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0); err == nil {
		h.fds = append(h.fds, fd)
	}
}

func (h *fifoHold) release() {
	for _, fd := range h.fds {
		_ = syscall.Close(fd)
	}
	h.fds = nil
}

// Scrub removes, when a sandbox of agent's (a session, a hook) has ended,
// what it left in the git directories it writes that git would follow out
// of them or wait on (plainRefs, plainGitDir). The next look at the
// worktree does as much, but an agent stopped in its session, or by what
// it left (a FIFO in HEAD's place), or a daemon stopped, looks at it again
// only at its next start, if ever; meanwhile the operator's git gc, git
// log --all or git worktree list, and the daemon's own git for every other
// agent (a switch back to its branch reads every worktree's HEAD), waited
// for good on a FIFO there. A HEAD or a branch that is a symbolic ref
// stays: it stops the agent, naming it. The caller makes sure no process
// of the agent is alive.
func (m *Manager) Scrub(ctx context.Context, agent string) error {
	if err := checkName(agent); err != nil {
		return err
	}
	unlockAgent, err := m.agents.lock(ctx, agent)
	if err != nil {
		return fmt.Errorf("scrub the git directories of agent %s: %w", agent, err)
	}
	defer unlockAgent()
	var fifos fifoHold
	defer fifos.release()
	if err := m.plainRefsHolding(agent, &fifos); err != nil {
		return err
	}
	in, err := m.inspect(agent)
	if err != nil {
		return err
	}
	if in.registered != "" {
		return m.plainGitDirHolding(agent, in.registered, &fifos)
	}
	return nil
}

// plainRefs removes from agent's branch directory (refs/heads/swarm/NAME,
// its sandbox's to write) whatever git would follow out of it or wait on
// when it reads the repository's refs: anything but a directory, a file
// of its own, or a symbolic link in the form git writes a symbolic ref in
// (its text a ref name under refs/, which git reads and never follows). A
// FIFO there held every git that lists the refs (the operator's git gc,
// git log --all, git branch; the daemon's push and fetch) for good; a
// link to one, or to a directory holding one, the same; and a link to any
// other file made git read that file. A branch that is a symbolic ref
// stays: it stops the agent, naming it (inspect). The caller holds the
// agent's lock.
func (m *Manager) plainRefs(agent string) error {
	var fifos fifoHold
	defer fifos.release()
	return m.plainRefsHolding(agent, &fifos)
}

// plainRefsHolding is plainRefs that holds the FIFOs it removes open in
// fifos.
func (m *Manager) plainRefsHolding(agent string, fifos *fifoHold) error {
	dir := filepath.Join(m.commonDir, filepath.FromSlash(branchDir(agent)))
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path == dir {
			return nil
		}
		if err != nil {
			return err
		}
		return m.removeStrange(agent, path, d, true, fifos, "removed what a session left in its branch directory that git would follow or wait on")
	})
	if err != nil {
		return fmt.Errorf("check the branch directory of agent %s: %w", agent, err)
	}
	return nil
}
