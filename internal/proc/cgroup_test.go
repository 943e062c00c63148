package proc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/cgroup"
)

// cgroupSupervisor is a supervisor whose trees get cgroups, or a loud skip
// where this machine has no writable cgroup v2.
func cgroupSupervisor(t *testing.T) (*Supervisor, *cgroup.Hierarchy) {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	h, err := cgroup.Open("swarmd-proc-test-" + hex.EncodeToString(b[:]))
	if errors.Is(err, cgroup.ErrUnavailable) {
		t.Skipf("*** cgroup v2 not writable here: %v: this test did NOT run", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := newSupervisor(t)
	s.UseCgroups(h)
	t.Cleanup(func() { _ = h.Close() })
	return s, h
}

// With a cgroup per tree, a process that leaves everything behind (its
// environment, its process group, its session: env -i setsid) still dies
// with the tree's kill, a freeze stops the whole tree and a thaw resumes
// it, and the tree's CPU is accounted.
func TestCgroupTreeNothingEscapes(t *testing.T) {
	s, h := cgroupSupervisor(t)
	beats := t.TempDir() + "/beats"
	out := newLineSink()
	tr, err := s.Start(Spec{Path: "/bin/sh", ID: "escaper-1", Output: out,
		Args: []string{"-c", "env -i setsid sh -c 'echo $$; while :; do echo x >> " + beats + "; sleep 0.01; done' & wait"}})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(out.next(t))
	if err != nil {
		t.Fatal(err)
	}
	if sid, _ := unix.Getsid(pid); sid != pid {
		t.Fatalf("the escaper %d is not in a session of its own (sid %d)", pid, sid)
	}
	if env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); strings.Contains(string(env), MarkerEnv) {
		t.Fatalf("the escaper kept the marker: env -i did not clear it")
	}
	dir := h.Dir() + "/escaper-1"
	if b, err := os.ReadFile(dir + "/cgroup.procs"); err != nil || !strings.Contains(string(b), strconv.Itoa(pid)) {
		t.Fatalf("the escaper is not in the tree's cgroup (%v): %s", err, b)
	}

	n, err := tr.Freeze()
	if err != nil || n < 2 {
		t.Fatalf("Freeze = %d, %v; want the leader and the escaper at least", n, err)
	}
	frozen := fileSize(beats)
	time.Sleep(100 * time.Millisecond) // a frozen writer must show no progress over a while
	if got := fileSize(beats); got != frozen {
		t.Fatalf("the escaper wrote %d bytes while its tree was frozen", got-frozen)
	}
	if _, err := tr.Thaw(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the escaper to go on after the thaw", func() bool { return fileSize(beats) > frozen })

	if err := tr.Kill(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, tr)
	// Done means all of the tree is dead, the escaper outside its group,
	// session and marker included: not dying, dead.
	if st := stateOf(pid); st != "" && st != "Z" {
		t.Fatalf("the escaper is %q when its tree is done", st)
	}
	if n := s.walks.Load(); n != 0 {
		t.Errorf("the tree's end walked the children %d times: its cgroup says when it is dead", n)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the tree's cgroup is left: %v", err)
	}
	if st := tr.Exit(); st.CPU <= 0 {
		t.Errorf("the tree's CPU = %v, want the cgroup's accounting", st.CPU)
	}
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func stateOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// A tree over its MemoryMax is killed by the kernel, and its ExitStatus
// says so (OOMKills), where the memory controller is delegated to swarmd;
// skipped loudly where it is not (a hybrid host's cgroup v2 has none).
func TestCgroupMemoryMaxOOMKilled(t *testing.T) {
	s, h := cgroupSupervisor(t)
	if !h.Has("memory") {
		t.Skipf("*** the memory controller is not delegated here (controllers: %v): this test did NOT run", h.Controllers())
	}
	tr, err := s.Start(Spec{Path: "/bin/sh", ID: "hog-1", MemoryMax: 32 << 20,
		Args: []string{"-c", `awk 'BEGIN { s = "x"; while (1) s = s s }'`}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Done():
	case <-time.After(waitLimit):
		_ = tr.Kill()
		t.Fatal("a tree over its memory.max was not killed")
	}
	if st := tr.Exit(); st.OOMKills == 0 {
		t.Fatalf("exit %v with no OOM kill counted", st)
	}
}
