// Package sandbox runs a command in a bubblewrap (bwrap) sandbox: a mount
// namespace in which the whole file system is read-only except the paths
// it is given, some paths are not visible at all, /tmp is private, and the
// processes live in a pid namespace of their own (they see only each
// other). The network is the host's.
//
// It is the kernel's and Debian's own parts (bwrap is what Claude Code's
// Linux sandbox uses), not a home-made jail: this package only says which
// paths go where, and in which order.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ErrUnavailable: bwrap is missing or cannot make its namespaces here.
var ErrUnavailable = errors.New("sandbox: bubblewrap unavailable")

// Sandbox makes bwrap command lines. The zero value is not usable: Probe.
type Sandbox struct {
	bwrap string // absolute path
	root  bool   // running as root: drop every capability inside
}

// Probe finds bwrap (name, or "bwrap" in PATH when empty) and checks that it
// can make the namespaces a sandbox needs on this host, by running one.
func Probe(ctx context.Context, name string) (*Sandbox, error) {
	if name == "" {
		name = "bwrap"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s not found (Debian: apt-get install bubblewrap)", ErrUnavailable, name)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	s := &Sandbox{bwrap: path, root: os.Geteuid() == 0}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	argv := s.Command(Spec{}, []string{"/bin/true"})
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("%w: %s cannot make a sandbox here: %s (are user namespaces allowed? sysctl kernel.unprivileged_userns_clone)", ErrUnavailable, path, firstLine(msg))
	}
	return s, nil
}

// Path is the bwrap binary.
func (s *Sandbox) Path() string { return s.bwrap }

// Spec is what one sandbox sees beyond the read-only root. Paths are
// absolute; each keeps its place (the sandbox's path is the host's).
type Spec struct {
	// Writable paths are bound read-write.
	Writable []string
	// ReadOnly paths are bound read-only: what must stay visible under a
	// hidden path or the private /tmp (a repository, a binary's directory).
	ReadOnly []string
	// Hidden paths get an empty tmpfs over them: nothing under them is
	// visible unless a deeper path brings it back.
	Hidden []string
	// Binds put the host's Src at Dest (a socket made for this sandbox).
	Binds []Bind
	// Dir is the working directory inside ("" keeps the caller's).
	Dir string
	// Unsetenv are variables removed inside (paths it cannot see).
	Unsetenv []string
}

// Bind is one host path seen elsewhere inside.
type Bind struct {
	Src, Dest string
	Writable  bool
}

type mount struct {
	kind      string // bwrap's option
	src, dest string
}

// Command is argv run inside a sandbox as spec says: bwrap's command line,
// ending with argv.
//
// Mounts go from the shallowest path to the deepest, so that a deeper one
// is laid over a shallower one whatever the caller's order: a worktree
// under a hidden state directory is visible, a read-only file in a
// writable directory stays read-only. At the same depth hiding wins over
// read-only, which wins over writable.
//
// TMPDIR is the private /tmp inside: one the caller's environment names
// elsewhere under /tmp is not there, and one outside it is read-only.
func (s *Sandbox) Command(spec Spec, argv []string) []string {
	var ms []mount
	add := func(kind, src, dest string) {
		if dest == "" {
			return
		}
		ms = append(ms, mount{kind: kind, src: filepath.Clean(src), dest: filepath.Clean(dest)})
	}
	add("--tmpfs", "", "/tmp")
	for _, p := range spec.Writable {
		add("--bind", p, p)
	}
	for _, p := range spec.ReadOnly {
		add("--ro-bind", p, p)
	}
	for _, b := range spec.Binds {
		kind := "--ro-bind"
		if b.Writable {
			kind = "--bind"
		}
		add(kind, b.Src, b.Dest)
	}
	for _, p := range spec.Hidden {
		add("--tmpfs", "", p)
	}
	// A mount asked for twice (the spec's paths come from several places:
	// the repository, the configured ones, the binaries' directories and
	// PATH) is made once, where it came last: each is a mount call, and
	// bwrap reads the mount table again for each read-only one.
	seen := make(map[mount]bool, len(ms))
	for i := len(ms) - 1; i >= 0; i-- {
		if seen[ms[i]] {
			ms = slices.Delete(ms, i, i+1)
			continue
		}
		seen[ms[i]] = true
	}
	rank := map[string]int{"--bind": 0, "--ro-bind": 1, "--tmpfs": 2}
	slices.SortStableFunc(ms, func(a, b mount) int {
		if d := depth(a.dest) - depth(b.dest); d != 0 {
			return d
		}
		return rank[a.kind] - rank[b.kind]
	})

	out := make([]string, 0, 16+3*len(ms)+len(argv))
	out = append(out, s.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--unshare-pid", "--unshare-ipc")
	if s.root {
		// Root inside would still own the host's root-owned files; without
		// capabilities it cannot remount, unshare or ptrace its way out.
		out = append(out, "--cap-drop", "ALL")
	} else {
		out = append(out, "--unshare-user")
	}
	for _, m := range ms {
		if m.kind == "--tmpfs" {
			out = append(out, m.kind, m.dest)
			continue
		}
		out = append(out, m.kind, m.src, m.dest)
	}
	if spec.Dir != "" {
		out = append(out, "--chdir", spec.Dir)
	}
	for _, v := range spec.Unsetenv {
		out = append(out, "--unsetenv", v)
	}
	out = append(out, "--setenv", "TMPDIR", "/tmp")
	out = append(out, "--")
	return append(out, argv...)
}

// depth is how many elements path has: "/" 0, "/tmp" 1.
func depth(path string) int {
	if path == "/" {
		return 0
	}
	return strings.Count(path, "/")
}

// UnderTmp reports whether path is in /tmp, which a sandbox makes private:
// a path there the sandbox needs must be bound back.
func UnderTmp(path string) bool {
	return path == "/tmp" || strings.HasPrefix(path, "/tmp/")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
