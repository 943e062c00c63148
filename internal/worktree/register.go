package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"go.uber.org/zap"
)

// A new worktree is made the way "git worktree add" makes one, without its
// processes (gitrepository-layout(5) documents every file written here):
// the branch ref is created with git's lock-file protocol, the registration
// is worktrees/<id>/{gitdir,commondir,HEAD} plus the worktree's .git file,
// kept "locked" (as git does) until the files are checked out, so that no
// "git worktree prune" takes it for a stale one. Nothing here needs the
// repository lock: the registration directory is claimed by mkdir, the ref
// by its .lock file, so several agents' worktrees are created at once.
// Two git processes per worktree ("git worktree add" and the "git
// update-ref" it runs) cost 8–28 ms each, and made the ramp of 200 agents
// take seconds.

// zeroOID is what git passes a post-checkout hook as the previous HEAD of
// a new worktree.
const zeroOID = "0000000000000000000000000000000000000000"

// initializing is what git (and register) write in a new worktree's
// "locked" file until its checkout is done.
const initializing = "initializing"

// errRefExists says that the branch was created by someone else first.
var errRefExists = errors.New("ref exists")

// createBranchRef creates the agent's branch at commit h, failing with
// errRefExists when the branch exists (loose or packed) or is being created.
func (m *Manager) createBranchRef(agent string, h plumbing.Hash) error {
	name := branchRef(agent)
	path := filepath.Join(m.commonDir, filepath.FromSlash(name.String()))
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return fmt.Errorf("create branch %s: %w", name.Short(), err)
	}
	lock := path + ".lock"
	f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if errors.Is(err, fs.ErrExist) {
		return errRefExists // another git is writing it
	}
	if err != nil {
		return fmt.Errorf("create branch %s: %w", name.Short(), err)
	}
	_, werr := f.WriteString(h.String() + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(lock)
		return fmt.Errorf("create branch %s: %w", name.Short(), werr)
	}
	// Under the lock (git's ref transaction checks the old value the same
	// way): the ref must not exist, packed refs included.
	if _, has, err := m.branchTip(agent); err != nil || has {
		os.Remove(lock)
		if err != nil {
			return err
		}
		return errRefExists
	}
	if err := os.Rename(lock, path); err != nil {
		os.Remove(lock)
		return fmt.Errorf("create branch %s: %w", name.Short(), err)
	}
	return nil
}

// regScan is what the registrations say about one agent's worktree.
type regScan struct {
	checkedOut string   // a live worktree (or the main one) with the agent's branch checked out
	stale      bool     // a registration of another path holding the branch whose directory is gone
	leftovers  []string // admin dirs registered for the agent's path, which has no .git: a creation cut short
}

// regIndex is one reading of every registration, shared by the agents
// that ask after it began: which registrations hold which branch, and
// which are of which path. An agent whose branch exists looks for what
// would stop it being checked out at its path, as git does; each reading
// its own made a start of n agents over existing branches (a state dir
// deleted, or a new machine) read n registrations n times, under the
// repository lock. The index only narrows where to look: every
// registration it names is read again, so one removed or switched since
// is not counted. What it cannot show is a registration made or switched
// after its reading began, so it answers only an agent that saw its branch
// existing before that (see scanRegistrations). It is used under the
// repository lock.
type regIndex struct {
	taken  time.Time           // when the reading began; zero: none, or not to be trusted
	byHead map[string][]string // a registration's HEAD ("ref: refs/heads/…") -> admin dirs
	byBase map[string][]string // the base name of the worktree directory in gitdir -> admin dirs
	looked int                 // registrations looked at, readings and agents' (tests count them)
}

// read reads every registration; a newer reading replaces an older.
func (x *regIndex) read(m *Manager) error {
	taken := time.Now()
	x.taken = time.Time{}
	x.byHead, x.byBase = map[string][]string{}, map[string][]string{}
	root := filepath.Join(m.commonDir, "worktrees")
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		x.taken = taken
		return nil
	}
	if err != nil {
		return fmt.Errorf("list worktree registrations: %w", err)
	}
	var buf [smallFile]byte
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		x.looked++
		dir := filepath.Join(root, e.Name())
		if head, ok := m.regHeads.read(filepath.Join(dir, "HEAD")); ok {
			x.byHead[head] = append(x.byHead[head], dir)
		}
		// A registration being written by a git (or claim) may have no
		// gitdir yet: indexed by HEAD alone, it is read again when it
		// can matter.
		if gitdir, err := readSmall(filepath.Join(dir, "gitdir"), &buf); err == nil {
			base := filepath.Base(filepath.Dir(strings.TrimSpace(string(gitdir))))
			x.byBase[base] = append(x.byBase[base], dir)
		}
	}
	x.taken = taken
	return nil
}

// forget makes the next scan read every registration again: after a
// "git worktree prune".
func (x *regIndex) forget() { x.taken = time.Time{} }

// scanRegistrations looks through the registrations for what would stop
// the agent's branch being checked out at its path: git refuses a branch
// checked out in another worktree, and so does this. since is when the
// caller saw the branch existing: a registration of another Manager
// holding the branch was made before the branch was created (createNew),
// so a reading of the registrations begun after since shows it, and so
// does it show every change made before the caller's Ensure. Agents that
// queue for the repository lock at a start share one reading. The
// registrations in exclude (the caller's own claim) are passed over.
// The caller holds the repository lock.
func (m *Manager) scanRegistrations(agent string, since time.Time, exclude ...string) (regScan, error) {
	var s regScan
	want := "ref: " + branchRef(agent).String()
	if head, err := os.ReadFile(filepath.Join(m.commonDir, "HEAD")); err == nil && strings.TrimSpace(string(head)) == want {
		s.checkedOut = m.repo
	}
	x := &m.regIndex
	if x.taken.IsZero() || x.taken.Before(since) {
		if err := x.read(m); err != nil {
			return s, err
		}
	}
	// The candidates: registrations that held the branch, and those of a
	// directory named after the agent (its path, or another's of that
	// name), each once.
	var dirs []string
	for _, dir := range append(slices.Clip(x.byHead[want]), x.byBase[agent]...) {
		if !slices.Contains(dirs, dir) && !slices.Contains(exclude, dir) {
			dirs = append(dirs, dir)
		}
	}
	ours := filepath.Join(m.Path(agent), ".git")
	var buf [smallFile]byte
	for _, dir := range dirs {
		x.looked++
		head, ok := m.regHeads.read(filepath.Join(dir, "HEAD"))
		holds := ok && head == want
		// git (and claim) name a registration after its directory, so
		// one of the agent's path is named after the agent.
		if !holds && !strings.HasPrefix(filepath.Base(dir), agent) {
			continue
		}
		gitdir, err := readSmall(filepath.Join(dir, "gitdir"), &buf)
		if err != nil {
			continue // gone since, being written by a git, or broken: not ours to judge
		}
		dotGit := strings.TrimSpace(string(gitdir))
		if filepath.Base(filepath.Dir(dotGit)) == agent && samePath(dotGit, ours) {
			s.leftovers = append(s.leftovers, dir)
			continue
		}
		if !holds {
			continue
		}
		if _, err := os.Stat(dotGit); errors.Is(err, fs.ErrNotExist) {
			if _, err := os.Stat(filepath.Join(dir, "locked")); err != nil {
				s.stale = true
				continue
			}
		}
		s.checkedOut = filepath.Dir(dotGit)
	}
	return s, nil
}

// regHeadCache remembers what registrations' HEAD files say, by their
// stat data, so that a reading of every registration (regIndex) costs an
// lstat where nothing changed. git replaces HEAD by renaming a new file
// into place, which changes the stat data; a HEAD that changed too
// recently for it to show a later change is not remembered.
type regHeadCache struct {
	mu    sync.Mutex
	heads map[string]regHead // by path
}

type regHead struct {
	st   stamp
	head string
}

// read is the trimmed content of the HEAD file at path, false when it
// cannot be read.
func (c *regHeadCache) read(path string) (string, bool) {
	start := time.Now()
	st, err := stampOf(path)
	if err != nil || st == (stamp{}) {
		c.mu.Lock()
		delete(c.heads, path) // a registration gone: no entry kept for it
		c.mu.Unlock()
		return "", false
	}
	c.mu.Lock()
	e, hit := c.heads[path]
	c.mu.Unlock()
	if hit && e.st == st {
		return e.head, true
	}
	var buf [smallFile]byte
	b, err := readSmallFile(path, &buf) // a sandbox writes HEAD: never wait on it
	if err != nil {
		return "", false
	}
	head := strings.TrimSpace(string(b))
	if !st.recent(start) {
		c.mu.Lock()
		if c.heads == nil {
			c.heads = map[string]regHead{}
		}
		c.heads[path] = regHead{st: st, head: head}
		c.mu.Unlock()
	}
	return head, true
}

// createNew begins the worktree of an agent that has neither worktree nor
// branch (a new agent: the whole ramp of a new swarm) without the
// repository lock: the registration is claimed first, then the branch is
// created; whoever creates the branch owns it, and had claimed it before,
// so a Manager that finds the branch existing and scans the registrations
// (under the lock) sees that claim. A loser of the race for the branch
// does the same. It returns a nil creation, and no error, when the agent
// has a branch or its path holds something: ensureLocked deals with that.
//
// seen is when the agent's branch was found existing, zero when it was not
// looked at: ensureLocked's scan of the registrations may then use a
// reading begun after it (scanRegistrations).
func (m *Manager) createNew(ctx context.Context, agent string, verify bool) (_ Worktree, _ *creation, seen time.Time, _ error) {
	if verify {
		return Worktree{}, nil, seen, nil
	}
	in, err := m.inspect(agent)
	if err != nil {
		return Worktree{}, nil, seen, err
	}
	switch in.state {
	case wtMissing, wtEmpty:
	case wtIncomplete:
		if err := m.removeIncomplete(agent, in); err != nil {
			return Worktree{}, nil, seen, err
		}
	default:
		return Worktree{}, nil, seen, nil
	}
	if _, has, err := m.branchTip(agent); err != nil || has {
		if has {
			seen = time.Now()
		}
		return Worktree{}, nil, seen, err
	}
	if err := ctx.Err(); err != nil {
		return Worktree{}, nil, seen, fmt.Errorf("ensure worktree for agent %s: %w", agent, err)
	}
	// Each file operation blocks a thread: a bound on how many run at
	// once keeps a ramp of 1000 agents from costing hundreds of them.
	done, err := m.acquireBusy(ctx)
	if err != nil {
		return Worktree{}, nil, seen, fmt.Errorf("ensure worktree for agent %s: %w", agent, err)
	}
	defer done()
	wt := Worktree{Agent: agent, Path: m.Path(agent), Branch: m.Branch(agent), Head: m.base.String()}
	c := &creation{newBranch: true}
	if c.adminDir, err = m.claim(wt); err != nil {
		return Worktree{}, nil, seen, fmt.Errorf("create worktree for agent %s: %w", agent, err)
	}
	err = m.createBranchRef(agent, m.base)
	if errors.Is(err, errRefExists) {
		c.newBranch = false
		wt.Head, err = m.claimExisting(ctx, agent, c.adminDir, time.Now())
	}
	if err != nil {
		os.RemoveAll(c.adminDir)
		return Worktree{}, nil, seen, fmt.Errorf("create worktree for agent %s: %w", agent, err)
	}
	return wt, c, seen, nil
}

// claimExisting keeps a claim on a branch that another git created first,
// if the branch is checked out nowhere else (as ensureLocked checks an
// existing branch, under the repository lock), and returns its tip. seen
// is when the branch was found existing.
func (m *Manager) claimExisting(ctx context.Context, agent, adminDir string, seen time.Time) (string, error) {
	unlock, err := m.lock(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	s, err := m.scanRegistrations(agent, seen, adminDir)
	if err != nil {
		return "", err
	}
	if s.checkedOut != "" {
		return "", fmt.Errorf("%w: %s is already checked out at %s", ErrCheckedOut, m.Branch(agent), s.checkedOut)
	}
	tip, has, err := m.branchTip(agent)
	if err != nil {
		return "", err
	}
	if !has {
		return "", fmt.Errorf("create branch %s: another git is creating it", m.Branch(agent))
	}
	return tip.String(), nil
}

// claim registers the agent's path as a linked worktree on its branch:
// what another Manager's scanRegistrations reads (gitdir, HEAD), in a
// registration locked "initializing", as git does, until the checkout is
// done. The rest is written by link. It returns the registration's admin
// dir.
func (m *Manager) claim(wt Worktree) (adminDir string, err error) {
	root := filepath.Join(m.commonDir, "worktrees")
	if err := os.MkdirAll(root, 0o777); err != nil {
		return "", err
	}
	// git names the registration after the directory, with a number
	// appended while the name is taken.
	for i := 0; ; i++ {
		adminDir = filepath.Join(root, wt.Agent)
		if i > 0 {
			adminDir += strconv.Itoa(i)
		}
		err := os.Mkdir(adminDir, 0o777)
		if errors.Is(err, fs.ErrExist) && m.leftover(adminDir, wt) {
			// A creation of this worktree cut short (the path has no
			// .git): its registration goes, its name is reused.
			if err = os.RemoveAll(adminDir); err == nil {
				err = os.Mkdir(adminDir, 0o777)
			}
		}
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || i >= 1000 {
			return "", err
		}
	}
	for _, f := range [][2]string{
		{"locked", initializing},
		{"HEAD", "ref: " + branchRef(wt.Agent).String()},
		{"gitdir", filepath.Join(realPathLoose(wt.Path), ".git")}, // real, as git writes it
	} {
		if err := os.WriteFile(filepath.Join(adminDir, f[0]), []byte(f[1]+"\n"), 0o666); err != nil {
			os.RemoveAll(adminDir)
			return "", err
		}
	}
	return adminDir, nil
}

// leftover reports whether the registration in adminDir is one of the
// worktree's path, which holds no worktree.
func (m *Manager) leftover(adminDir string, wt Worktree) bool {
	gitdir, err := os.ReadFile(filepath.Join(adminDir, "gitdir"))
	if err != nil {
		return false
	}
	dotGit := filepath.Join(wt.Path, ".git")
	if !samePath(strings.TrimSpace(string(gitdir)), dotGit) {
		return false
	}
	_, err = os.Lstat(dotGit)
	return errors.Is(err, fs.ErrNotExist)
}

// link finishes a registration that claim began: its commondir, and the
// worktree's .git file, written last: until it exists the path holds no
// worktree, and a creation cut short before is found by scanRegistrations
// as leftovers. The path is missing or an empty directory.
func (m *Manager) link(wt Worktree, adminDir string) error {
	if err := os.WriteFile(filepath.Join(adminDir, "commondir"), []byte("../..\n"), 0o666); err != nil {
		return err
	}
	if err := os.MkdirAll(wt.Path, 0o777); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(wt.Path, ".git"), []byte("gitdir: "+adminDir+"\n"), 0o666)
}

// unclaim removes a registration whose link failed.
func unclaim(wt Worktree, adminDir string) {
	os.Remove(filepath.Join(wt.Path, ".git"))
	os.RemoveAll(adminDir)
}

// removeIncomplete removes a worktree whose creation was cut short (see
// wtIncomplete): the files of a checkout that did not finish, and the
// registration.
func (m *Manager) removeIncomplete(agent string, in inspection) error {
	if err := os.RemoveAll(m.Path(agent)); err != nil {
		return fmt.Errorf("remove unfinished worktree of agent %s: %w", agent, err)
	}
	if err := os.RemoveAll(in.adminDir); err != nil {
		return fmt.Errorf("remove unfinished worktree of agent %s: %w", agent, err)
	}
	m.log.Warn("removed a worktree whose creation was cut short", zap.String("agent", agent), zap.String("path", m.Path(agent)))
	return nil
}

// unlockRegistration ends the creation of a worktree.
func unlockRegistration(adminDir string) error {
	if err := os.Remove(filepath.Join(adminDir, "locked")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// postCheckout runs the repository's post-checkout hook in a new worktree,
// as "git worktree add" does after its checkout (same arguments, same
// directory, git's environment), when there is one: most repositories
// have none, and then no process is started. git ignores a hook that is
// not executable; so does this. It runs in Options.HookSandbox's sandbox
// when there is one.
func (m *Manager) postCheckout(ctx context.Context, wt Worktree) error {
	fi, err := os.Stat(m.hook)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return nil
	}
	done, err := m.acquireBusy(ctx)
	if err != nil {
		return err
	}
	defer done()
	argv := []string{m.hook, zeroOID, wt.Head, "1"}
	if m.hookWrap != nil {
		argv = m.hookWrap(wt.Agent, wt.Path, argv)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = wt.Path
	cmd.Env = m.git.env
	cmd.WaitDelay = gitWaitDelay
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", m.hook, err, strings.TrimSpace(string(out)))
	}
	return nil
}
