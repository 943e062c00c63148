// Package cgroup gives every process tree swarmd starts a cgroup v2 of its
// own, under the daemon's own cgroup: a tree's leader starts inside it
// (clone3 with CLONE_INTO_CGROUP, so not even its first fork is outside),
// and everything it starts stays inside whatever it does with its process
// group, session or environment. Killing the cgroup (cgroup.kill) ends all
// of it; freezing it (cgroup.freeze) stops all of it; cpu.stat says what it
// cost; memory.max bounds it where the memory controller is delegated.
//
// The hierarchy is found where it is mounted: /sys/fs/cgroup on a unified
// host, /sys/fs/cgroup/unified on a hybrid one (cgroup.kill, cgroup.freeze
// and cpu.stat work there, but no controller does).
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/sysfile"
)

// ErrUnavailable is wrapped by Open's error when this process cannot give
// its children cgroups: no cgroup v2 mount, or none this process may write.
var ErrUnavailable = errors.New("cgroup v2 is not available")

// Hierarchy is where the trees' cgroups are made: one directory under the
// daemon's own cgroup.
type Hierarchy struct {
	mount       string   // where cgroup v2 is mounted
	dir         string   // the parent of every tree's cgroup
	controllers []string // enabled for the trees (memory, cpu, pids where delegated)
	// watches bounds the trees' ends waiting on inotify at once
	// (Group.WaitEmpty): each holds an inotify instance, of which a user
	// has 128 by default, shared with every other program of the user.
	watches chan struct{}
	// sleep spaces WaitEmpty's looks; nil is time.Sleep (a test's hook).
	sleep func(time.Duration)
}

// maxWatches is how many trees' ends wait on inotify at once; the others
// poll, as where there is no inotify.
const maxWatches = 16

// Open finds the cgroup v2 hierarchy and this process's cgroup in it, and
// makes the directory name under it for the trees' cgroups (a directory
// left by an earlier run is reused). On a hierarchy with controllers it
// enables memory, cpu and pids for the trees where the daemon's cgroup has
// them, moving the daemon into a leaf of its own first if the kernel's
// no-internal-process rule requires it.
func Open(name string) (*Hierarchy, error) {
	mount, err := mountPoint("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	base := filepath.Join(mount, own)
	h := &Hierarchy{mount: mount, dir: filepath.Join(base, name), watches: make(chan struct{}, maxWatches)}
	if err := os.Mkdir(h.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%w: make %s: %v", ErrUnavailable, h.dir, err)
	}
	if err := probe(h.dir); err != nil {
		return nil, err
	}
	h.controllers = delegate(base, h.dir)
	return h, nil
}

// TreeOf names the tree cgroup under h that process pid is in; ok is false
// when it is in none of them or is gone. The kernel says, not the process:
// it cannot be forged from inside a sandbox, where the hierarchy is
// read-only.
func (h *Hierarchy) TreeOf(pid int) (id string, ok bool) {
	own, err := ownCgroup("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", false
	}
	rel, ok := strings.CutPrefix(filepath.Join(h.mount, own), h.dir+"/")
	if !ok {
		return "", false
	}
	id, _, _ = strings.Cut(rel, "/")
	return id, id != ""
}

// Dir is the parent directory of the trees' cgroups.
func (h *Hierarchy) Dir() string { return h.dir }

// Controllers are the controllers enabled for the trees' cgroups (none on
// a hybrid host).
func (h *Hierarchy) Controllers() []string { return slices.Clone(h.controllers) }

// Has reports whether controller c is enabled for the trees.
func (h *Hierarchy) Has(c string) bool { return slices.Contains(h.controllers, c) }

// Close removes the trees' parent directory when no tree's cgroup is left
// in it (best effort: a busy one stays for the next run).
func (h *Hierarchy) Close() error {
	_ = unix.Rmdir(h.dir)
	return nil
}

// RemoveLeft kills and removes the trees' cgroups an earlier run left in
// h, and returns how many. A daemon killed before its trees ended leaves
// one per tree; a tree's name never comes again, so New never replaces
// them, and the directory would hold them for good. Call it before the
// first New: every cgroup in h is taken for a leftover (the state
// directory's lock says no other daemon makes trees here).
func (h *Hierarchy) RemoveLeft() (int, error) {
	ents, err := os.ReadDir(h.dir)
	if err != nil {
		return 0, fmt.Errorf("cgroup: trees left in %s: %w", h.dir, err)
	}
	n := 0
	var errs []error
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if err := removeAll(filepath.Join(h.dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// removeAll removes cgroup dir and the cgroups in it, the deepest first (an
// unsandboxed tree may have made its own), killing what runs in them.
func removeAll(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup: remove %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return (&Group{dir: dir, fd: -1}).Remove()
}

// Limits are a tree's bounds; zero values are none.
type Limits struct {
	MemoryMax int64 // bytes; needs the memory controller
}

// New makes the cgroup of tree id (a directory name) with limits, and
// opens it for CLONE_INTO_CGROUP. A cgroup of that name left by a killed
// daemon is killed and replaced.
func (h *Hierarchy) New(id string, l Limits) (*Group, error) {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return nil, fmt.Errorf("cgroup: new: bad name %q", id)
	}
	dir := filepath.Join(h.dir, id)
	if err := os.Mkdir(dir, 0o755); errors.Is(err, os.ErrExist) {
		old := &Group{dir: dir, fd: -1}
		if err := old.Remove(); err != nil {
			return nil, fmt.Errorf("cgroup: new %s: a cgroup of that name is left and cannot be removed: %w", id, err)
		}
		err = os.Mkdir(dir, 0o755)
		if err != nil {
			return nil, fmt.Errorf("cgroup: new %s: %w", id, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("cgroup: new %s: %w", id, err)
	}
	g := &Group{dir: dir, fd: -1, watches: h.watches, sleep: h.sleep}
	if l.MemoryMax > 0 && h.Has("memory") {
		if err := g.write("memory.max", strconv.FormatInt(l.MemoryMax, 10)); err != nil {
			_ = g.Remove()
			return nil, fmt.Errorf("cgroup: new %s: %w", id, err)
		}
		// A session over its limit is killed whole, not left half-alive.
		_ = g.write("memory.oom.group", "1")
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = g.Remove()
		return nil, fmt.Errorf("cgroup: new %s: %w", id, err)
	}
	g.fd = fd
	return g, nil
}

// Group is one tree's cgroup.
type Group struct {
	dir     string
	fd      int           // the directory, open for CLONE_INTO_CGROUP; -1 once closed
	watches chan struct{} // its hierarchy's bound on inotify waits; nil, none
	sleep   func(time.Duration)
}

// look sleeps d between two of WaitEmpty's reads.
func (g *Group) look(d time.Duration) {
	if g.sleep != nil {
		g.sleep(d)
		return
	}
	time.Sleep(d)
}

// Dir is the cgroup's directory.
func (g *Group) Dir() string { return g.dir }

// FD is the cgroup's directory, open: syscall.SysProcAttr.CgroupFD.
func (g *Group) FD() int { return g.fd }

// CloseFD closes the directory New opened: once the leader is in, the
// group needs only its path.
func (g *Group) CloseFD() {
	if g.fd >= 0 {
		_ = unix.Close(g.fd)
		g.fd = -1
	}
}

// Kill kills every process in the cgroup (cgroup.kill): nothing that was
// started in it escapes, whatever it did to its process group or session.
func (g *Group) Kill() error {
	if err := g.write("cgroup.kill", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Freeze stops (on) or thaws every process in the cgroup, and returns once
// the kernel reports it done.
func (g *Group) Freeze(on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	if err := g.write("cgroup.freeze", v); err != nil {
		return err
	}
	want := int64(0)
	if on {
		want = 1
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ev, err := g.keyed("cgroup.events")
		if err != nil {
			return err
		}
		if ev["frozen"] == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: freeze %s=%s: not done after 5s", g.dir, v)
		}
		time.Sleep(time.Millisecond)
	}
}

// Empty reports whether no process is left in the cgroup (cgroup.events
// says "populated 0"). A process counts until it has exited: a zombie
// waiting for its parent to reap it does not, so a tree's end need not wait
// for reaping to know that all of it is dead.
func (g *Group) Empty() (bool, error) {
	b, err := g.read("cgroup.events")
	if err != nil {
		return false, fmt.Errorf("cgroup: %w", err)
	}
	i := bytes.Index(b, []byte("populated "))
	if i < 0 {
		return false, fmt.Errorf("cgroup: %s/cgroup.events has no populated key", g.dir)
	}
	return i+len("populated ") < len(b) && b[i+len("populated ")] == '0', nil
}

// Procs counts the processes in the cgroup.
func (g *Group) Procs() (int, error) {
	b, err := g.read("cgroup.procs")
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	return bytes.Count(b, []byte("\n")), nil
}

// Pids lists the processes in the cgroup.
func (g *Group) Pids() ([]int, error) {
	b, err := g.read("cgroup.procs")
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var pids []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Usage is what a cgroup's processes cost.
type Usage struct {
	CPU      time.Duration // user and system time (cpu.stat usage_usec)
	OOMKills int64         // processes the kernel killed for memory.max (memory.events oom_kill)
}

// Usage reads cpu.stat and, where the memory controller is on, memory.events.
func (g *Group) Usage() (Usage, error) {
	var u Usage
	st, err := g.keyed("cpu.stat")
	if err != nil {
		return u, err
	}
	u.CPU = time.Duration(st["usage_usec"]) * time.Microsecond
	if ev, err := g.keyed("memory.events"); err == nil {
		u.OOMKills = ev["oom_kill"]
	}
	return u, nil
}

// Remove kills what is left in the cgroup, waits until it is empty, and
// removes it.
func (g *Group) Remove() error {
	g.CloseFD()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(g.dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("cgroup: remove %s: %w", g.dir, err)
		}
		_ = g.Kill()
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: remove %s: still busy after 5s", g.dir)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (g *Group) write(file, v string) error {
	if err := sysfile.Write(filepath.Join(g.dir, file), v); err != nil {
		return fmt.Errorf("cgroup: write %s: %w", file, err)
	}
	return nil
}

// read reads one of the cgroup's files (sysfile: each session's start and
// end reads several).
func (g *Group) read(file string) ([]byte, error) {
	return sysfile.Read(filepath.Join(g.dir, file), make([]byte, 0, 512))
}

// keyed reads a flat keyed file ("key value" lines).
func (g *Group) keyed(file string) (map[string]int64, error) {
	b, err := g.read(file)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// mountPoint is where the cgroup2 file system is mounted, from mountinfo.
func mountPoint(mountinfo string) (string, error) {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return parseMountPoint(b)
}

func parseMountPoint(b []byte) (string, error) {
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fs := strings.Fields(post)
		f := strings.Fields(pre)
		if len(fs) > 0 && fs[0] == "cgroup2" && len(f) >= 5 {
			return unescapeMount(f[4]), nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup2 file system is mounted", ErrUnavailable)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroup is this process's cgroup v2 path ("0::/path" in /proc/self/cgroup).
func ownCgroup(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return parseOwnCgroup(b)
}

func parseOwnCgroup(b []byte) (string, error) {
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			if !strings.HasPrefix(p, "/") {
				break
			}
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: this process has no cgroup v2 path", ErrUnavailable)
}

// probe checks that a cgroup can be made and killed under dir.
func probe(dir string) error {
	p := filepath.Join(dir, fmt.Sprintf(".probe-%d", os.Getpid()))
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: make a cgroup under %s: %v", ErrUnavailable, dir, err)
	}
	defer unix.Rmdir(p)
	for _, f := range []string{"cgroup.kill", "cgroup.freeze", "cpu.stat"} {
		if _, err := os.Stat(filepath.Join(p, f)); err != nil {
			return fmt.Errorf("%w: %s has no %s (kernel older than 5.14?)", ErrUnavailable, dir, f)
		}
	}
	return nil
}

// delegate enables the controllers the daemon's cgroup (base) offers for
// the trees under dir, and returns those enabled. Enabling a controller in
// base's subtree_control needs base to hold no process: the daemon then
// moves itself into base/daemon first (as a systemd unit with Delegate=yes
// expects of it).
func delegate(base, dir string) []string {
	avail := fields(filepath.Join(base, "cgroup.controllers"))
	var want []string
	for _, c := range []string{"cpu", "memory", "pids"} {
		if slices.Contains(avail, c) {
			want = append(want, c)
		}
	}
	if len(want) == 0 {
		return nil
	}
	enable := func(d string) error {
		var b strings.Builder
		for _, c := range want {
			b.WriteString("+" + c + " ")
		}
		return os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte(strings.TrimSpace(b.String())), 0)
	}
	if err := enable(base); err != nil {
		// Processes in base: move this process (all its threads) to a leaf.
		leaf := filepath.Join(base, "daemon")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return nil
		}
		if err := enable(base); err != nil {
			return nil
		}
	}
	if err := enable(dir); err != nil {
		return nil
	}
	return fields(filepath.Join(dir, "cgroup.subtree_control"))
}

func fields(file string) []string {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}
