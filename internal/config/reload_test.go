package config

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestKeepRestartKeys: a reload's config keeps the running value of every
// key only a restart applies, and names each one it changed; everything
// else, merge.max_rejections included, is the new config's.
func TestKeepRestartKeys(t *testing.T) {
	running := load(t, "testdata/full.yaml")
	next := load(t, "testdata/full.yaml")
	if got := next.KeepRestartKeys(running); len(got) != 0 {
		t.Fatalf("the same config: changed %v, want none", got)
	}

	next.Remote = "elsewhere"
	next.LeaseTimeout += time.Second
	next.Store = "postgres://db/swarm"
	next.Hooks.SessionEnd = append(next.Hooks.SessionEnd, "true")
	next.Limits.DaemonTimerSlack = 0
	next.Notify.Webhook = "https://example.invalid/hook"
	merge := *next.Merge
	merge.Into = "release"
	merge.MaxRejections++
	next.Merge = &merge
	next.Limits.MaxRunning++ // applied at once
	next.StallAfter += time.Minute
	want := next.Limits.MaxRunning

	got := next.KeepRestartKeys(running)
	if w := []string{"hooks", "lease_timeout", "limits.daemon_timer_slack", "merge", "notify", "remote", "store"}; !slices.Equal(got, w) {
		t.Errorf("changed keys = %v, want %v", got, w)
	}
	if next.Remote != running.Remote || next.LeaseTimeout != running.LeaseTimeout || next.Store != running.Store ||
		!reflect.DeepEqual(next.Hooks, running.Hooks) || next.Limits.DaemonTimerSlack != running.Limits.DaemonTimerSlack ||
		next.Notify != running.Notify {
		t.Errorf("a restart key kept its new value: %+v", next)
	}
	if next.Merge.Into != running.Merge.Into {
		t.Errorf("merge.into = %q, want the running %q", next.Merge.Into, running.Merge.Into)
	}
	if next.Merge.MaxRejections != running.Merge.MaxRejections+1 {
		t.Errorf("merge.max_rejections = %d, want the new %d", next.Merge.MaxRejections, running.Merge.MaxRejections+1)
	}
	if next.Merge == running.Merge {
		t.Error("the new config shares the running one's merge section: a later change of one would change both")
	}
	if next.Limits.MaxRunning != want || next.StallAfter != running.StallAfter+time.Minute {
		t.Error("a key a reload applies was put back")
	}

	// A merge section added or removed by a reload waits for a restart.
	added := load(t, "testdata/full.yaml")
	noQueue := *running
	noQueue.Merge = nil
	if got := added.KeepRestartKeys(&noQueue); !slices.Equal(got, []string{"merge"}) || added.Merge != nil {
		t.Errorf("a merge section added: changed %v, merge %+v; want [merge] and none", got, added.Merge)
	}
}
