// Package sandbox runs a command in a bubblewrap (bwrap) sandbox: a mount
// namespace in which the whole file system is read-only except the paths
// it is given, some paths are not visible at all, /tmp, /run and /var/tmp
// are private, and the processes live in a pid namespace of their own
// (they see only each other). The network is the host's.
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
	// needs are files outside the private roots that may lead into one
	// and that sessions need: what they lead to is bound back.
	needs []string
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
	s := &Sandbox{bwrap: path, root: os.Geteuid() == 0, needs: []string{"/etc/resolv.conf"}}
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
// The private roots (PrivateRoots) are each an empty tmpfs of the
// sandbox's own, laid first at their depth so that a path given at the
// same one (sandbox.readable: [/run]) wins; what a session needs there
// (the file /etc/resolv.conf leads to) is bound back read-only. A path
// given under a link to a private root (/var/run, a link to /run) is
// mounted where the link leads: bwrap cannot make a mount point through
// a link on the read-only root.
//
// TMPDIR is the private /tmp inside: one the caller's environment names
// elsewhere under /tmp is not there, and one outside it is read-only.
func (s *Sandbox) Command(spec Spec, argv []string) []string {
	h := readHost(s.needs)
	var ms []mount
	add := func(kind, src, dest string) {
		if dest == "" {
			return
		}
		ms = append(ms, mount{kind: kind, src: filepath.Clean(src), dest: h.dest(filepath.Clean(dest))})
	}
	for _, root := range h.private {
		add(kindPrivate, "", root)
	}
	for _, b := range h.keep {
		add("--ro-bind", b.Src, b.Dest)
	}
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
	rank := map[string]int{kindPrivate: -1, "--bind": 0, "--ro-bind": 1, "--tmpfs": 2}
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
		if m.kind == "--tmpfs" || m.kind == kindPrivate {
			out = append(out, "--tmpfs", m.dest)
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

// kindPrivate is a private root's tmpfs in Command's mounts: a tmpfs
// that a path given at the same depth is laid over.
const kindPrivate = "private"

// PrivateRoots are the directories a sandbox gets an empty tmpfs of its
// own in place of: the host's /tmp, and where the host's servers keep
// their Unix sockets and shared files. A read-only mount does not stop a
// connect() on a socket: through one under /run a session drove the
// operator's tmux server (commands run outside the sandbox, as the
// operator), and D-Bus, systemd's private socket, screen, Docker,
// containerd and PostgreSQL's peer-authenticated socket live there too.
// /var/run is most often a link to /run; /dev/shm is private already
// (bwrap's --dev makes a /dev of the sandbox's own).
func PrivateRoots() []string { return []string{"/tmp", "/run", "/var/run", "/var/tmp"} }

// PrivateRoot is the private root path lies in (itself included), if any:
// a path there the sandbox needs must be bound back.
func PrivateRoot(path string) (root string, ok bool) {
	path = filepath.Clean(path)
	for _, r := range PrivateRoots() {
		if path == r || strings.HasPrefix(path, r+"/") {
			return r, true
		}
	}
	return "", false
}

// host is what Command reads of the host for each sandbox (a few system
// calls: the links may change while the daemon runs, and a bind whose
// source has gone makes bwrap fail).
type host struct {
	// private are the private roots that are directories here (/tmp
	// always); a root that is a link is private through its target.
	private []string
	// links are the private roots that are links into another (/var/run
	// to /run), to where they lead.
	links map[string]string
	// keep are the files of the private roots a session needs, bound
	// back read-only.
	keep []Bind
}

func readHost(needs []string) host {
	h := host{private: []string{"/tmp"}}
	for _, root := range PrivateRoots()[1:] {
		fi, err := os.Lstat(root)
		switch {
		case err != nil:
		case fi.IsDir():
			h.private = append(h.private, root)
		case fi.Mode()&os.ModeSymlink != 0:
			// A link elsewhere (/var/tmp to a disk of its own) is left
			// as it is: hiding where it leads could hide what the
			// sandbox is given there.
			if to, err := filepath.EvalSymlinks(root); err == nil && h.isPrivate(to) {
				if h.links == nil {
					h.links = map[string]string{}
				}
				h.links[root] = to
			}
		}
	}
	for _, p := range needs {
		h.keep = append(h.keep, h.needed(p)...)
	}
	return h
}

// dest is where in the sandbox a mount at path is made: under a private
// root that is a link, where the link leads.
func (h host) dest(path string) string {
	for link, to := range h.links {
		if path == link || strings.HasPrefix(path, link+"/") {
			return to + strings.TrimPrefix(path, link)
		}
	}
	return path
}

// isPrivate reports whether path lies in one of h's private roots (as
// h.dest names it).
func (h host) isPrivate(path string) bool {
	for _, root := range h.private {
		if path == root || strings.HasPrefix(path, root+"/") {
			return true
		}
	}
	return false
}

// needed binds back what the file at path (outside the private roots)
// needs of them: DNS keeps working where /etc/resolv.conf is a link into
// /run (systemd-resolved's stub-resolv.conf, NetworkManager's,
// resolvconf's). The file it leads to is bound read-only at each link on
// the way that lies in a private root, and at itself. A file, not its
// directory: systemd-resolved keeps a socket beside it.
func (h host) needed(path string) []Bind {
	final, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil
	}
	if fi, err := os.Stat(final); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	var out []Bind
	p := path
	for range 40 { // the kernel's own bound on links followed
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			break
		}
		to, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(p), to)
		}
		p = filepath.Clean(to)
		// A link in a private root is gone in the sandbox: the file is
		// bound at the very path named, its directories made in the
		// tmpfs. A path outside them that leads into one through a
		// directory's link on the read-only root is bound where it leads.
		dest := h.dest(p)
		if !h.isPrivate(dest) {
			if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
				dest = filepath.Join(dir, filepath.Base(p))
			}
		}
		if h.isPrivate(dest) {
			out = append(out, Bind{Src: final, Dest: dest})
		}
	}
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
