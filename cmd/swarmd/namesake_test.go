package main

import (
	"database/sql"
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
// dir, so the second would take x from the first as a restart of it would,
// and both ran x until the first's next renewal (its start's recovery also
// closed the first's live session row as orphaned). The second now waits
// on a lease under its own name whose holder may be alive: the first
// renews it, and the second refuses to start, having touched nothing.
// Once the first is paused past its lease, the second takes x; the first,
// resumed, leaves x to it.
func TestNamesakeDaemonsNeverRunAnAgentTogether(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	if os.Geteuid() != 0 {
		t.Skip("needs root for mount namespaces")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "namesake")
	out := t.TempDir()
	shared := t.TempDir() // the path both machines run their daemon in
	config := func(who string) string {
		return fenceConfig(t, fenceCfg{Store: srv.URL(dbName), Lease: "3s", Out: out, Who: who, Script: sleeperScript})
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
	running := func(d *daemonProc) int { return sleepersOf(d, shared) }
	db, err := sql.Open("pgx", srv.URL(dbName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	openSessions := func() int {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM sessions WHERE agent = 'x' AND ended_at IS NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := start("a")
	waitUntil(t, "x's session on A", func() bool { return running(a) == 1 })
	waitUntil(t, "x's session row", func() bool { return openSessions() == 1 })

	// B, a namesake of the live A: refused once A renews (a third of 3 s).
	b := start("b")
	exited := func() bool {
		select {
		case <-b.done:
			return true
		default:
			return false
		}
	}
	waitUntil(t, "B refused, or running x", func() bool { return exited() || running(b) > 0 })
	if n := running(b); n > 0 {
		t.Fatalf("namesake B runs x (%d sessions) beside A", n)
	}
	if code := b.wait(10 * time.Second); code != 2 {
		t.Fatalf("namesake B exited %d, want 2 (refused)", code)
	}
	if log := b.log(); !strings.Contains(log, "held under this daemon's own name") || !strings.Contains(log, "give each machine a host name of its own") {
		t.Errorf("B's refusal does not say what is wrong:\n%s", log)
	}
	if n := running(a); n != 1 {
		t.Errorf("x's sessions on A after B's refusal: %d, want 1", n)
	}
	if n := openSessions(); n != 1 {
		t.Errorf("open session rows of x after B's refusal: %d, want A's alone (B closed it as orphaned?)", n)
	}

	// A paused past its lease: its lease guard (a process of its own) ends
	// x's session before the lease runs out, and a namesake then takes x.
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// A stop signal ends a start that waits on such leases, at once.
	b = start("b")
	b.waitLine("B waiting on the leases under its name", func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "leases held under this daemon's own name")
	})
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(2 * time.Second); code != 0 {
		t.Errorf("B stopped while waiting exited %d, want 0", code)
	}
	b = start("b")
	waitUntil(t, "x's session on B", func() bool { return running(b) == 1 })
	if n := running(a); n != 0 {
		t.Errorf("x's session on paused A still runs (%d) while B runs x", n)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
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

// TestRestartAfterKillTakesAgentsAtOnce: a daemon killed (SIGKILL) on a
// shared store and started again on the same machine finds its agents'
// leases under its own name, unexpired, held by a pid of this boot that is
// gone: its dead predecessor's. It takes them back at once, not after the
// wait a lease a namesake may hold gets.
func TestRestartAfterKillTakesAgentsAtOnce(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "restartkill")
	out := t.TempDir()
	cfg := fenceConfig(t, fenceCfg{Store: srv.URL(dbName), Lease: "30s", Out: out, Who: "a", Script: sleeperScript})
	running := func() bool { return len(treeProcesses(filepath.Join(filepath.Dir(cfg), ".swarm"))) > 0 }
	a := startDaemon(t, cfg)
	waitUntil(t, "x's session", running)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait(10 * time.Second)
	// Its lease guard ends the session once the daemon is gone.
	waitUntil(t, "the killed daemon's session ended", func() bool { return !running() })
	restarted := time.Now()
	b := startDaemon(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("restarted daemon's log:\n%s", b.log())
		}
	})
	waitUntil(t, "x's session after the restart", running)
	if took := time.Since(restarted); took > 10*time.Second {
		t.Errorf("the restart took x back after %s; want at once, not after the 30 s lease", took.Round(time.Millisecond))
	}
	if strings.Contains(b.log(), "held under this daemon's own name") {
		t.Error("the restart waited on its own dead predecessor's leases")
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(30 * time.Second); code != 0 {
		t.Errorf("restarted daemon exited %d", code)
	}
}

// startInPidNamespace starts `swarmd run` on repo's config at the path
// shared, in a mount namespace and a pid namespace of its own: a container
// on this machine (same kernel, same boot id), in which the daemon is pid 1
// and no process of the host is to be seen.
func startInPidNamespace(t *testing.T, who, repo, shared string) *daemonProc {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	d := startDaemonCmd(t, exec.Command(unshare, "-m", "-p", "-f", "--mount-proc", "--kill-child", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" "$2" && exec "$3" run --config "$2/swarmd.yaml" --log-format json --log-level debug`,
		"sh", repo, shared, swarmdBin))
	d.inContainer = true
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon %s's log:\n%s", who, d.log())
		}
	})
	return d
}

// TestNamesakeInAPidNamespaceIsRefused: two containers on one machine with
// the same host name (host networking, a StatefulSet's pod copied into
// another namespace and scheduled on the same node) and the same state dir
// path, each its own volume: the same boot id, a pid namespace each. A
// runs x; B starts. The pid A's lease names means nothing in B's pid
// namespace (gone there, or B's own pid: both are pid 1 in their
// containers), so B took A's lease for its dead predecessor's and ran x
// beside A. It must wait, and be refused once A renews.
func TestNamesakeInAPidNamespaceIsRefused(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	if os.Geteuid() != 0 {
		t.Skip("needs root for mount and pid namespaces")
	}
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "namesakepid")
	out := t.TempDir()
	shared := t.TempDir()
	repo := func(who string) string {
		return filepath.Dir(fenceConfig(t, fenceCfg{Store: srv.URL(dbName), Lease: "3s", Out: out, Who: who, Script: sleeperScript}))
	}
	running := func(d *daemonProc) int { return sleepersOf(d, shared) }
	for _, order := range []string{"A in a container, B in another", "A on the host, B in a container"} {
		t.Run(order, func(t *testing.T) {
			var a *daemonProc
			if strings.HasPrefix(order, "A on the host") {
				unshare, _ := exec.LookPath("unshare")
				a = startDaemonCmd(t, exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c",
					`mount --bind "$1" "$2" && exec "$3" run --config "$2/swarmd.yaml" --log-format json --log-level debug`,
					"sh", repo("a"), shared, swarmdBin))
			} else {
				a = startInPidNamespace(t, "a", repo("a"), shared)
			}
			waitUntil(t, "x's session on A", func() bool { return running(a) == 1 })
			b := startInPidNamespace(t, "b", repo("b"), shared)
			exited := func() bool {
				select {
				case <-b.done:
					return true
				default:
					return false
				}
			}
			waitUntil(t, "B refused, or running x", func() bool { return exited() || running(b) > 0 })
			if n := running(b); n > 0 {
				b.kill()
				a.kill()
				t.Fatalf("namesake B, in a pid namespace of its own, runs x (%d sessions) beside A", n)
			}
			if code := b.wait(10 * time.Second); code != 2 {
				t.Errorf("namesake B exited %d, want 2 (refused)", code)
			}
			if n := running(a); n != 1 {
				t.Errorf("x's sessions on A after B's refusal: %d, want 1", n)
			}
			a.kill()
			a.wait(30 * time.Second)
			// Its lease guard ends its session; the next A, a namesake of
			// the dead one, takes x once its lease expires (3 s).
			waitUntil(t, "A's session ended", func() bool { return len(treeProcesses(filepath.Join(shared, ".swarm"))) == 0 })
		})
	}
}

// TestContainerRestartTakesAgentsAtOnce: a daemon in a container (a pid
// namespace of its own, pid 1 there) killed and started again in a new
// container on the same state dir finds its agents' leases under its own
// name, unexpired, held by its dead predecessor: the pid they name was in
// a pid namespace that is gone, but the state dir's lock it held is this
// daemon's now. It takes them back at once.
func TestContainerRestartTakesAgentsAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mount and pid namespaces")
	}
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "containerrestart")
	out := t.TempDir()
	shared := t.TempDir()
	repo := filepath.Dir(fenceConfig(t, fenceCfg{Store: srv.URL(dbName), Lease: "30s", Out: out, Who: "a", Script: sleeperScript}))
	running := func() bool { return len(treeProcesses(filepath.Join(shared, ".swarm"))) > 0 }
	// A host process in the second container's pid 1's place would make
	// the pid look alive: the restart must not depend on the pid at all.
	a := startInPidNamespace(t, "a", repo, shared)
	waitUntil(t, "x's session", running)
	a.kill() // the container is gone, its processes with it
	a.wait(10 * time.Second)
	waitUntil(t, "the killed container's session ended", func() bool { return !running() })
	restarted := time.Now()
	b := startInPidNamespace(t, "a again", repo, shared)
	waitUntil(t, "x's session after the restart", running)
	if took := time.Since(restarted); took > 10*time.Second {
		t.Errorf("the restarted container took x back after %s; want at once, not after the 30 s lease", took.Round(time.Millisecond))
	}
	if strings.Contains(b.log(), "held under this daemon's own name") {
		t.Error("the restarted container waited on its own dead predecessor's leases")
	}
	b.kill()
	b.wait(30 * time.Second)
	waitUntil(t, "the restarted container's session ended", func() bool { return !running() })
}

// sleepersOf counts the sessions of x running on d's machine: processes
// carrying the marker of the state dir under shared, in the mount
// namespace of d (a machine each in these tests).
func sleepersOf(d *daemonProc, shared string) int {
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
