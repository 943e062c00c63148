package worktree

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
)

// maxCounts bounds the remembered rev-list counts; the memo starts over when
// full (a daemon asks about a few HEADs per agent).
const maxCounts = 4096

// countMemo remembers "rev-list --left-right --count" results. Commits are
// immutable, so a count depends only on its two hashes, unless the history
// is rewritten under git's feet: grafts, a shallow clone's boundary, or
// replace refs. While any of those is present nothing is remembered.
type countMemo struct {
	mu      sync.Mutex
	counts  map[[2]plumbing.Hash][2]int
	packed  stamp // of packed-refs when packedReplace was read
	replace bool  // packed-refs holds refs/replace/
}

func (c *countMemo) get(commonDir string, left, right plumbing.Hash) (l, r int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.plainHistory(commonDir) {
		return 0, 0, false
	}
	v, ok := c.counts[[2]plumbing.Hash{left, right}]
	return v[0], v[1], ok
}

func (c *countMemo) put(commonDir string, left, right plumbing.Hash, l, r int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.plainHistory(commonDir) {
		return
	}
	if c.counts == nil || len(c.counts) >= maxCounts {
		c.counts = map[[2]plumbing.Hash][2]int{}
	}
	c.counts[[2]plumbing.Hash{left, right}] = [2]int{l, r}
}

// plainHistory reports whether the repository has none of what makes git
// see a history other than the commits' own parents. Unsure means no.
func (c *countMemo) plainHistory(commonDir string) bool {
	for _, p := range []string{"shallow", filepath.Join("info", "grafts"), filepath.Join("refs", "replace")} {
		if _, err := os.Lstat(filepath.Join(commonDir, p)); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	packedRefs := filepath.Join(commonDir, "packed-refs")
	st, err := stampOf(packedRefs)
	if err != nil {
		return false
	}
	if st != c.packed {
		data, err := os.ReadFile(packedRefs)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false
		}
		// Re-stamp after reading: a rewrite in between shows as a change next time.
		c.packed, c.replace = st, bytes.Contains(data, []byte(" refs/replace/"))
	}
	return !c.replace
}

// stamp identifies a version of a file without reading it: a rewrite
// changes its ctime (which no program can set), and usually inode and size.
// The zero stamp is a missing file.
type stamp struct {
	ino, size, mode  uint64
	mtimeNs, ctimeNs int64
}

func stampOf(path string) (stamp, error) {
	var st syscall.Stat_t
	err := syscall.Lstat(path, &st)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
		return stamp{}, nil
	}
	if err != nil {
		return stamp{}, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	return stampOfStat(&st), nil
}

func stampOfStat(st *syscall.Stat_t) stamp {
	return stamp{
		ino: st.Ino, size: uint64(st.Size), mode: uint64(st.Mode),
		mtimeNs: st.Mtim.Nano(), ctimeNs: st.Ctim.Nano(),
	}
}
