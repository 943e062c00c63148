package worktree

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	gitconfig "github.com/go-git/go-git/v5/plumbing/format/config"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"golang.org/x/sys/unix"
)

// A session that changed nothing in its worktree should not cost a "git
// status" (a process start, ~2 ms, plus git's own walk). Status remembers
// the last answer per worktree with a fingerprint of everything the answer
// depends on: the HEAD commit, the stat data (inode, size, mode, mtime,
// ctime) of every entry of every directory git looks into, and of the
// index and the config, exclude and attributes files. The answer is reused
// only when the fingerprint is the same.
//
// The fingerprint is taken before git status runs, so a change made while
// git runs shows as a different fingerprint next time. ctime is what makes
// it sound: every write sets it, to the kernel's clock, and no program can
// set it back. A second change within one tick of that clock can leave the
// stat data as it was (git's "racy" entries), so an answer is not
// remembered while anything in its fingerprint changed less than racyWindow
// before the fingerprint was taken.
const (
	// racyWindow covers the coarse kernel clock that file times come from
	// (one tick, at most 10 ms).
	racyWindow = 50 * time.Millisecond
	// coarseRacyWindow is for a time with no sub-second part: likely a
	// filesystem that keeps whole (or even) seconds.
	coarseRacyWindow = 2 * time.Second
)

// statusSnap is the remembered answer for one worktree.
type statusSnap struct {
	head  plumbing.Hash // for the log; print covers it
	print [sha256.Size]byte
	valid bool            // print was taken; false: only prune is known yet
	prune map[string]bool // directories not looked into (ignored by a pattern, nothing tracked inside)
	files []string
}

type statusCache struct {
	mu    sync.Mutex
	snaps map[string]*statusSnap // by worktree path
}

func (c *statusCache) get(path string) *statusSnap {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snaps[path]
}

func (c *statusCache) set(path string, s *statusSnap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == nil {
		delete(c.snaps, path)
		return
	}
	if c.snaps == nil {
		c.snaps = map[string]*statusSnap{}
	}
	c.snaps[path] = s
}

// cachedDirtyFiles is dirtyFiles for the worktree at path, checked out at
// head with its git directory at adminDir, answered from the last run of
// git status when nothing it depends on changed since.
func (m *Manager) cachedDirtyFiles(ctx context.Context, path, adminDir string, head plumbing.Hash) ([]string, error) {
	// Without a prune set from an earlier git status the walk would go into
	// ignored trees (node_modules); the first answer is then not
	// remembered, only what to leave out next time.
	if m.pristine(path, adminDir, head) {
		return nil, nil
	}
	snap := m.statuses.get(path)
	var (
		entries []walked
		start   time.Time
	)
	if snap != nil {
		start = time.Now()
		walk, err := walkTree(path, snap.prune)
		if extra, ok := m.gitFileStamps(path, adminDir); err == nil && ok {
			entries = append(walk, extra...)
			if print, _ := fingerprint(head, entries, snap.prune, time.Time{}); snap.valid && print == snap.print {
				return slices.Clone(snap.files), nil
			}
		}
	}

	out, err := m.gitIn(ctx, path, adminDir, append(slices.Clip(statusArgs), "--ignored=matching")...)
	if err != nil {
		return nil, err
	}
	files, ignoredDirs := parsePorcelainV2Ignored(out)
	newPrune, ok := pruneSet(adminDir, ignoredDirs)
	if !ok {
		m.statuses.set(path, nil)
		return files, nil
	}
	next := &statusSnap{head: head, prune: newPrune, files: files}
	if entries != nil {
		// The walk left out what the old prune set prunes; leaving out
		// what the new one prunes gives the print the next check computes
		// if nothing changes.
		var racy bool
		next.print, racy = fingerprint(head, entries, newPrune, start)
		next.valid = !racy
	}
	m.statuses.set(path, next)
	return slices.Clone(files), nil
}

// pristine reports a worktree with nothing to report, without git: HEAD
// is a commit of the empty tree, there is no index (nothing staged or
// tracked: a missing index is an empty one) and no file but .git (nothing
// untracked). That is every new agent's worktree on a new repository, whose
// first prompt would otherwise cost a git status.
func (m *Manager) pristine(path, adminDir string, head plumbing.Hash) bool {
	if head != m.base || !m.baseEmpty {
		return false
	}
	if _, err := os.Lstat(filepath.Join(adminDir, "index")); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	d, err := os.Open(path)
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.Readdirnames(2)
	return err == nil && len(names) == 1 && names[0] == ".git"
}

// walked is one directory entry's stat data, by path relative to the
// worktree ("" for the worktree itself). Files outside the worktree (the
// index, config) have absolute paths.
type walked struct {
	rel string
	st  stamp
}

// walkTree stats every entry of every directory under root but those in
// prune (relative paths, slash-separated).
func walkTree(root string, prune map[string]bool) ([]walked, error) {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	out := []walked{{rel: "", st: stampOfUnix(&st)}}
	var walkDir func(rel string) error
	walkDir = func(rel string) error {
		dir := filepath.Join(root, rel)
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("walk %s: %w", dir, err)
		}
		f := os.NewFile(uintptr(fd), dir)
		defer f.Close()
		names, err := f.Readdirnames(-1)
		if err != nil {
			return fmt.Errorf("walk %s: %w", dir, err)
		}
		slices.Sort(names)
		for _, name := range names {
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("walk %s: %w", filepath.Join(dir, name), err)
			}
			child := name
			if rel != "" {
				child = rel + "/" + name
			}
			out = append(out, walked{rel: child, st: stampOfUnix(&st)})
			if st.Mode&unix.S_IFMT == unix.S_IFDIR && !prune[child] {
				if err := walkDir(child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walkDir(""); err != nil {
		return nil, err
	}
	return out, nil
}

func stampOfUnix(st *unix.Stat_t) stamp {
	return stamp{
		ino: st.Ino, size: uint64(st.Size), mode: uint64(st.Mode),
		mtimeNs: st.Mtim.Nano(), ctimeNs: st.Ctim.Nano(),
	}
}

// fingerprint hashes head and the entries outside prune, and reports
// whether any of them changed so shortly before start that a further
// change could leave its stat data the same (no check for a zero start).
func fingerprint(head plumbing.Hash, entries []walked, prune map[string]bool, start time.Time) (sum [sha256.Size]byte, racy bool) {
	h := sha256.New()
	h.Write(head[:])
	var buf [40]byte
	for _, e := range entries {
		if underPruned(e.rel, prune) {
			continue
		}
		if prune[e.rel] {
			// What is added to an ignored directory changes its times and
			// size but not git status; its removal or replacement does.
			e.st = stamp{ino: e.st.ino, mode: e.st.mode}
		}
		h.Write([]byte(e.rel))
		binary.LittleEndian.PutUint64(buf[0:], e.st.ino)
		binary.LittleEndian.PutUint64(buf[8:], e.st.size)
		binary.LittleEndian.PutUint64(buf[16:], e.st.mode)
		binary.LittleEndian.PutUint64(buf[24:], uint64(e.st.mtimeNs))
		binary.LittleEndian.PutUint64(buf[32:], uint64(e.st.ctimeNs))
		h.Write(buf[:])
		if !start.IsZero() && e.st.recent(start) {
			racy = true
		}
	}
	h.Sum(sum[:0])
	return sum, racy
}

// underPruned reports whether rel lies inside a pruned directory (the
// directory's own entry stays: its removal or replacement matters).
func underPruned(rel string, prune map[string]bool) bool {
	if len(prune) == 0 || filepath.IsAbs(rel) {
		return false
	}
	for i := len(rel) - 1; i > 0; i-- {
		if rel[i] == '/' && prune[rel[:i]] {
			return true
		}
	}
	return false
}

// pruneSet is the set of ignored directories the walk may leave out: those
// with no tracked file inside (git looks at tracked files wherever they
// are). ok is false when the index cannot be read or holds submodules,
// whose state lives outside the worktree: nothing is remembered then.
func pruneSet(adminDir string, ignoredDirs []string) (map[string]bool, bool) {
	f, err := os.Open(filepath.Join(adminDir, "index"))
	if errors.Is(err, fs.ErrNotExist) {
		// git reads a missing index (a worktree of the empty tree, never
		// checked out) as an empty one: no tracked file anywhere.
		prune := map[string]bool{}
		for _, d := range ignoredDirs {
			prune[d] = true
		}
		return prune, true
	}
	if err != nil {
		return nil, false
	}
	defer f.Close()
	var idx index.Index
	if err := index.NewDecoder(f).Decode(&idx); err != nil {
		return nil, false
	}
	names := make([]string, 0, len(idx.Entries))
	for _, e := range idx.Entries {
		if e.Mode == filemode.Submodule || e.Mode == filemode.Dir {
			return nil, false
		}
		names = append(names, e.Name)
	}
	slices.Sort(names)
	prune := map[string]bool{}
	for _, d := range ignoredDirs {
		i, _ := slices.BinarySearch(names, d+"/")
		if i < len(names) && strings.HasPrefix(names[i], d+"/") {
			continue
		}
		prune[d] = true
	}
	return prune, true
}

// gitFileStamps stamps the files outside the worktree that git status reads:
// the index, config (and what it includes), excludes and attributes. ok is
// false when the configuration cannot be followed (config given in the
// environment, or unreadable).
func (m *Manager) gitFileStamps(worktree, adminDir string) ([]walked, bool) {
	env := func(k string) string {
		v := ""
		for _, kv := range m.git.env {
			if key, val, ok := strings.Cut(kv, "="); ok && key == k {
				v = val
			}
		}
		return v
	}
	if env("GIT_CONFIG_PARAMETERS") != "" || env("GIT_CONFIG_COUNT") != "" {
		return nil, false
	}
	home := env("HOME")
	xdg := env("XDG_CONFIG_HOME")
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	files := []string{
		filepath.Join(adminDir, "index"),
		filepath.Join(adminDir, "config.worktree"),
		filepath.Join(adminDir, "info", "sparse-checkout"),
		filepath.Join(m.commonDir, "info", "exclude"),
		filepath.Join(m.commonDir, "info", "attributes"),
		filepath.Join(m.commonDir, "info", "sparse-checkout"),
		"/etc/gitattributes", "/usr/local/etc/gitattributes",
	}
	if xdg != "" {
		files = append(files, filepath.Join(xdg, "git", "ignore"), filepath.Join(xdg, "git", "attributes"))
	}
	configs := []string{filepath.Join(m.commonDir, "config"), filepath.Join(adminDir, "config.worktree")}
	if g := env("GIT_CONFIG_GLOBAL"); g != "" {
		configs = append(configs, g)
	} else {
		if home != "" {
			configs = append(configs, filepath.Join(home, ".gitconfig"))
		}
		if xdg != "" {
			configs = append(configs, filepath.Join(xdg, "git", "config"))
		}
	}
	if env("GIT_CONFIG_NOSYSTEM") == "" {
		if s := env("GIT_CONFIG_SYSTEM"); s != "" {
			configs = append(configs, s)
		} else {
			configs = append(configs, "/etc/gitconfig", "/usr/local/etc/gitconfig")
		}
	}
	seen := map[string]bool{}
	for depth := 0; len(configs) > 0; depth++ {
		if depth > 10 {
			return nil, false // include cycle, or too deep to follow
		}
		var next []string
		for _, c := range configs {
			if seen[c] {
				continue
			}
			seen[c] = true
			files = append(files, c)
			more, ok := configRefs(c, home, worktree)
			if !ok {
				return nil, false
			}
			files = append(files, more.files...)
			next = append(next, more.includes...)
		}
		configs = next
	}
	out := make([]walked, 0, len(files))
	for _, f := range files {
		st, err := stampOf(f)
		if err != nil {
			return nil, false
		}
		out = append(out, walked{rel: f, st: st})
	}
	return out, true
}

type configFiles struct {
	files    []string // excludes and attributes files named
	includes []string // config files included
}

// configRefs reads the config file at path (missing: nothing) for the
// files it names that git status reads.
func configRefs(path, home, worktree string) (configFiles, bool) {
	var refs configFiles
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return refs, true
	}
	if err != nil {
		return refs, false
	}
	cfg := gitconfig.New()
	if err := gitconfig.NewDecoder(strings.NewReader(string(data))).Decode(cfg); err != nil {
		return refs, false
	}
	expand := func(p, rel string) string {
		if rest, ok := strings.CutPrefix(p, "~/"); ok && home != "" {
			return filepath.Join(home, rest)
		}
		if !filepath.IsAbs(p) {
			return filepath.Join(rel, p)
		}
		return p
	}
	core := cfg.Section("core")
	for _, key := range []string{"excludesFile", "attributesFile"} {
		for _, v := range core.Options.GetAll(key) {
			refs.files = append(refs.files, expand(v, worktree))
		}
	}
	for _, v := range cfg.Section("include").Options.GetAll("path") {
		refs.includes = append(refs.includes, expand(v, filepath.Dir(path)))
	}
	for _, sub := range cfg.Section("includeIf").Subsections {
		for _, v := range sub.Options.GetAll("path") {
			refs.includes = append(refs.includes, expand(v, filepath.Dir(path)))
		}
	}
	return refs, true
}

// parsePorcelainV2Ignored is parsePorcelainV2 for output with
// --ignored=matching: the ignored entries are not changes; the directories
// among them (trailing "/") are returned apart, without the slash.
func parsePorcelainV2Ignored(out string) (files, ignoredDirs []string) {
	var kept []string
	for _, t := range strings.Split(out, "\x00") {
		if rest, ok := strings.CutPrefix(t, "! "); ok {
			if d, ok := strings.CutSuffix(rest, "/"); ok {
				ignoredDirs = append(ignoredDirs, d)
			}
			continue
		}
		kept = append(kept, t)
	}
	return parsePorcelainV2(strings.Join(kept, "\x00")), ignoredDirs
}
