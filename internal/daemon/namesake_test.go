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
	got := maybeLive(ls, self, agents, now, gone)
	var names []string
	for _, l := range got {
		names = append(names, l.Agent)
	}
	if len(names) != 2 || names[0] != "local" || names[1] != "remote" {
		t.Fatalf("maybe live = %v, want [local remote]", names)
	}
	// A daemon that cannot read its own boot id waits on none: it cannot
	// tell, and does as before.
	if got := maybeLive(ls, store.Lease{Daemon: "h:/s", PID: 100}, agents, now, gone); len(got) != 0 {
		t.Fatalf("maybe live without a boot id = %+v, want none", got)
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
