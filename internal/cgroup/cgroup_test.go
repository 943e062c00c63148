package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseMountPoint(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"25 30 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n", "/sys/fs/cgroup"},
		{"30 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified"},
		{"40 30 0:37 / /mnt/my\\040cgroups rw shared:5 - cgroup2 none rw\n", "/mnt/my cgroups"},
	} {
		got, err := parseMountPoint([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("parseMountPoint(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := parseMountPoint([]byte("30 1 8:1 / / rw - ext4 /dev/sda1 rw\n")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no cgroup2: %v, want ErrUnavailable", err)
	}
}

func TestParseOwnCgroup(t *testing.T) {
	got, err := parseOwnCgroup([]byte("4:memory:/x\n0::/system.slice/swarmd.service\n"))
	if err != nil || got != "/system.slice/swarmd.service" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := parseOwnCgroup([]byte("4:memory:/x\n")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("v1 only: %v, want ErrUnavailable", err)
	}
}

// open is a hierarchy of this test's own, or a loud skip where this
// machine cannot give one (not root, no cgroup v2).
func open(t *testing.T) *Hierarchy {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	h, err := Open("swarmd-test-" + hex.EncodeToString(b[:]))
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("*** cgroup v2 not writable here: %v: this test did NOT run", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// A process tree started in a cgroup stays in it whatever it does (a
// child that clears its environment and makes a session of its own), is
// frozen and thawed whole, and is killed whole by Kill.
func TestGroupHoldsFreezesAndKillsTheWholeTree(t *testing.T) {
	h := open(t)
	g, err := h.New("tree-1", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(g.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup left after Remove: %v", err)
		}
	}()
	out := t.TempDir() + "/beats"
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "env -i setsid sleep 300 & while :; do echo x >> " + out + "; done"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: g.FD()},
	})
	if err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { // reap the leader; the escaped child is init's or a subreaper's
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
		close(reaped)
	}()
	waitFor(t, "2 processes in the cgroup", func() bool { n, _ := g.Procs(); return n == 2 })
	waitFor(t, "the loop to write", func() bool { return size(t, out) > 0 })
	var escaped int
	waitFor(t, "the setsid child, in a session of its own", func() bool { escaped = otherPid(g, pid); return escaped > 0 })
	if sid, _ := unix.Getsid(escaped); sid == pid {
		t.Fatalf("the setsid child is in the leader's session")
	}

	// The kernel names each process's tree, the escaped one's included;
	// this process is in none.
	for _, p := range []int{pid, escaped} {
		if id, ok := h.TreeOf(p); !ok || id != "tree-1" {
			t.Errorf("TreeOf(%d) = %q, %v; want tree-1", p, id, ok)
		}
	}
	if id, ok := h.TreeOf(os.Getpid()); ok {
		t.Errorf("TreeOf(self) = %q: the daemon is in no tree", id)
	}

	// Frozen, the loop writes nothing; thawed, it goes on.
	if err := g.Freeze(true); err != nil {
		t.Fatal(err)
	}
	frozen := size(t, out)
	time.Sleep(50 * time.Millisecond) // a frozen writer must show no progress over a while
	if got := size(t, out); got != frozen {
		t.Fatalf("the loop wrote %d bytes while frozen", got-frozen)
	}
	if err := g.Freeze(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the loop to go on after the thaw", func() bool { return size(t, out) > frozen })

	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	<-reaped
	waitFor(t, "an empty cgroup", func() bool { n, _ := g.Procs(); return n == 0 })
	if err := unix.Kill(escaped, 0); err == nil {
		// A zombie of another parent is dead; anything else escaped.
		if st := procState(escaped); st != "Z" && st != "" {
			t.Fatalf("the setsid child %d survived cgroup.kill (state %s)", escaped, st)
		}
	}
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPU <= 0 {
		t.Errorf("cpu.stat usage %v after three processes ran", u.CPU)
	}
}

func otherPid(g *Group, leader int) int {
	b, err := os.ReadFile(g.Dir() + "/cgroup.procs")
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(string(b)) {
		p, _ := strconv.Atoi(f)
		if p != leader {
			if cmd, _ := os.ReadFile("/proc/" + f + "/cmdline"); strings.HasPrefix(string(cmd), "sleep") && procSession(p) != leader {
				return p
			}
		}
	}
	return 0
}

func procSession(pid int) int {
	sid, _ := unix.Getsid(pid)
	return sid
}

func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newGroup makes cgroup name under h, removed when the test ends.
func newGroup(t *testing.T, h *Hierarchy, name string) *Group {
	t.Helper()
	g, err := h.New(name, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// sleepIn starts `sleep secs` born in g and returns its pid; when the test
// ends g is killed and the sleep reaped (before newGroup's Remove).
func sleepIn(t *testing.T, g *Group, secs string) int {
	t.Helper()
	pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", secs}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: g.FD()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.Kill()
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
	})
	return pid
}

// Empty turns true once every process of the cgroup has exited, before
// their parent reaps them: a tree's end waits for its processes to die, not
// for the reaper.
func TestEmptyOnceDeadNotReaped(t *testing.T) {
	g := newGroup(t, open(t), "tree-empty")
	pid := sleepIn(t, g, "300")
	if empty, err := g.Empty(); err != nil || empty {
		t.Fatalf("Empty with a live sleep = %v, %v; want false", empty, err)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sleep to be a zombie", func() bool { return procState(pid) == "Z" })
	waitFor(t, "Empty while the zombie is unreaped", func() bool {
		empty, err := g.Empty()
		if err != nil {
			t.Fatal(err)
		}
		return empty
	})
	if st := procState(pid); st != "Z" {
		t.Fatalf("the sleep is %q, not a zombie: it was reaped, so the test proved nothing", st)
	}
}

// WaitEmpty returns once the cgroup's last process has died (told by the
// kernel, not found by polling), at once for an empty cgroup, and false
// at its deadline while a process lives.
func TestWaitEmptyFollowsTheKernelsEvent(t *testing.T) {
	g := newGroup(t, open(t), "tree-wait")
	if empty, err := g.WaitEmpty(time.Now().Add(time.Minute)); err != nil || !empty {
		t.Fatalf("WaitEmpty of an empty cgroup = %v, %v; want true at once", empty, err)
	}

	// A process that ends by itself a moment after the wait began: only
	// the kernel's event ends the wait before its deadline. (Before any
	// Kill: a process cloned into a cgroup that was killed may be killed
	// too, by kernels that compare the cgroup's kill count with its
	// parent's.)
	sleepIn(t, g, "0.3")
	began := time.Now()
	if empty, err := g.WaitEmpty(began.Add(30 * time.Second)); err != nil || !empty {
		t.Fatalf("WaitEmpty for a sleep of 0.3 s = %v, %v; want true", empty, err)
	}
	if waited := time.Since(began); waited > 10*time.Second || waited < 200*time.Millisecond {
		t.Fatalf("WaitEmpty saw a sleep of 0.3 s gone after %v: want its end, well before the deadline", waited)
	}

	sleepIn(t, g, "300")
	began = time.Now()
	if empty, err := g.WaitEmpty(began.Add(50 * time.Millisecond)); err != nil || empty {
		t.Fatalf("WaitEmpty with a live sleep = %v, %v; want false at the deadline", empty, err)
	}
	if waited := time.Since(began); waited < 50*time.Millisecond {
		t.Fatalf("WaitEmpty with a live sleep returned after %v, before its deadline", waited)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if empty, err := g.WaitEmpty(time.Now().Add(30 * time.Second)); err != nil || !empty {
		t.Fatalf("WaitEmpty after Kill = %v, %v; want true", empty, err)
	}
}

// Only maxWatches trees' ends wait on inotify at once (each holds one of
// the user's inotify instances, 128 by default for every program of the
// user): past that, WaitEmpty says ErrNoWatch and the caller polls.
func TestWaitEmptyBoundsItsWatches(t *testing.T) {
	h := open(t)
	g := newGroup(t, h, "tree-bound")
	sleepIn(t, g, "300")
	for range maxWatches {
		h.watches <- struct{}{} // as many waits as may be
	}
	if _, err := g.WaitEmpty(time.Now().Add(time.Minute)); !errors.Is(err, ErrNoWatch) {
		t.Fatalf("WaitEmpty with every watch taken = %v; want ErrNoWatch at once", err)
	}
	<-h.watches
	if empty, err := g.WaitEmpty(time.Now().Add(20 * time.Millisecond)); err != nil || empty {
		t.Fatalf("WaitEmpty with a watch free = %v, %v; want false at its deadline", empty, err)
	}
	if got := len(h.watches); got != maxWatches-1 {
		t.Fatalf("%d watches taken after the wait, want %d: it did not give its own back", got, maxWatches-1)
	}
}

// WaitEmpty reads the cgroup a few times, 50µs to 3.2ms apart, before it
// watches it: a tree that empties a moment after the wait began (a
// sandbox's init ending after its leader) is seen by a read, without the
// watch, whose event the kernel may send 10 ms late. Every watch is taken
// here, so a wait that watched would say ErrNoWatch.
func TestWaitEmptyLooksBeforeItWatches(t *testing.T) {
	h := open(t)
	var looks []time.Duration
	var g *Group
	h.sleep = func(d time.Duration) {
		looks = append(looks, d)
		if g == nil {
			return
		}
		// The tree ends during the first look.
		if err := g.Kill(); err != nil {
			t.Error(err)
		}
		waitFor(t, "the killed sleep's cgroup to empty", func() bool {
			empty, err := g.Empty()
			return err == nil && empty
		})
	}
	for range maxWatches {
		h.watches <- struct{}{}
	}
	t.Cleanup(func() {
		for range maxWatches {
			<-h.watches
		}
	})

	g = newGroup(t, h, "tree-look")
	sleepIn(t, g, "300")
	if empty, err := g.WaitEmpty(time.Now().Add(time.Minute)); err != nil || !empty {
		t.Fatalf("WaitEmpty of a tree that ended during a look = %v, %v; want true, without a watch", empty, err)
	}
	if want := []time.Duration{firstLook}; !slices.Equal(looks, want) {
		t.Fatalf("looks = %v, want %v: the tree ended in the first", looks, want)
	}

	// A tree that lives on: the looks, then the watch (none free here).
	g, looks = nil, nil
	live := newGroup(t, h, "tree-look-live")
	sleepIn(t, live, "300")
	if _, err := live.WaitEmpty(time.Now().Add(time.Minute)); !errors.Is(err, ErrNoWatch) {
		t.Fatalf("WaitEmpty of a live tree with every watch taken = %v; want ErrNoWatch after the looks", err)
	}
	want := []time.Duration{50 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond,
		400 * time.Microsecond, 800 * time.Microsecond, 1600 * time.Microsecond, 3200 * time.Microsecond}
	if !slices.Equal(looks, want) {
		t.Fatalf("looks = %v, want %v", looks, want)
	}
}

// A daemon killed before its trees ended leaves their cgroups, which no
// later New replaces (a tree's name never comes again): the next run in
// the same hierarchy kills what still runs in them and removes them,
// nested ones included.
func TestRemoveLeftTakesAnEarlierRunsTrees(t *testing.T) {
	h := open(t)
	empty := newGroup(t, h, "a-1-ended")
	live := newGroup(t, h, "a-2-running")
	pid := sleepIn(t, live, "300")
	nested := newGroup(t, h, "a-3-nested")
	if err := os.Mkdir(filepath.Join(nested.Dir(), "its-own"), 0o755); err != nil {
		t.Fatal(err)
	}

	next, err := Open(filepath.Base(h.Dir())) // the next run
	if err != nil {
		t.Fatal(err)
	}
	n, err := next.RemoveLeft()
	if err != nil || n != 3 {
		t.Fatalf("RemoveLeft = %d, %v; want 3 removed", n, err)
	}
	for _, g := range []*Group{empty, live, nested} {
		if _, err := os.Stat(g.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after RemoveLeft: %v; want it gone", g.Dir(), err)
		}
	}
	waitFor(t, "the left tree's sleep to die", func() bool { return procState(pid) == "Z" })
	if n, err := next.RemoveLeft(); err != nil || n != 0 {
		t.Fatalf("RemoveLeft again = %d, %v; want nothing left", n, err)
	}
}
