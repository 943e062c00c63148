package worktree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"go.uber.org/zap"
)

// Access is what of the repository an agent's sandboxed process must be
// able to write for git to work in its worktree, and nothing more: its
// worktree and that worktree's own git directory, the agent's own branch
// directory (refs/heads/swarm/AGENT, with its reflogs), and an object
// directory in the place of Objects (the caller's: package quarantine).
// Everything else of the repository (the shared object store, the other
// agents' branch directories, the task lines, the merge target's ref,
// packed-refs, config, hooks) is read-only.
//
// A directory per agent is what makes this hold for good: a read-only
// mount over a single ref file is dropped by the kernel the next time git
// renames a new file over that ref (every update does), while nothing
// ever renames over a directory.
type Access struct {
	Repo      string   // the main checkout: readable
	CommonDir string   // the repository's git directory: readable
	Writable  []string // directories git writes for this agent
	// Objects is the repository's object store, which git writes new
	// objects to: shared by every agent, so not in Writable.
	Objects string
	// Pinned are paths inside Writable that must stay read-only: the links
	// between the worktree and the repository.
	Pinned []string
}

// Access prepares and returns what agent's sandbox may write. It makes the
// agent's branch and reflog directories, which git would otherwise have to
// create in read-only places.
func (m *Manager) Access(agent string) (Access, error) {
	if err := checkName(agent); err != nil {
		return Access{}, err
	}
	wt := m.Path(agent)
	// The admin directory as inspect found it registered for this very
	// worktree, not as its .git file says: a sandbox writes that file, and
	// could name a peer's admin directory there for its next sandbox (or
	// its hooks') to write.
	in, err := m.inspect(agent)
	if err != nil {
		return Access{}, fmt.Errorf("sandbox access for agent %s: %w", agent, err)
	}
	if in.state != wtOK && in.state != wtOffBranch {
		why := in.reason
		if why == "" {
			why = "no worktree of its own"
		}
		return Access{}, fmt.Errorf("sandbox access for agent %s: its worktree %s is not one to give a sandbox: %s", agent, wt, why)
	}
	admin := in.adminDir
	refs := filepath.Join(m.commonDir, filepath.FromSlash(branchDir(agent)))
	logs := filepath.Join(m.commonDir, "logs", filepath.FromSlash(branchDir(agent)))
	for _, d := range []string{refs, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Access{}, fmt.Errorf("sandbox access for agent %s: %w", agent, err)
		}
	}
	cfg := filepath.Join(admin, "config.worktree")
	if err := m.emptyConfig(agent, cfg); err != nil {
		return Access{}, fmt.Errorf("sandbox access for agent %s: %w", agent, err)
	}
	return Access{
		Repo:      m.repo,
		CommonDir: m.commonDir,
		Writable:  []string{wt, admin, refs, logs},
		Objects:   filepath.Join(m.commonDir, "objects"),
		// The worktree's links to the repository: rewritten, they would send
		// the daemon's own git commands in this worktree elsewhere. And its
		// own configuration, which git reads (for the daemon's git there
		// too) once the repository's config sets extensions.worktreeConfig:
		// a filter named there ran as the daemon.
		Pinned: []string{filepath.Join(admin, "commondir"), filepath.Join(admin, "gitdir"), cfg},
	}, nil
}

// emptyConfig makes path (a worktree's config.worktree) an empty file of
// the daemon's own, for the sandbox to see read-only: whatever a session
// put there before (a setting, a link, a FIFO, a hard link) is replaced,
// never written through. The sandbox cannot write it, so an empty file
// of one link is left as it is.
func (m *Manager) emptyConfig(agent, path string) error {
	fi, err := os.Lstat(path)
	if err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink == 1 {
			return nil
		}
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".config.worktree-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	if fi != nil {
		m.log.Warn("emptied the worktree's own git configuration, which a session wrote", zap.String("agent", agent),
			zap.String("path", path), zap.String("was", fi.Mode().String()), zap.Int64("size", fi.Size()))
	}
	return nil
}
