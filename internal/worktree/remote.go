package worktree

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
)

// remoteTimeout bounds one push or fetch: a remote that hangs (a network
// cut, a server that never answers) must not hold the caller forever.
const remoteTimeout = 2 * time.Minute

// FetchedPrefix is where FetchBranch puts what it fetched: a namespace of
// swarmd's own, not refs/heads (this daemon's agents' branches are checked
// out in their worktrees, and git refuses to update a checked-out branch),
// nor refs/remotes (the remote may be a URL, which names no such
// directory). The refs keep the fetched commits from being collected.
const FetchedPrefix = "refs/swarmd/remote/"

// Push force-pushes the agent's branch, swarm/AGENT/work, to remote (a
// remote of the repository or a URL), from the main repository. Force: the
// branch is the agent's own, and a rewritten history (an amend, a reset in
// a session) must replace the remote's. A remote that still has the
// agent's branch of the old layout (swarm/AGENT, a file where the new one
// needs a directory) refuses the push, saying so; it is then pushed again
// with that old branch deleted in the same push.
func (m *Manager) Push(ctx context.Context, agent, remote string) error {
	if err := checkName(agent); err != nil {
		return err
	}
	ref := branchRef(agent).String()
	err := m.push(ctx, remote, "+"+ref+":"+ref)
	old := "refs/heads/" + branchPrefix + agent
	var ge *GitError
	if err == nil || !errors.As(err, &ge) || !strings.Contains(ge.Stderr, "'"+old+"' exists") {
		return err // a push that failed for any other reason is not tried twice
	}
	if m.push(ctx, remote, "+"+ref+":"+ref, ":"+old) == nil {
		m.log.Info("old agent branch deleted on the remote", zap.String("agent", agent), zap.String("remote", remote))
		return nil
	}
	return err
}

// PushBranch pushes branch (refs/heads/BRANCH) to the same name on remote,
// never forced: the remote refuses it, and PushBranch fails, unless the
// push fast-forwards it.
func (m *Manager) PushBranch(ctx context.Context, branch, remote string) error {
	ref := "refs/heads/" + branch
	return m.push(ctx, remote, ref+":"+ref)
}

func (m *Manager) push(ctx context.Context, remote string, refspecs ...string) error {
	if remote == "" {
		return fmt.Errorf("push %s: no remote", refspecs[0])
	}
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	args := append([]string{"push", "--quiet", "--porcelain", remote}, refspecs...)
	if _, err := m.git.runEnv(ctx, m.repo, GitOptions, m.remoteEnv, args...); err != nil {
		return fmt.Errorf("push %s to %s: %w", refspecs[0], remote, err)
	}
	return nil
}

// maxDeletesPerPush bounds the refs one push deletes (its command line).
const maxDeletesPerPush = 500

// PruneRemoteLines deletes from remote the line branches of the tasks done
// says are done with (merged), asked once with every task that has a line
// there, and returns how many it deleted. Every daemon of a swarm pushes
// its sessions' lines there, and a push receives the remote's whole list
// of branches first: kept for good, they made every push of the swarm's
// slower with each task ever merged. Each is deleted at the head the
// listing gave (--force-with-lease), so a line pushed again since stays;
// one another daemon deleted first is no error.
func (m *Manager) PruneRemoteLines(ctx context.Context, remote string, done func(ctx context.Context, tasks []int64) (map[int64]bool, error)) (int, error) {
	if remote == "" {
		return 0, errors.New("prune remote task lines: no remote")
	}
	lctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	out, err := m.git.runEnv(lctx, m.repo, GitOptions, m.remoteEnv, "ls-remote", "--heads", remote, "refs/heads/"+linePrefix+"*")
	cancel()
	if err != nil {
		return 0, fmt.Errorf("prune remote task lines: list %s: %w", remote, err)
	}
	lines, ids := parseLines(out, "refs/heads/"+linePrefix)
	if len(ids) == 0 {
		return 0, nil
	}
	drop, err := done(ctx, ids)
	if err != nil {
		return 0, fmt.Errorf("prune remote task lines: %w", err)
	}
	var leases, specs []string
	deleted := 0
	flush := func() error {
		if len(specs) == 0 {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, remoteTimeout)
		defer cancel()
		args := append(append(append([]string{"push", "--porcelain"}, leases...), remote), specs...)
		out, err := m.git.runEnv(pctx, m.repo, GitOptions, m.remoteEnv, args...)
		leases, specs = leases[:0], specs[:0]
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "-\t") { // deleted
				n++
			}
		}
		deleted += n
		if err != nil && (n == 0 && !strings.Contains(out, "\t[rejected]") || ctx.Err() != nil) {
			return fmt.Errorf("prune remote task lines: push to %s: %w", remote, err)
		}
		return nil // refused at a lease: pushed again, or deleted by another daemon
	}
	for _, l := range lines {
		if !drop[l.task] {
			continue
		}
		leases, specs = append(leases, "--force-with-lease="+l.ref+":"+l.head), append(specs, ":"+l.ref)
		if len(specs) >= maxDeletesPerPush {
			if err := flush(); err != nil {
				return deleted, err
			}
		}
	}
	return deleted, flush()
}

// FetchBranch fetches branch from remote into FetchedPrefix+branch and
// returns the commit it points at there.
func (m *Manager) FetchBranch(ctx context.Context, branch, remote string) (string, error) {
	if remote == "" {
		return "", fmt.Errorf("fetch %s: no remote", branch)
	}
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	dst := FetchedPrefix + branch
	if _, err := m.git.runEnv(ctx, m.repo, GitOptions, m.remoteEnv, "fetch", "--quiet", "--no-tags", remote, "+refs/heads/"+branch+":"+dst); err != nil {
		return "", fmt.Errorf("fetch %s from %s: %w", branch, remote, err)
	}
	out, err := m.git.run(ctx, m.repo, "rev-parse", "--verify", "--quiet", dst+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("fetch %s from %s: read %s: %w", branch, remote, dst, err)
	}
	return strings.TrimSpace(out), nil
}

// HasCommit reports whether the repository holds commit.
func (m *Manager) HasCommit(ctx context.Context, commit string) (bool, error) {
	_, err := m.git.run(ctx, m.repo, "cat-file", "-e", commit+"^{commit}")
	if err == nil {
		return true, nil
	}
	var ge *GitError
	if errors.As(err, &ge) && ge.ExitCode > 0 {
		return false, nil
	}
	return false, fmt.Errorf("look for commit %s: %w", commit, err)
}

// BranchCommit is the commit branch (refs/heads/BRANCH) points at.
func (m *Manager) BranchCommit(ctx context.Context, branch string) (string, error) {
	out, err := m.git.run(ctx, m.repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("read branch %s: %w", branch, err)
	}
	return strings.TrimSpace(out), nil
}

// IsAncestor reports whether commit a is an ancestor of commit b (or b).
func (m *Manager) IsAncestor(ctx context.Context, a, b string) (bool, error) {
	_, err := m.git.run(ctx, m.repo, "merge-base", "--is-ancestor", a, b)
	var ge *GitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ge) && ge.ExitCode == 1:
		return false, nil
	}
	return false, fmt.Errorf("is %s an ancestor of %s: %w", a, b, err)
}

// FastForward moves branch to commit when that only adds commits: with a
// compare-and-swap of the ref (git update-ref NEW OLD) where no working
// tree has the branch checked out, else with git merge --ff-only in the
// one that has it, only if it has no local changes to tracked files: that
// updates its files, and git refuses rather than overwrite anything.
func (m *Manager) FastForward(ctx context.Context, branch, commit string) error {
	old, err := m.BranchCommit(ctx, branch)
	if err != nil {
		return fmt.Errorf("fast-forward %s: %w", branch, err)
	}
	if ok, err := m.IsAncestor(ctx, old, commit); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%s at %s is not an ancestor of %s", branch, old, commit)
		}
		return fmt.Errorf("fast-forward %s: %w", branch, err)
	}
	dir, err := m.checkoutOf(ctx, branch)
	if err != nil {
		return fmt.Errorf("fast-forward %s: %w", branch, err)
	}
	if dir == "" {
		_, err = m.git.run(ctx, m.repo, "update-ref", "-m", "swarmd: fast-forward to the remote's", "refs/heads/"+branch, commit, old)
	} else {
		err = m.checkoutClean(ctx, branch, dir)
		if err == nil {
			_, err = m.git.run(ctx, dir, "merge", "--ff-only", "--quiet", "--no-stat", commit)
		}
	}
	if err != nil {
		return fmt.Errorf("fast-forward %s: %w", branch, err)
	}
	return nil
}

// checkoutClean fails when the checkout at dir, which has branch checked
// out, has local changes to tracked files.
func (m *Manager) checkoutClean(ctx context.Context, branch, dir string) error {
	out, err := m.git.run(ctx, dir, "status", "--porcelain=v1", "--untracked-files=no")
	if err == nil && strings.TrimSpace(out) != "" {
		err = fmt.Errorf("%s is checked out at %s with local changes", branch, dir)
	}
	return err
}

// checkoutOf is the working tree that has branch checked out, "" for none.
// The agents' worktrees are never one: their sandboxes write their HEAD,
// and their .git links too, which git run there would follow to a git
// directory of the sandbox's making.
func (m *Manager) checkoutOf(ctx context.Context, branch string) (string, error) {
	out, err := m.git.run(ctx, m.repo, "worktree", "list", "--porcelain")
	if err != nil {
		return "", err
	}
	var dir string
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(line, "worktree "); ok {
			dir = p
		} else if line == "branch refs/heads/"+branch && !m.managed(dir) {
			return dir, nil
		}
	}
	return "", nil
}

// managed reports whether path is one of the daemon's worktrees (under
// StateDir/worktrees), however the path is spelled.
func (m *Manager) managed(path string) bool {
	return Within(path, m.wtDir) || Within(path, m.realWtDir())
}

// Within reports whether path is dir or below it, by their spelling (no
// link is resolved).
func Within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// realWtDir is wtDir with its symbolic links resolved (git lists worktrees
// by their real paths), wtDir itself if that fails.
func (m *Manager) realWtDir() string {
	if real, err := filepath.EvalSymlinks(m.wtDir); err == nil {
		return real
	}
	return m.wtDir
}

// FirstParent is one commit of a first-parent line: its first parent (""
// for a root commit) and the value of the trailer asked for.
type FirstParent struct{ Commit, Parent, Trailer string }

// FirstParents lists head's first-parent line (head a branch's ref or a
// commit), newest first, down to the first commit that one of not reaches
// (not included), at most max commits (0: all), each with the value of its
// trailer key. First parents only: where a branch's own commits and the
// merges onto it are, not the merged branches' commits. A name in not that
// does not exist is left out: with none, the line is listed down to its
// root, or max.
func (m *Manager) FirstParents(ctx context.Context, head string, not []string, key string, max int) ([]FirstParent, error) {
	args := []string{"log", "-z", "--first-parent", "--ignore-missing",
		"--format=%H%x1f%P%x1f%(trailers:key=" + key + ",valueonly,separator=%x2c)"}
	if max > 0 {
		args = append(args, fmt.Sprintf("--max-count=%d", max))
	}
	// No --end-of-options: past it "--not" would be read as a revision.
	// head and not are the daemon's own names.
	out, err := m.git.run(ctx, m.repo, append(append(args, head, "--not"), not...)...)
	if err != nil {
		return nil, fmt.Errorf("list the commits of %s beyond %s: %w", head, strings.Join(not, ", "), err)
	}
	var cs []FirstParent
	for _, rec := range strings.Split(out, "\x00") {
		f := strings.SplitN(strings.TrimSpace(rec), "\x1f", 3)
		if len(f) != 3 {
			continue
		}
		c := FirstParent{Commit: f[0], Trailer: strings.TrimSpace(f[2])}
		if ps := strings.Fields(f[1]); len(ps) > 0 {
			c.Parent = ps[0]
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// SetAside moves branch back from old to commit (an ancestor of old's, or
// any commit) and keeps old under keep (a ref name), so that nothing is
// lost: a compare-and-swap of the ref where no working tree has the branch
// checked out, else git reset --keep in the one that has it, only if it has
// no local changes to tracked files. A set-aside that fails leaves no ref
// under keep: the caller tries again, under a new name each time.
func (m *Manager) SetAside(ctx context.Context, branch, old, commit, keep string) error {
	fail := func(err error) error { return fmt.Errorf("set %s aside at %s: %w", branch, keep, err) }
	dir, err := m.checkoutOf(ctx, branch)
	if err != nil {
		return fail(err)
	}
	if dir != "" {
		err := m.checkoutClean(ctx, branch, dir)
		if err == nil {
			var head string
			if head, err = m.git.run(ctx, dir, "rev-parse", "--verify", "HEAD"); err == nil && strings.TrimSpace(head) != old {
				err = fmt.Errorf("%s moved to %s meanwhile", branch, strings.TrimSpace(head))
			}
		}
		if err != nil {
			return fail(err)
		}
	}
	if _, err := m.git.run(ctx, m.repo, "update-ref", "-m", "swarmd: set aside", keep, old, ""); err != nil {
		return fail(err)
	}
	if dir == "" {
		_, err = m.git.run(ctx, m.repo, "update-ref", "-m", "swarmd: set aside at "+keep, "refs/heads/"+branch, commit, old)
	} else {
		_, err = m.git.run(ctx, dir, "reset", "--quiet", "--keep", commit)
	}
	if err != nil {
		// Nothing was set aside: no ref says it was.
		if _, derr := m.git.run(ctx, m.repo, "update-ref", "-d", keep, old); derr != nil {
			err = errors.Join(err, derr)
		}
		return fail(err)
	}
	return nil
}
