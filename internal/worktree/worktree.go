// Package worktree gives every agent its own linked git worktree and branch:
// <state_dir>/worktrees/<agent> on swarm/<agent>.
//
// go-git v5 cannot create linked worktrees, and "git worktree add" costs
// two git processes that read every registered worktree (8–28 ms each,
// serial, since parallel adds on one repository race), so a new worktree
// is written as git writes it (register.go: the branch ref by git's
// lock-file protocol, the registration files of gitrepository-layout(5)).
// Only claiming the branch holds the repository lock; the rest, and the
// checkout (git's own "reset --hard"), run in parallel with other agents',
// under a per-agent lock, and the repository's post-checkout hook runs
// as after "git worktree add". Removal and pruning go through the git CLI.
// Refs, commits and HEAD are read with go-git; dirty checks use "git status
// --porcelain=v2", which is an order of magnitude faster than go-git's
// status on large trees. Status remembers git's answers (statuscache.go,
// memo.go), so a session that changed nothing costs no git process.
package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
)

// Options configures a Manager.
type Options struct {
	Repo     string      // the repository (any directory of its main working tree)
	StateDir string      // absolute; worktrees go in StateDir/worktrees/<agent>
	BaseRef  string      // what new agent branches start from; default "HEAD"
	Log      *zap.Logger // default: no logging
	Git      string      // git binary; default "git" from PATH
	// HookSandbox, when set, wraps the command line of a new worktree's
	// post-checkout hook (run in dir, the worktree of agent) in a
	// sandbox: the hook is the repository's, and with a relative
	// core.hooksPath (husky's) its scripts are files of the main
	// checkout, which merged work changes.
	HookSandbox func(agent, dir string, argv []string) []string
	// RemoteEnv is added to the environment of the pushes and fetches
	// (an ssh that reads no user configuration, where sessions write it).
	RemoteEnv []string
}

// Worktree is an agent's ready worktree.
type Worktree struct {
	Agent  string
	Path   string
	Branch string
	Head   string // commit hash
}

// Manager creates, checks and removes agents' worktrees in one repository.
// It is safe for concurrent use.
type Manager struct {
	git       *gitCLI
	log       *zap.Logger
	repo      string                                          // top level of the working tree (real path)
	commonDir string                                          // the git directory shared by all worktrees (real path)
	hook      string                                          // where the post-checkout hook would be
	hookWrap  func(agent, dir string, argv []string) []string // Options.HookSandbox
	remoteEnv []string                                        // Options.RemoteEnv
	stateDir  string
	wtDir     string // stateDir/worktrees
	baseRef   string
	base      plumbing.Hash
	baseEmpty bool // base is a commit of the empty tree
	reftable  bool // the repository keeps its refs in a reftable, not files

	// sem serialises worktree operations within this process; flockDir on
	// commonDir extends that to other Managers and processes.
	sem    chan struct{}
	agents agentLocks // one agent's operations, one at a time
	// busy bounds the git processes run outside the repository lock
	// (branch creation, checkout): more than the cores only adds threads
	// blocked in wait and disk contention.
	busy chan struct{}

	counts      countMemo    // rev-list counts by commit pair
	inspections inspectCache // worktrees found fine, by agent
	regHeads    regHeadCache // registrations' HEADs, for scanRegistrations
	regIndex    regIndex     // the registrations by branch and path; under the repository lock
	statuses    statusCache  // the last git status answer per worktree
}

// Open validates the repository and resolves BaseRef once to the commit new
// branches start from. When StateDir is inside the repository it is added to
// .git/info/exclude.
func Open(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Repo == "" {
		return nil, errors.New("open worktree manager: no repository given")
	}
	if !filepath.IsAbs(opts.StateDir) {
		return nil, fmt.Errorf("open worktree manager: state dir %q is not an absolute path", opts.StateDir)
	}
	if opts.BaseRef == "" {
		opts.BaseRef = "HEAD"
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	g, version, err := newGitCLI(ctx, opts.Git)
	if err != nil {
		return nil, err
	}
	repoPath, err := filepath.Abs(opts.Repo)
	if err != nil {
		return nil, fmt.Errorf("open worktree manager: %w", err)
	}
	top, commonDir, hook, err := locateRepo(ctx, g, repoPath)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		git:       g,
		log:       opts.Log,
		repo:      top,
		commonDir: commonDir,
		hook:      hook,
		hookWrap:  opts.HookSandbox,
		remoteEnv: opts.RemoteEnv,
		stateDir:  filepath.Clean(opts.StateDir),
		wtDir:     filepath.Join(filepath.Clean(opts.StateDir), "worktrees"),
		baseRef:   opts.BaseRef,
		sem:       make(chan struct{}, 1),
		busy:      make(chan struct{}, 2*runtime.GOMAXPROCS(0)),
	}
	r, err := m.openRepo()
	if err != nil {
		return nil, err
	}
	if m.base, err = resolveBase(r, top, opts.BaseRef); err != nil {
		return nil, err
	}
	if m.baseEmpty, err = m.emptyTree(m.base); err != nil {
		return nil, err
	}
	// Refs in a reftable are not files: readRef leaves them to go-git.
	if _, err := os.Stat(filepath.Join(commonDir, "reftable")); err == nil {
		m.reftable = true
	}
	if err := m.excludeStateDir(ctx); err != nil {
		return nil, err
	}
	if err := m.migrateBranches(ctx); err != nil {
		return nil, err
	}
	m.log.Info("worktree manager ready", zap.String("repo", top), zap.String("base_ref", opts.BaseRef),
		zap.String("base", m.base.String()), zap.String("git", version))
	return m, nil
}

// locateRepo finds the top level and the common git directory of the
// repository at path, refusing bare repositories.
func locateRepo(ctx context.Context, g *gitCLI, path string) (top, commonDir, hook string, err error) {
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return "", "", "", fmt.Errorf("%s is %w: no such directory", path, ErrNotRepo)
	}
	// --git-path follows core.hooksPath (the repository's own: not GitOptions).
	out, err := g.runWith(ctx, path, []string{"-c", "safe.directory=*"}, "rev-parse", "--is-bare-repository", "--is-inside-work-tree", "--git-common-dir",
		"--git-path", "hooks/post-checkout")
	if err != nil {
		var gerr *GitError
		if errors.As(err, &gerr) && strings.Contains(gerr.Stderr, "not a git repository") {
			return "", "", "", fmt.Errorf("%s is %w", path, ErrNotRepo)
		}
		return "", "", "", fmt.Errorf("inspect repository %s: %w", path, err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		return "", "", "", fmt.Errorf("inspect repository %s: unexpected rev-parse output %q", path, out)
	}
	if lines[0] == "true" {
		return "", "", "", fmt.Errorf("%s is a %w: agents need a working tree", path, ErrBareRepo)
	}
	if lines[1] != "true" {
		return "", "", "", fmt.Errorf("%s is %w: it is inside a .git directory", path, ErrNotRepo)
	}
	commonDir = lines[2]
	if !filepath.IsAbs(commonDir) {
		commonDir = filepath.Join(path, commonDir)
	}
	if commonDir, err = filepath.EvalSymlinks(commonDir); err != nil {
		return "", "", "", fmt.Errorf("inspect repository %s: %w", path, err)
	}
	if hook = lines[3]; !filepath.IsAbs(hook) {
		hook = filepath.Join(path, hook)
	}
	out, err = g.run(ctx, path, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", "", "", fmt.Errorf("inspect repository %s: %w", path, err)
	}
	return strings.TrimSpace(out), commonDir, hook, nil
}

// openRepo opens the repository with go-git. A fresh handle per operation:
// go-git loads the pack index once per handle and would not see packs that
// agents' git commands (gc, fetch) write later, and a handle is not safe for
// concurrent use.
func (m *Manager) openRepo() (*git.Repository, error) {
	r, err := git.PlainOpenWithOptions(m.repo, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if err != nil {
		return nil, fmt.Errorf("open repository %s: %w", m.repo, err)
	}
	return r, nil
}

// resolveBase resolves baseRef to a commit. For HEAD it insists on a branch
// with commits: a detached HEAD is usually an accident (a rebase in
// progress), and agents would then start from an arbitrary commit.
func resolveBase(r *git.Repository, repo, baseRef string) (plumbing.Hash, error) {
	if baseRef == "HEAD" {
		head, err := r.Reference(plumbing.HEAD, false)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("read HEAD of %s: %w", repo, err)
		}
		if head.Type() == plumbing.HashReference {
			return plumbing.ZeroHash, fmt.Errorf("%s has a %w at %s: check out a branch or set base_ref",
				repo, ErrDetachedHead, head.Hash().String()[:12])
		}
		ref, err := r.Reference(head.Target(), true)
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			if !hasCommits(r) {
				return plumbing.ZeroHash, fmt.Errorf("%s has %w yet: make a first commit", repo, ErrNoCommits)
			}
			return plumbing.ZeroHash, fmt.Errorf("%s has an %w: branch %s has no commits yet; check out a branch with commits or set base_ref",
				repo, ErrUnbornHead, head.Target().Short())
		}
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("resolve HEAD of %s: %w", repo, err)
		}
		if _, err := r.CommitObject(ref.Hash()); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("resolve HEAD of %s: %w", repo, err)
		}
		return ref.Hash(), nil
	}
	if !hasCommits(r) {
		return plumbing.ZeroHash, fmt.Errorf("%s has %w yet: make a first commit", repo, ErrNoCommits)
	}
	h, err := r.ResolveRevision(plumbing.Revision(baseRef))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%w: %q in %s: set base_ref to a branch, tag or commit", ErrBaseRefNotFound, baseRef, repo)
	}
	return *h, nil
}

// hasCommits reports whether any ref (or a detached HEAD) points at a commit.
func hasCommits(r *git.Repository) bool {
	refs, err := r.References()
	if err != nil {
		return false
	}
	defer refs.Close()
	found := errors.New("found")
	err = refs.ForEach(func(ref *plumbing.Reference) error {
		if ref.Type() == plumbing.HashReference {
			return found
		}
		return nil
	})
	return err == found
}

// BaseCommit is the commit BaseRef resolved to at Open.
func (m *Manager) BaseCommit() string { return m.base.String() }

// CommonDir is the repository's git directory.
func (m *Manager) CommonDir() string { return m.commonDir }

// Path is the agent's worktree directory.
func (m *Manager) Path(agent string) string { return filepath.Join(m.wtDir, agent) }

// Branch is the agent's branch: swarm/AGENT/work.
func (m *Manager) Branch(agent string) string { return branchName(agent) }

// checkName refuses anything but agent.NamePattern. Names are validated
// with the config too; this is defence in depth, since the name becomes a
// path and a ref.
func checkName(name string) error {
	if !agent.ValidName(name) {
		return fmt.Errorf("%w %q: want %s", ErrBadName, name, agent.NamePattern)
	}
	return nil
}

// lock serialises worktree operations on the repository.
func (m *Manager) lock(ctx context.Context) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	unlockFile, err := flockDir(ctx, m.commonDir)
	if err != nil {
		<-m.sem
		return nil, err
	}
	return func() { unlockFile(); <-m.sem }, nil
}

// Ensure makes the agent's worktree ready. An existing valid worktree is
// reused as it is (branch, commits, uncommitted changes untouched). One that
// a session switched to another branch or commit is switched back to the
// agent's branch, keeping that branch and carrying uncommitted changes
// along; when they block the switch, an *OffBranchError says how to keep
// them. If its
// directory is gone, the stale registration is pruned and the worktree is
// recreated from the agent's branch; without a branch, the branch is created
// from the base commit. A directory that is not this agent's worktree is left
// alone and reported as ErrForeignDir.
func (m *Manager) Ensure(ctx context.Context, agent string) (Worktree, error) {
	return m.ensure(ctx, agent, false)
}

// Verify checks, between sessions, that the agent's worktree exists and is on
// its branch. A deleted directory is recreated from the branch, and a
// worktree switched to another branch or commit is switched back (as by
// Ensure); anything else wrong (the branch deleted) is an error.
func (m *Manager) Verify(ctx context.Context, agent string) (Worktree, error) {
	return m.ensure(ctx, agent, true)
}

func (m *Manager) ensure(ctx context.Context, agent string, verify bool) (Worktree, error) {
	op := "ensure"
	if verify {
		op = "verify"
	}
	if err := checkName(agent); err != nil {
		return Worktree{}, err
	}
	unlockAgent, err := m.agents.lock(ctx, agent)
	if err != nil {
		return Worktree{}, fmt.Errorf("%s worktree for agent %s: %w", op, agent, err)
	}
	defer unlockAgent()
	if wt, ok := m.ready(agent); ok {
		return wt, nil
	}
	wt, created, seen, err := m.createNew(ctx, agent, verify)
	if err != nil {
		return Worktree{}, err
	}
	if created == nil {
		unlock, err := m.lock(ctx)
		if err != nil {
			return Worktree{}, fmt.Errorf("%s worktree for agent %s: %w", op, agent, err)
		}
		wt, created, err = m.ensureLocked(ctx, agent, verify, seen)
		unlock()
		if err != nil || created == nil {
			return wt, err
		}
	}
	// The rest runs without the repository lock, in parallel with other
	// agents'; the agent's lock keeps this agent's callers out until it
	// is done, and the registration's "locked" file keeps git's prune away.
	if err := m.link(wt, created.adminDir); err != nil {
		unclaim(wt, created.adminDir)
		return Worktree{}, fmt.Errorf("create worktree for agent %s: %w", agent, err)
	}
	if err := m.checkout(ctx, wt, created.adminDir); err != nil {
		return Worktree{}, errors.Join(fmt.Errorf("check out worktree for agent %s: %w", agent, err), m.discard(ctx, wt))
	}
	if err := unlockRegistration(created.adminDir); err != nil {
		return Worktree{}, fmt.Errorf("create worktree for agent %s: %w", agent, err)
	}
	if verify {
		m.log.Warn("worktree directory was missing; recreated from its branch",
			zap.String("agent", agent), zap.String("path", wt.Path), zap.String("head", wt.Head))
	} else {
		m.log.Info("worktree created", zap.String("agent", agent), zap.String("path", wt.Path),
			zap.String("branch", wt.Branch), zap.Bool("new_branch", created.newBranch), zap.String("head", wt.Head))
	}
	// As with "git worktree add": the worktree stays when the hook fails.
	if err := m.postCheckout(ctx, wt); err != nil {
		return Worktree{}, fmt.Errorf("create worktree for agent %s: post-checkout hook: %w", agent, err)
	}
	return wt, nil
}

// ready is the fast path of Ensure and Verify: a worktree that is fine
// needs no repository lock (the common case, after every session), since
// nothing is changed. Anything else is looked at again under the lock.
// The caller holds the agent's lock: a worktree being checked out looks fine.
func (m *Manager) ready(agent string) (Worktree, bool) {
	in, err := m.inspect(agent)
	if err != nil || in.state != wtOK {
		return Worktree{}, false
	}
	return Worktree{Agent: agent, Path: m.Path(agent), Branch: m.Branch(agent), Head: in.head.String()}, true
}

// creation says that ensureLocked registered a new worktree, not checked
// out yet and still locked.
type creation struct {
	newBranch bool
	adminDir  string
}

// ensureLocked is ensure under the repository lock. seen is when createNew
// found the agent's branch existing (zero: it did not look).
func (m *Manager) ensureLocked(ctx context.Context, agent string, verify bool, seen time.Time) (Worktree, *creation, error) {
	wt := Worktree{Agent: agent, Path: m.Path(agent), Branch: m.Branch(agent)}
	in, err := m.inspect(agent)
	if err != nil {
		return Worktree{}, nil, err
	}
	switch in.state {
	case wtOK:
		wt.Head = in.head.String()
		return wt, nil, nil
	case wtOffBranch:
		wt, err := m.restoreBranch(ctx, wt, in)
		return wt, nil, err
	case wtForeign:
		return Worktree{}, nil, &ForeignDirError{Agent: agent, Path: wt.Path, Reason: in.reason, Fix: in.fix}
	case wtIncomplete:
		if err := m.removeIncomplete(agent, in); err != nil {
			return Worktree{}, nil, err
		}
	}

	tip, hasBranch, err := m.branchTip(agent)
	if err != nil {
		return Worktree{}, nil, err
	}
	if verify && !hasBranch {
		return Worktree{}, nil, fmt.Errorf("verify worktree for agent %s: %w: %s was deleted along with %s",
			agent, ErrBranchMissing, wt.Branch, wt.Path)
	}
	if err := ctx.Err(); err != nil {
		return Worktree{}, nil, fmt.Errorf("ensure worktree for agent %s: %w", agent, err)
	}
	c := &creation{}
	if !hasBranch {
		seen = time.Time{} // gone since createNew saw it, or not looked at
		switch err := m.createBranchRef(agent, m.base); {
		case err == nil:
			c.newBranch, tip = true, m.base
		case errors.Is(err, errRefExists): // created by another git since
			if tip, hasBranch, err = m.branchTip(agent); err != nil || !hasBranch {
				return Worktree{}, nil, fmt.Errorf("create branch %s: another git is creating it", wt.Branch)
			}
		default:
			return Worktree{}, nil, err
		}
	}
	// A branch created just now, under the repository lock that every
	// Manager takes to register a worktree, is checked out nowhere: the
	// ramp of a new swarm reads no registrations.
	if !c.newBranch {
		if seen.IsZero() { // the branch was seen existing only now
			seen = time.Now()
		}
		if err := m.clearWay(ctx, agent, seen); err != nil {
			return Worktree{}, nil, fmt.Errorf("create worktree for agent %s: %w", agent, err)
		}
	}
	wt.Head = tip.String()
	if c.adminDir, err = m.claim(wt); err != nil {
		return Worktree{}, nil, fmt.Errorf("create worktree for agent %s: %w", agent, err)
	}
	return wt, c, nil
}

// clearWay removes what would keep the agent's branch from being checked
// out at its path (which holds no worktree): leftovers of a creation cut
// short, and a stale registration holding the branch (pruned as git's gc
// would). A branch checked out in a live worktree is an error, as with git.
// seen is when the branch was found existing (see scanRegistrations).
func (m *Manager) clearWay(ctx context.Context, agent string, seen time.Time) error {
	s, err := m.scanRegistrations(agent, seen)
	if err != nil {
		return err
	}
	for _, dir := range s.leftovers {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove stale registration: %w", err)
		}
	}
	if s.stale {
		if _, err := m.git.run(ctx, m.repo, "worktree", "prune"); err != nil {
			return fmt.Errorf("prune stale worktrees: %w", err)
		}
		m.log.Info("pruned stale worktree registrations", zap.String("agent", agent))
		m.regIndex.forget()
		if s, err = m.scanRegistrations(agent, seen); err != nil {
			return err
		}
	}
	if s.checkedOut != "" {
		return fmt.Errorf("%w: %s is already checked out at %s", ErrCheckedOut, m.Branch(agent), s.checkedOut)
	}
	if s.stale {
		return fmt.Errorf("%w: %s is held by a stale registration that git did not prune", ErrCheckedOut, m.Branch(agent))
	}
	return nil
}

// Head is the HEAD commit of the agent's worktree.
func (m *Manager) Head(ctx context.Context, agent string) (string, error) {
	if err := checkName(agent); err != nil {
		return "", err
	}
	in, err := m.inspect(agent)
	if err != nil {
		return "", err
	}
	switch in.state {
	case wtOK:
		return in.head.String(), nil
	case wtOffBranch:
		// What the session left checked out: its commits count.
		if in.head.IsZero() {
			return "", fmt.Errorf("read HEAD of agent %s: %s has no commits yet", agent, in.branch)
		}
		return in.head.String(), nil
	case wtForeign:
		return "", &ForeignDirError{Agent: agent, Path: m.Path(agent), Reason: in.reason, Fix: in.fix}
	default:
		return "", fmt.Errorf("read HEAD of agent %s: %w at %s", agent, ErrNoWorktree, m.Path(agent))
	}
}

// branchTip is the commit the agent's branch points at, if it exists.
func (m *Manager) branchTip(agent string) (plumbing.Hash, bool, error) {
	switch h, st := m.readRef(branchRef(agent)); st {
	case refFound:
		return h, true, nil
	case refMissing:
		return plumbing.ZeroHash, false, nil
	case refSymbolic:
		return plumbing.ZeroHash, false, fmt.Errorf("read branch %s: a symbolic ref or not a file, not a branch of its own", m.Branch(agent))
	}
	r, err := m.openRepo()
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	ref, err := r.Reference(branchRef(agent), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, false, nil
	}
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("read branch %s: %w", m.Branch(agent), err)
	}
	return ref.Hash(), true, nil
}

// excludeStateDir adds the state dir to info/exclude once, so that the
// worktrees and the database inside it do not show up as untracked files.
func (m *Manager) excludeStateDir(ctx context.Context) error {
	rel, err := filepath.Rel(m.repo, realPathLoose(m.stateDir))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil // outside the working tree: nothing to exclude
	}
	pattern := "/" + filepath.ToSlash(rel) + "/"

	unlock, err := m.lock(ctx)
	if err != nil {
		return fmt.Errorf("exclude state dir: %w", err)
	}
	defer unlock()
	path := filepath.Join(m.commonDir, "info", "exclude")
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("exclude state dir: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == pattern || line == strings.TrimSuffix(pattern, "/") {
			return nil
		}
	}
	var add []byte
	if len(data) > 0 && data[len(data)-1] != '\n' {
		add = append(add, '\n')
	}
	add = append(add, "# swarmd state directory\n"+pattern+"\n"...)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("exclude state dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("exclude state dir: %w", err)
	}
	if _, err := f.Write(add); err != nil {
		f.Close()
		return fmt.Errorf("exclude state dir: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("exclude state dir: %w", err)
	}
	m.log.Info("state dir added to git exclude", zap.String("pattern", pattern), zap.String("file", path))
	return nil
}

// samePath reports whether a and b name the same place, comparing them as
// written first: what git and claim write are real paths, and resolving
// symlinks costs a system call per path component.
func samePath(a, b string) bool {
	return a == b || realPathLoose(a) == realPathLoose(b)
}

// realPathLoose resolves symlinks in the longest existing prefix of p, so that
// paths that do not exist yet compare with git's real paths.
func realPathLoose(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p
	}
	return filepath.Join(realPathLoose(parent), filepath.Base(p))
}
