package store

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A checkpoint waits for writes to pause for checkpointEvery; while they go
// on, it waits no longer than checkpointAtMost after the first.
func TestCheckpointGathersWrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes time.Duration // how long writes go on, one every 100 ms
		want   time.Duration
	}{
		{"one write", 0, checkpointEvery},
		{"a burst", 600 * time.Millisecond, 600*time.Millisecond + checkpointEvery},
		{"steady writes", 10 * time.Second, checkpointAtMost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				written := make(chan struct{}, 1)
				go func() {
					tick := time.NewTicker(100 * time.Millisecond)
					defer tick.Stop()
					for end := time.Now().Add(tc.writes); time.Now().Before(end); {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						select {
						case written <- struct{}{}:
						default:
						}
					}
				}()
				pace := time.NewTimer(time.Hour)
				pace.Stop()
				start := time.Now()
				if !gather(ctx, pace, written) {
					t.Fatal("gather gave up")
				}
				// A write at the very end of a burst may be gathered by one
				// more pause: allow one checkpointEvery of slack.
				if got := time.Since(start); got < tc.want || got > tc.want+checkpointEvery {
					t.Fatalf("checkpointed %s after the first write, want %s", got, tc.want)
				}
			})
		})
	}
}
