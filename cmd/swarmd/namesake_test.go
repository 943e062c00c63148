package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
)

// TestNamesakeDaemonsNeverRunAnAgentTogether: two daemons on two machines
// with the same host name and the same state dir path (a mount namespace
// each stands for a machine: the one path holds a different repository in
// each) both name agent x. A daemon's leases are held under host:state
// dir, so the second takes x from the first as a restart of it would. The
// first must then stop x's session and leave x to it: it did neither (its
// renewal, of every lease under its name, took the new epoch as its own),
// and x ran on both for good.
func TestNamesakeDaemonsNeverRunAnAgentTogether(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mount namespaces")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	srv := pgtest.Require(t)
	if err := srv.CreateDB("namesake"); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	shared := t.TempDir() // the path both machines run their daemon in
	config := func(who string) string {
		return fenceConfig(t, fenceCfg{Store: srv.URL("namesake"), Lease: "3s", Out: out, Who: who, Script: sleeperScript})
	}
	start := func(who string) *daemonProc {
		repo := filepath.Dir(config(who))
		d := startDaemonCmd(t, exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c",
			`mount --bind "$1" "$2" && exec "$3" run --config "$2/swarmd.yaml" --log-format json --log-level debug`,
			"sh", repo, shared, swarmdBin))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("daemon %s's log:\n%s", who, d.log())
			}
		})
		return d
	}
	// The sessions of x running on machine who: its processes carry the
	// shared state dir's marker, in the mount namespace of its daemon.
	running := func(d *daemonProc) int {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", d.cmd.Process.Pid))
		if err != nil {
			return 0
		}
		n := 0
		for _, p := range treeProcesses(filepath.Join(shared, ".swarm")) {
			pid, _, _ := strings.Cut(p, ":")
			if pns, _ := os.Readlink("/proc/" + pid + "/ns/mnt"); pns == ns && strings.Contains(p, "sleep") {
				n++
			}
		}
		return n
	}
	a := start("a")
	waitUntil(t, "x's session on A", func() bool { return running(a) == 1 })
	b := start("b")
	waitUntil(t, "x's session on B", func() bool { return running(b) == 1 })
	bStarted := time.Now()
	// A's next renewal (a third of 3 s) finds x's lease taken: it stops
	// x's session (its grace period, 1 s) and leaves x to B.
	waitUntil(t, "x's session on A gone", func() bool { return running(a) == 0 })
	if took := time.Since(bStarted); took > 3*time.Second {
		t.Errorf("x ran on both machines for %s", took)
	}
	// Three renewals of each later, x runs on B alone.
	a.waitLine("A finds x's lease lost", func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "agent leases lost")
	})
	for range 3 {
		a.waitNext("a renewal of A that finds x's lease still lost", func(m map[string]any) bool {
			return m["msg"] == "agent leases still lost"
		})
	}
	if ra, rb := running(a), running(b); ra != 0 || rb != 1 {
		t.Errorf("x's sessions: %d on A, %d on B; want B's alone", ra, rb)
	}
	for _, d := range []*daemonProc{a, b} {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
	}
	// A waits for a lease of x to record its session's end: a second
	// signal force-stops it.
	a.waitLine("A stopping", func(m map[string]any) bool { return strings.HasPrefix(fmt.Sprint(m["msg"]), "signal received") })
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(30 * time.Second)
	b.wait(30 * time.Second)
}
