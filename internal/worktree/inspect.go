package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"go.uber.org/zap"
)

type wtState int

const (
	wtMissing    wtState = iota // no directory
	wtEmpty                     // an empty directory: nothing to lose, git can fill it
	wtOK                        // this agent's worktree, on its branch
	wtOffBranch                 // this agent's worktree, but a session checked out another branch or a commit
	wtForeign                   // anything else: left alone
	wtIncomplete                // a creation of ours cut short before its checkout ended: nothing of anyone's in it
)

type inspection struct {
	state    wtState
	reason   string        // why wtForeign or wtOffBranch
	fix      string        // wtForeign of the agent's own worktree: what the operator does about it
	head     plumbing.Hash // wtOK, wtOffBranch: the worktree's HEAD commit (zero on an unborn branch)
	rebasing bool          // wtOK: HEAD is detached by a rebase of the agent's branch
	branch   string        // wtOffBranch: the branch checked out instead, "" for a detached HEAD
	adminDir string        // wtOK, wtOffBranch, wtIncomplete: the worktree's own git directory (.git/worktrees/<id>)
	// registered is the worktree's own git directory once its link and
	// registration are this repository's for this very path, whatever
	// the state (a wtForeign one too: a HEAD that is not a file): what
	// Scrub cleans.
	registered string
}

func foreign(format string, args ...any) inspection {
	return inspection{state: wtForeign, reason: fmt.Sprintf(format, args...)}
}

// inspect classifies what is at the agent's worktree path. It only reads,
// and answers from inspectcache.go when nothing changed.
func (m *Manager) inspect(agent string) (inspection, error) {
	if in, ok := m.cachedInspect(agent); ok {
		return in, nil
	}
	admin := m.inspections.admin(agent, filepath.Join(m.commonDir, "worktrees", agent))
	start := time.Now()
	stamps, ok := stampDeps(m.inspectDeps(agent, admin))
	in, err := m.inspectFiles(agent)
	switch {
	case err != nil:
	case ok && in.adminDir == admin:
		m.rememberInspect(agent, in, stamps, start)
	default:
		m.forgetInspect(agent)
		m.inspections.setAdmin(agent, in.adminDir)
	}
	return in, err
}

// inspectFiles is inspect without the cache.
func (m *Manager) inspectFiles(agent string) (inspection, error) {
	path := m.Path(agent)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return inspection{state: wtMissing}, nil
	}
	if err != nil {
		return inspection{}, fmt.Errorf("inspect worktree of agent %s: %w", agent, err)
	}
	if !fi.IsDir() {
		return foreign("not a directory"), nil
	}
	dotGit := filepath.Join(path, ".git")
	gfi, err := os.Lstat(dotGit)
	if errors.Is(err, fs.ErrNotExist) {
		entries, err := os.ReadDir(path)
		if err != nil {
			return inspection{}, fmt.Errorf("inspect worktree of agent %s: %w", agent, err)
		}
		if len(entries) == 0 {
			return inspection{state: wtEmpty}, nil
		}
		return foreign("not a git worktree"), nil
	}
	if err != nil {
		return inspection{}, fmt.Errorf("inspect worktree of agent %s: %w", agent, err)
	}
	if gfi.IsDir() {
		return foreign("a repository of its own, not a linked worktree"), nil
	}
	if !gfi.Mode().IsRegular() {
		return foreign(".git is not a regular file"), nil
	}

	// The .git file names the worktree's admin directory; it must be in our
	// repository and registered for this very path (not a copy).
	var buf [smallFile]byte
	data, err := readSmallFile(dotGit, &buf)
	if err != nil {
		return inspection{}, fmt.Errorf("inspect worktree of agent %s: %w", agent, err)
	}
	adminDir, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir: ")
	if !ok {
		return foreign(".git is not a gitdir link"), nil
	}
	if !filepath.IsAbs(adminDir) {
		adminDir = filepath.Join(path, adminDir)
	}
	if !samePath(filepath.Dir(adminDir), filepath.Join(m.commonDir, "worktrees")) {
		return foreign("a worktree of another repository: %s", adminDir), nil
	}
	registered, err := readSmall(filepath.Join(adminDir, "gitdir"), &buf)
	if errors.Is(err, fs.ErrNotExist) {
		return foreign("its registration %s is gone", adminDir), nil
	}
	if err != nil {
		return inspection{}, fmt.Errorf("inspect worktree of agent %s: %w", agent, err)
	}
	if !samePath(strings.TrimSpace(string(registered)), dotGit) {
		return foreign("registered for %s", strings.TrimSpace(string(registered))), nil
	}

	in, err := m.inspectRegistered(agent, path, adminDir, &buf)
	in.registered = adminDir
	return in, err
}

// inspectRegistered is the rest of inspectFiles for the worktree at path
// whose link and registration name adminDir.
func (m *Manager) inspectRegistered(agent, path, adminDir string, buf *[smallFile]byte) (inspection, error) {
	// register keeps a new worktree locked "initializing" until its files
	// are checked out, as git does; a caller holds the agent's lock, so
	// that is a creation that a crash cut short, not one going on.
	if lock, err := readSmallFile(filepath.Join(adminDir, "locked"), buf); err == nil && strings.TrimSpace(string(lock)) == initializing {
		return inspection{state: wtIncomplete, adminDir: adminDir}, nil
	}

	want := branchRef(agent)
	if h, ok := m.onBranch(adminDir, want); ok {
		return inspection{state: wtOK, head: h, adminDir: adminDir}, nil
	}
	// The branch's directory is its sandbox's to write: a branch made a
	// symbolic ref (or a link git takes for one) is another branch in
	// git's hands, and the daemon's own git there (a task line's reset)
	// would move that one, the merge target included.
	if _, st := m.readRef(want); st == refSymbolic {
		return foreign("branch %s is a symbolic ref or not a file, not a branch of its own", want.Short()), nil
	}
	if !m.reftable {
		return m.inspectHead(adminDir, want), nil
	}
	r, err := git.PlainOpenWithOptions(path, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if err != nil {
		return foreign("cannot be opened: %v", err), nil
	}
	head, err := r.Reference(plumbing.HEAD, false)
	if err != nil {
		return foreign("cannot read HEAD: %v", err), nil
	}
	if head.Type() == plumbing.HashReference {
		// A rebase detaches HEAD but keeps the branch checked out here; the
		// agent's next session can finish it.
		if rebasingBranch(adminDir) == want {
			return inspection{state: wtOK, head: head.Hash(), rebasing: true, adminDir: adminDir}, nil
		}
		return offBranchGit(r, want, inspection{head: head.Hash(), adminDir: adminDir,
			reason: fmt.Sprintf("detached HEAD at %s, want branch %s", head.Hash().String()[:12], want.Short())}), nil
	}
	if head.Target() != want {
		in := inspection{branch: head.Target().Short(), adminDir: adminDir,
			reason: fmt.Sprintf("on branch %s, want %s", head.Target().Short(), want.Short())}
		if ref, err := r.Reference(head.Target(), true); err == nil {
			in.head = ref.Hash()
		}
		return offBranchGit(r, want, in), nil
	}
	ref, err := r.Reference(want, true)
	if err != nil {
		return foreign("branch %s cannot be read: %v", want.Short(), err), nil
	}
	return inspection{state: wtOK, head: ref.Hash(), adminDir: adminDir}, nil
}

// inspectHead is the rest of inspectFiles for the files ref storage:
// what the worktree's HEAD names, read as onBranch and readRef read, never
// waiting on a file that is not one (go-git's reading of a FIFO the
// sandbox put in HEAD's place, or its branch's, held the daemon's
// inspection, and every stop after it, for good).
func (m *Manager) inspectHead(adminDir string, want plumbing.ReferenceName) inspection {
	var buf [smallFile]byte
	data, err := readSmallFile(filepath.Join(adminDir, "HEAD"), &buf)
	if errors.Is(err, errNotAFile) {
		if in, ok := symlinkHead(adminDir, want); ok {
			return in
		}
	}
	if err != nil {
		return foreign("cannot read HEAD: %v", err)
	}
	head := strings.TrimSpace(string(data))
	target, symbolic := strings.CutPrefix(head, "ref:")
	if !symbolic {
		h, ok := parseHash(head)
		if !ok {
			return foreign("cannot read HEAD: %.60q", head)
		}
		// A rebase detaches HEAD but keeps the branch checked out here; the
		// agent's next session can finish it.
		if rebasingBranch(adminDir) == want {
			return inspection{state: wtOK, head: h, rebasing: true, adminDir: adminDir}
		}
		return m.offBranch(want, inspection{head: h, adminDir: adminDir,
			reason: fmt.Sprintf("detached HEAD at %s, want branch %s", h.String()[:12], want.Short())})
	}
	ref := plumbing.ReferenceName(strings.TrimSpace(target))
	if ref != want {
		in := inspection{branch: ref.Short(), adminDir: adminDir,
			reason: fmt.Sprintf("on branch %s, want %s", ref.Short(), want.Short())}
		if h, st := m.readRef(ref); st == refFound {
			in.head = h
		}
		return m.offBranch(want, in)
	}
	h, st := m.readRef(want)
	if st != refFound {
		return foreign("branch %s cannot be read", want.Short())
	}
	return inspection{state: wtOK, head: h, adminDir: adminDir}
}

// symlinkHead is the inspection of a worktree whose HEAD is a symbolic
// link to a ref, as git writes HEAD under core.preferSymlinkRefs (the
// agent's git reads it from its HOME's .gitconfig, or the repository's
// config). The daemon reads HEAD only as a file of its own, never through
// a link (a sandbox plants links), so the agent stops; the reason names
// the setting, and the fix is the operator's: the daemon does not write
// the agent's git directory on a guess. ok is false for any other HEAD
// that is not a file (a FIFO, a link to anything but a ref).
func symlinkHead(adminDir string, want plumbing.ReferenceName) (inspection, bool) {
	target, err := os.Readlink(filepath.Join(adminDir, "HEAD"))
	if err != nil || !symrefText(target) {
		return inspection{}, false
	}
	in := foreign("its HEAD is a symbolic link (core.preferSymlinkRefs), to %.200q: the daemon reads HEAD only as a file of its own", target)
	in.fix = fmt.Sprintf("unset core.preferSymlinkRefs where the agent's git reads it (its HOME's .gitconfig, the repository's config), "+
		"write HEAD as a file (git -c core.preferSymlinkRefs=false symbolic-ref HEAD %s, in the worktree) and start the agent", want)
	return in, true
}

// symrefText reports whether a symbolic link's text is one git takes for
// a symbolic ref, reading it, never following it: a ref name under refs/
// (git follows a link whose text is no valid ref name). Stricter than
// git's own rule: a name it is unsure of is not one.
func symrefText(s string) bool {
	rest, ok := strings.CutPrefix(s, "refs/")
	if !ok || rest == "" {
		return false
	}
	for _, part := range strings.Split(rest, "/") {
		if part == "" || part[0] == '.' || strings.HasSuffix(part, ".") || strings.HasSuffix(part, ".lock") || strings.Contains(part, "..") {
			return false
		}
		for _, c := range part {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				return false
			}
		}
	}
	return true
}

// onBranch is the common case of inspectFiles read without go-git, whose
// opening of the repository (config, common dir, ref storage) was most of
// an inspection's cost: the worktree's HEAD names the branch want, and want
// is a loose or packed ref to a commit. ok is false for anything else,
// which the full inspection then classifies.
func (m *Manager) onBranch(adminDir string, want plumbing.ReferenceName) (plumbing.Hash, bool) {
	var buf [smallFile]byte
	head, err := readSmallFile(filepath.Join(adminDir, "HEAD"), &buf)
	if err != nil || strings.TrimSpace(string(head)) != "ref: "+want.String() {
		return plumbing.ZeroHash, false
	}
	h, st := m.readRef(want)
	return h, st == refFound
}

type refState int

const (
	refUnknown refState = iota // not a plain ref here: ask go-git
	refFound
	refMissing
	// refSymbolic is a loose ref that names another ref ("ref: ...") or is
	// not a file of its own (a symbolic link, which git takes for a
	// symbolic ref when it points into refs/, or a FIFO): git updates
	// whatever it leads to.
	refSymbolic
)

// readRef reads a branch ref the way git stores it in the files backend: a
// loose file holding an object name, else a line of packed-refs. A
// symbolic ref is refSymbolic; anything else (another ref storage) is
// refUnknown.
func (m *Manager) readRef(name plumbing.ReferenceName) (plumbing.Hash, refState) {
	if m.reftable {
		return plumbing.ZeroHash, refUnknown
	}
	var buf [smallFile]byte
	loose, err := readSmallFile(filepath.Join(m.commonDir, filepath.FromSlash(name.String())), &buf)
	if errors.Is(err, errNotAFile) {
		return plumbing.ZeroHash, refSymbolic
	}
	if err == nil {
		if h, ok := parseHash(strings.TrimSpace(string(loose))); ok {
			return h, refFound
		}
		if bytes.HasPrefix(loose, []byte("ref:")) {
			return plumbing.ZeroHash, refSymbolic
		}
		return plumbing.ZeroHash, refUnknown
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return plumbing.ZeroHash, refUnknown
	}
	packed, err := os.ReadFile(filepath.Join(m.commonDir, "packed-refs"))
	if errors.Is(err, fs.ErrNotExist) {
		return plumbing.ZeroHash, refMissing
	}
	if err != nil {
		return plumbing.ZeroHash, refUnknown
	}
	for _, line := range strings.Split(string(packed), "\n") {
		if h, n, ok := strings.Cut(line, " "); ok && n == name.String() {
			if h, ok := parseHash(h); ok {
				return h, refFound
			}
			return plumbing.ZeroHash, refUnknown
		}
	}
	return plumbing.ZeroHash, refMissing
}

// parseHash reads a full SHA-1 object name.
func parseHash(s string) (plumbing.Hash, bool) {
	if len(s) != 40 {
		return plumbing.ZeroHash, false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return plumbing.ZeroHash, false
		}
	}
	return plumbing.NewHash(s), true
}

// offBranch classifies a registered worktree of this repository at the
// agent's path whose HEAD is elsewhere. While the agent's branch exists it
// is the agent's worktree that a session switched away (wtOffBranch, which
// Ensure and Verify switch back); without the branch nothing says the
// worktree was ever the agent's, so it is left alone.
func (m *Manager) offBranch(want plumbing.ReferenceName, in inspection) inspection {
	if _, st := m.readRef(want); st != refFound {
		return foreign("%s", in.reason)
	}
	in.state = wtOffBranch
	return in
}

// offBranchGit is offBranch with go-git, for the reftable ref storage.
func offBranchGit(r *git.Repository, want plumbing.ReferenceName, in inspection) inspection {
	if _, err := r.Reference(want, true); err != nil {
		return foreign("%s", in.reason)
	}
	in.state = wtOffBranch
	return in
}

// rebasingBranch is the branch a rebase in progress in the worktree is
// rewriting, or "".
func rebasingBranch(adminDir string) plumbing.ReferenceName {
	for _, dir := range []string{"rebase-merge", "rebase-apply"} {
		var buf [smallFile]byte
		if data, err := readSmallFile(filepath.Join(adminDir, dir, "head-name"), &buf); err == nil {
			return plumbing.ReferenceName(strings.TrimSpace(string(data)))
		}
	}
	return ""
}

// registration is a linked worktree known to the repository.
type registration struct {
	path   string // the worktree directory as git recorded it
	gone   bool   // the directory no longer exists
	locked bool
}

// registrations lists the repository's linked worktrees from its admin
// directories (gitrepository-layout: worktrees/<id>/gitdir). Reading the files
// costs no process, which matters on Ensure's path.
func (m *Manager) registrations() ([]registration, error) {
	root := filepath.Join(m.commonDir, "worktrees")
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list worktree registrations: %w", err)
	}
	var regs []registration
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, e.Name(), "gitdir"))
		if err != nil {
			continue // half written by a concurrent git, or broken: git's prune handles it
		}
		dotGit := strings.TrimSpace(string(data))
		reg := registration{path: filepath.Dir(dotGit)}
		if _, err := os.Stat(dotGit); errors.Is(err, fs.ErrNotExist) {
			reg.gone = true
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), "locked")); err == nil {
			reg.locked = true
		}
		regs = append(regs, reg)
	}
	return regs, nil
}

// ownRegistration reports whether a registered worktree path is one of ours,
// and for which agent.
func (m *Manager) ownRegistration(path string) (string, bool) {
	if filepath.Dir(path) != realPathLoose(m.wtDir) {
		return "", false
	}
	agent := filepath.Base(path)
	return agent, checkName(agent) == nil
}

// pruneStale runs "git worktree prune" when one of our worktrees is
// registered but its directory is gone: git refuses to check the branch out
// again while the stale registration holds it. git prunes every stale
// registration of the repository then, as its gc does, except locked ones.
func (m *Manager) pruneStale(ctx context.Context) error {
	regs, err := m.registrations()
	if err != nil {
		return err
	}
	for _, reg := range regs {
		if _, ours := m.ownRegistration(reg.path); ours && reg.gone && !reg.locked {
			if _, err := m.git.run(ctx, m.repo, "worktree", "prune"); err != nil {
				return fmt.Errorf("prune stale worktrees: %w", err)
			}
			m.log.Info("pruned stale worktree registrations", zap.String("first", reg.path))
			return nil
		}
	}
	return nil
}
