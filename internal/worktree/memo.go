package worktree

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/sys/unix"
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

// recent reports whether s changed so shortly before start that its stat
// data cannot be trusted to show a later change: file times come from a
// coarse clock, so an in-place rewrite within the same tick keeps them.
// A time with no sub-second part (a file system that keeps seconds) gets
// the wider window.
func (s stamp) recent(start time.Time) bool {
	if s.ctimeNs == 0 {
		return false
	}
	window := racyWindow
	if s.ctimeNs%int64(time.Second) == 0 {
		window = coarseRacyWindow
	}
	return s.ctimeNs >= start.Add(-window).UnixNano()
}

// smallFile is what readSmall reads into its buffer: refs, HEAD and the
// link files of a worktree are a line each.
const smallFile = 512

// readSmall reads a file of a line (a ref, HEAD, a worktree's gitdir) into
// buf with three system calls, where os.ReadFile makes six: a start over
// existing branches reads every registration's HEAD once per agent. A file
// that fills buf (a very long path) is read again by os.ReadFile.
func readSmall(path string, buf *[smallFile]byte) ([]byte, error) {
	return readSmallFlags(path, buf, 0)
}

// errNotAFile is readSmallFile's error for a path that is not a regular
// file: a symbolic link, a FIFO, a directory.
var errNotAFile = errors.New("not a regular file")

// readSmallFile is readSmall of a regular file only, never through a
// symbolic link, and never blocking on a FIFO: the paths a sandbox writes
// (its branch).
func readSmallFile(path string, buf *[smallFile]byte) ([]byte, error) {
	return readSmallFlags(path, buf, unix.O_NOFOLLOW|unix.O_NONBLOCK)
}

func readSmallFlags(path string, buf *[smallFile]byte, flags int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
	}
	if err == unix.ELOOP && flags&unix.O_NOFOLLOW != 0 {
		return nil, &fs.PathError{Op: "open", Path: path, Err: errNotAFile}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if flags&unix.O_NOFOLLOW != 0 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, &fs.PathError{Op: "open", Path: path, Err: errNotAFile}
		}
	}
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
	if flags&unix.O_NOFOLLOW != 0 {
		// A long line (the gitdir of a worktree under a deep path): the
		// rest from this very file, which is a regular one; reading the
		// path again could meet what a sandbox put there meanwhile.
		return readRest(fd, path, append([]byte(nil), buf[:n]...))
	}
	return os.ReadFile(path)
}

// maxLinkFile bounds readRest: no file of a line git keeps is near it.
const maxLinkFile = 1 << 20

// readRest appends the rest of fd's file to out, up to maxLinkFile.
func readRest(fd int, path string, out []byte) ([]byte, error) {
	var chunk [4096]byte
	for len(out) <= maxLinkFile {
		m, err := unix.Read(fd, chunk[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return out, nil
		}
		out = append(out, chunk[:m]...)
	}
	return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("longer than any file of a line git keeps")}
}

func stampOfStat(st *syscall.Stat_t) stamp {
	return stamp{
		ino: st.Ino, size: uint64(st.Size), mode: uint64(st.Mode),
		mtimeNs: st.Mtim.Nano(), ctimeNs: st.Ctim.Nano(),
	}
}
