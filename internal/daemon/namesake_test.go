package daemon

import (
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

func TestMaybeLiveNamesakes(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	self := store.Lease{Daemon: "h:/s", PID: 100, Boot: "boot-a"}
	gone := func(pid int) bool { return pid == 7 }
	lease := func(agent string, pid int, boot string, exp time.Duration) store.Lease {
		return store.Lease{Agent: agent, Daemon: "h:/s", PID: pid, Boot: boot, Expires: now.Add(exp), Epoch: 1}
	}
	other := lease("o", 9, "boot-b", time.Minute)
	other.Daemon = "other:/s"
	ls := []store.Lease{
		lease("dead", 7, "boot-a", time.Minute),     // this boot, pid gone: the predecessor
		lease("self", 100, "boot-a", time.Minute),   // this very process
		lease("local", 8, "boot-a", time.Minute),    // this boot, pid alive
		lease("remote", 7, "boot-b", time.Minute),   // another boot: its pid says nothing here
		lease("legacy", 8, "", time.Minute),         // written before boots were kept
		lease("expired", 8, "boot-b", -time.Second), // expired: taken as any
		lease("unnamed", 8, "boot-b", time.Minute),  // not an agent of the config
		other, // another daemon's: the store refuses it
	}
	agents := map[string]bool{"dead": true, "self": true, "local": true, "remote": true, "legacy": true, "expired": true, "o": true}
	got := maybeLive(ls, self, store.Lease{}, agents, now, gone)
	var names []string
	for _, l := range got {
		names = append(names, l.Agent)
	}
	if len(names) != 2 || names[0] != "local" || names[1] != "remote" {
		t.Fatalf("maybe live = %v, want [local remote]", names)
	}
	// A daemon that cannot read its own boot id waits on none: it cannot
	// tell, and does as before.
	if got := maybeLive(ls, store.Lease{Daemon: "h:/s", PID: 100}, store.Lease{}, agents, now, gone); len(got) != 0 {
		t.Fatalf("maybe live without a boot id = %+v, want none", got)
	}
}

// TestMaybeLiveAcrossPidNamespaces: a boot is the machine's boot id and
// the holder's pid namespace. A pid of another namespace on this machine
// (another container) says nothing here, even this daemon's own pid (both
// pid 1); the last holder of this daemon's state dir's lock on this boot
// is its predecessor, in whatever namespace it ran; on another machine's
// boot (a clone of the state dir) it is not.
func TestMaybeLiveAcrossPidNamespaces(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	self := store.Lease{Daemon: "h:/s", PID: 1, Boot: "boot-a/pid:[2]"}
	gone := func(int) bool { return true }
	lease := func(agent string, pid int, boot string) store.Lease {
		return store.Lease{Agent: agent, Daemon: "h:/s", PID: pid, Boot: boot, Expires: now.Add(time.Minute), Epoch: 1}
	}
	ls := []store.Lease{
		lease("same-pid", 1, "boot-a/pid:[3]"), // another container's pid 1
		lease("gone-pid", 7, "boot-a/pid:[3]"), // a pid not to be seen from here
		lease("prev", 1, "boot-a/pid:[4]"),     // the state dir's last holder: a container restarted
		lease("clone", 1, "boot-b/pid:[4]"),    // the last holder's identity, another machine's boot
	}
	agents := map[string]bool{"same-pid": true, "gone-pid": true, "prev": true, "clone": true}
	names := func(ls []store.Lease) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Agent)
		}
		return out
	}
	got := names(maybeLive(ls, self, store.Lease{PID: 1, Boot: "boot-a/pid:[4]"}, agents, now, gone))
	if len(got) != 3 || got[0] != "same-pid" || got[1] != "gone-pid" || got[2] != "clone" {
		t.Fatalf("maybe live = %v, want [same-pid gone-pid clone]", got)
	}
	clone := store.Lease{PID: 1, Boot: "boot-b/pid:[4]"} // a cloned state dir's lock file
	if got := names(maybeLive(ls[3:], self, clone, agents, now, gone)); len(got) != 1 {
		t.Fatalf("maybe live with a clone's lock file = %v, want [clone]", got)
	}
}

func TestRenewedSince(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	w := store.Lease{Agent: "x", Daemon: "h:/s", PID: 8, Boot: "b", Expires: now.Add(10 * time.Second), Epoch: 3}
	waiting := map[string]store.Lease{"x": w}
	same := w
	if _, ok, left := renewedSince(waiting, []store.Lease{same}, now); ok || len(left) != 1 {
		t.Fatalf("unchanged lease: renewed %v, left %v; want waiting on", ok, left)
	}
	renewed := w
	renewed.Expires = w.Expires.Add(time.Second)
	if l, ok, _ := renewedSince(waiting, []store.Lease{renewed}, now); !ok || l.Agent != "x" {
		t.Fatalf("renewed lease: %+v, %v; want refused", l, ok)
	}
	retaken := w
	retaken.Epoch = 4
	if _, ok, _ := renewedSince(waiting, []store.Lease{retaken}, now); !ok {
		t.Fatal("a lease taken again under the name: not seen")
	}
	if _, ok, left := renewedSince(waiting, []store.Lease{same}, w.Expires); ok || len(left) != 0 {
		t.Fatalf("expired lease: renewed %v, left %v; want done", ok, left)
	}
	if _, ok, left := renewedSince(waiting, nil, now); ok || len(left) != 0 {
		t.Fatalf("released lease: renewed %v, left %v; want done", ok, left)
	}
	taken := w
	taken.Daemon, taken.Epoch = "other:/s", 4
	if _, ok, left := renewedSince(waiting, []store.Lease{taken}, now); ok || len(left) != 0 {
		t.Fatalf("lease another daemon took: renewed %v, left %v; want done (the store refuses it)", ok, left)
	}
}
