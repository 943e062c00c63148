package daemon

import (
	"context"
	"testing"
)

// TestOwnStoreRecordsItsTarget: a daemon on a store of its own records its
// merge target as its own too, as on a shared store, which `swarmd
// daemons` shows, besides the swarm's setting that commands outside a
// daemon follow.
func TestOwnStoreRecordsItsTarget(t *testing.T) {
	d := open(t, agentMovesTarget(t, "echo idle; echo DONE")) // merge.into main
	defer d.Close()
	ctx := context.Background()
	got, err := d.db.DaemonSettings(ctx, SettingMergeInto)
	if err != nil {
		t.Fatal(err)
	}
	if self := d.leaseHolder().Daemon; len(got) != 1 || got[self] != "main" {
		t.Errorf("the daemons' recorded targets = %q, want %s's main", got, self)
	}
	if into, ok, err := d.db.Setting(ctx, SettingMergeInto); err != nil || !ok || into != "main" {
		t.Errorf("the swarm's merge.into = %q, %v, %v; want main", into, ok, err)
	}
}
