package worktree

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Access is what of the repository an agent's sandboxed process must be
// able to write for git to work in its worktree, and nothing more: its
// worktree and that worktree's own git directory, the object store, and
// the directory of the agents' branches (refs/heads/swarm, with its
// reflogs), in which every other agent's branch and the task lines are
// pinned read-only. Everything else of the repository (the merge target's
// ref, packed-refs, config, hooks) is read-only.
type Access struct {
	Repo      string   // the main checkout: readable
	CommonDir string   // the repository's git directory: readable
	Writable  []string // directories git writes for this agent
	// Pinned are paths inside Writable that must stay read-only: the other
	// agents' branches, the task lines' directory, and the links between
	// the worktree and the repository.
	Pinned []string
}

// Access prepares and returns what agent's sandbox may write. It makes the
// directories git would otherwise have to create in read-only places (the
// branch and reflog directories), writes a loose ref for every agent
// branch that is only packed, and creates the branch of each of peers that
// has none yet (at the base, as its worktree would), so that pinning its
// file pins the branch: a sandbox could otherwise create a peer's branch
// before the peer does.
func (m *Manager) Access(agent string, peers []string) (Access, error) {
	if err := checkName(agent); err != nil {
		return Access{}, err
	}
	wt := m.Path(agent)
	admin, err := adminDirOf(wt)
	if err != nil {
		return Access{}, fmt.Errorf("sandbox access for agent %s: %w", agent, err)
	}
	refs := filepath.Join(m.commonDir, "refs", "heads", "swarm")
	logs := filepath.Join(m.commonDir, "logs", "refs", "heads", "swarm")
	lines := filepath.Join(refs, "task")
	for _, d := range []string{refs, logs, lines} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Access{}, fmt.Errorf("sandbox access for agent %s: %w", agent, err)
		}
	}
	if err := m.unpackAgentRefs(); err != nil {
		return Access{}, fmt.Errorf("sandbox access for agent %s: %w", agent, err)
	}
	for _, p := range peers {
		if p == agent || checkName(p) != nil {
			continue
		}
		if _, err := os.Lstat(filepath.Join(refs, filepath.FromSlash(p))); err == nil {
			continue // the usual case, without createBranchRef's lock file
		}
		if err := m.createPeerBranch(p); err != nil {
			return Access{}, fmt.Errorf("sandbox access for agent %s: %w", agent, err)
		}
	}
	a := Access{
		Repo:      m.repo,
		CommonDir: m.commonDir,
		Writable:  []string{wt, admin, filepath.Join(m.commonDir, "objects"), refs, logs},
		// The worktree's links to the repository: rewritten, they would send
		// the daemon's own git commands in this worktree elsewhere.
		Pinned: []string{lines, filepath.Join(admin, "commondir"), filepath.Join(admin, "gitdir")},
	}
	own := m.Branch(agent)
	err = filepath.WalkDir(refs, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == lines && d.IsDir() {
			return fs.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(path, ".lock") {
			return nil
		}
		rel, err := filepath.Rel(filepath.Join(m.commonDir, "refs", "heads"), path)
		if err != nil || filepath.ToSlash(rel) == own {
			return err
		}
		a.Pinned = append(a.Pinned, path)
		return nil
	})
	if err != nil {
		return Access{}, fmt.Errorf("sandbox access for agent %s: %w", agent, err)
	}
	return a, nil
}

// createPeerBranch creates agent's branch at the base if it has none yet,
// under the agent's own lock: its worktree's creation, which creates the
// same branch, waits for it (and then finds it) instead of meeting the
// lock file and failing.
func (m *Manager) createPeerBranch(agent string) error {
	unlock, err := m.agents.lock(context.Background(), agent)
	if err != nil {
		return err
	}
	defer unlock()
	if err := m.createBranchRef(agent, m.base); err != nil && !errors.Is(err, errRefExists) {
		return err
	}
	return nil
}

// adminDirOf reads a linked worktree's .git file: its own git directory.
func adminDirOf(wt string) (string, error) {
	var buf [smallFile]byte
	data, err := readSmall(filepath.Join(wt, ".git"), &buf)
	if err != nil {
		return "", err
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir: ")
	if !ok {
		return "", fmt.Errorf("%s/.git is not a gitdir link", wt)
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(wt, dir)
	}
	return filepath.Clean(dir), nil
}

// unpackAgentRefs writes a loose ref for each refs/heads/swarm/ branch that
// exists only in packed-refs (git gc packs them): a loose file wins over
// the packed line, so a sandbox that could create one would move a branch
// it may not write. The value is the packed one: nothing moves.
func (m *Manager) unpackAgentRefs() error {
	data, err := os.ReadFile(filepath.Join(m.commonDir, "packed-refs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		hash, ref, ok := strings.Cut(sc.Text(), " ")
		if !ok || len(hash) < 40 || !strings.HasPrefix(ref, "refs/heads/swarm/") {
			continue
		}
		path := filepath.Join(m.commonDir, filepath.FromSlash(ref))
		if _, err := os.Lstat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		tmp := path + ".swarmd-tmp"
		if err := os.WriteFile(tmp, []byte(hash+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return sc.Err()
}
