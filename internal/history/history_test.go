package history

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type call struct {
	log    store.HistoryLog
	before time.Time
	after  int64
}

type fakeStore struct {
	mu    sync.Mutex
	calls []call
}

func (f *fakeStore) PruneHistory(_ context.Context, l store.HistoryLog, before time.Time, after int64) (int, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{l, before, after})
	return 1, after + 10, nil
}

func (f *fakeStore) taken() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// A Pruner prunes both logs at its start and every Every after, with the
// cutoff MaxAge before its clock, each log from where its last prune
// stopped.
func TestPrunerPrunesEachLogFromWhereItStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &fakeStore{}
		p := &Pruner{DB: db, MaxAge: 24 * time.Hour, Every: time.Hour}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.Run(ctx) }()
		synctest.Wait()
		start := time.Now()
		if got := db.taken(); len(got) != 2 {
			t.Fatalf("%d prunes at the start, want one a log", len(got))
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		got := db.taken()
		if len(got) != 4 {
			t.Fatalf("%d prunes after an hour, want 4", len(got))
		}
		for _, c := range got[2:] {
			if c.after != 10 {
				t.Errorf("second prune of %+v from %d, want 10 (where the first stopped)", c.log, c.after)
			}
			if want := start.Add(time.Hour - 24*time.Hour); !c.before.Equal(want) {
				t.Errorf("cutoff %v, want %v", c.before, want)
			}
		}
		cancel()
		<-done
	})
}

// max_age 0 keeps everything: Run returns at once, pruning nothing.
func TestPrunerOff(t *testing.T) {
	db := &fakeStore{}
	(&Pruner{DB: db}).Run(context.Background())
	if got := db.taken(); len(got) != 0 {
		t.Fatalf("pruned %d with max_age 0", len(got))
	}
}
