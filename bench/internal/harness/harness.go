// Package harness is what the bench/ commands share: a throwaway git
// repository with a swarmd.yaml, percentiles, a free port, a network's
// delay in front of a PostgreSQL server.
package harness

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Repo makes a git repository with one empty commit in a new temporary
// directory; remove it with os.RemoveAll.
func Repo(prefix string) (string, error) { return RepoIn("", prefix) }

// RepoIn is Repo in a new directory under parent ("" is the system's
// temporary directory), so that a harness can choose the file system.
func RepoIn(parent, prefix string) (string, error) {
	work, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return "", err
	}
	for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=b", "-c", "user.email=b@b.invalid", "commit", "-q", "--allow-empty", "-m", "i"}} {
		if out, err := exec.Command("git", append([]string{"-C", work}, args...)...).CombinedOutput(); err != nil {
			os.RemoveAll(work)
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return work, nil
}

// Swarm writes work/swarmd.yaml: no listener, head (the defaults and
// backends, YAML) and n agents a1..aN. It returns the config's path and the
// agents' names.
func Swarm(work, head string, n int) (string, []string, error) {
	var cfg strings.Builder
	cfg.WriteString("listen: \"\"\n" + head)
	cfg.WriteString("agents:\n")
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("a%d", i+1)
		fmt.Fprintf(&cfg, "  - {name: %s, role: x}\n", names[i])
	}
	path := filepath.Join(work, "swarmd.yaml")
	return path, names, os.WriteFile(path, []byte(cfg.String()), 0o644)
}

// Percentile is the q-quantile (0..1) of ds, which it sorts.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// Survivors counts live processes that carry the tree marker of a swarm
// whose state dir is under work: after a stop, there must be none.
func Survivors(work string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte("SWARMD_TREE="+work)) {
			n++
		}
	}
	return n
}

// FreeAddr is a loopback address whose port was free a moment ago: for a
// daemon's listener.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// CreateCost is the mean time to create a file (of one byte) in a new
// directory under dir. On ext4 without a journal it is many times its usual
// figure for 5 minutes after a mass deletion (the allocator skips every
// inode freed since, 300 s while its table block is dirty), and a swarm
// creates two files a session: a harness prints it so that a run on such a
// file system is recognised, and keeps its own files until it ends.
func CreateCost(dir string) (time.Duration, error) {
	d, err := os.MkdirTemp(dir, "probe-")
	if err != nil {
		return 0, err
	}
	const n = 200
	t := time.Now()
	for i := range n {
		if err := os.WriteFile(filepath.Join(d, strconv.Itoa(i)), []byte{'x'}, 0o640); err != nil {
			return 0, fmt.Errorf("probe file creation: %w", err)
		}
	}
	return time.Since(t) / n, nil
}
