package logs

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// TestSyncGroupCoversEveryCaller: every caller returns only after a sync
// that started after its call, and callers that arrive during a sync share
// the next one.
func TestSyncGroupCoversEveryCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			g       syncGroup
			changes atomic.Int64 // changes made so far
			covered atomic.Int64 // the changes the latest finished sync saw
			syncs   atomic.Int64
			gate    = make(chan struct{})
		)
		fsync := func() error {
			seen := changes.Load()
			if syncs.Add(1) == 1 {
				<-gate // the first sync lasts until every other caller has come
			}
			covered.Store(max(covered.Load(), seen))
			return nil
		}
		call := func() {
			mine := changes.Add(1)
			if err := g.do(fsync); err != nil {
				t.Error(err)
			}
			if got := covered.Load(); got < mine {
				t.Errorf("returned after a sync that saw %d changes, want one that saw change %d", got, mine)
			}
		}
		var wg sync.WaitGroup
		wg.Go(call)
		synctest.Wait() // the first sync is running
		for range 50 {
			wg.Go(call)
		}
		synctest.Wait() // all 50 wait for the next sync
		close(gate)
		wg.Wait()
		if got := syncs.Load(); got != 2 {
			t.Fatalf("%d syncs for 51 callers, want 2 (the running one and one shared)", got)
		}
	})
}
