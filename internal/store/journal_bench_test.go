package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkJournalEvent is what the runner pays per transition: enqueueing
// one event. "steady" swaps the queue out every 100 events, as the writer
// does when it keeps up (it commits ~100k events/s; the runner emits a few
// per second), so the cost of the swap is included and SQLite is not.
// "parallel" is the same with every CPU enqueueing.
func BenchmarkJournalEvent(b *testing.B) {
	db := openTest(b, "", Options{})
	e := ev("alice", 1, "SessionExited")
	b.Run("steady", func(b *testing.B) {
		j := db.NewJournal(JournalOptions{})
		defer j.Close()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			j.Event(e)
			if i++; i%100 == 0 {
				j.discardQueued()
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		j := db.NewJournal(JournalOptions{})
		defer j.Close()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				j.Event(e)
				if i++; i%100 == 0 {
					j.discardQueued()
				}
			}
		})
	})
}

// discardQueued takes the queue as the writer does, and drops it.
func (j *Journal) discardQueued() {
	_ = j.acquire(context.Background())
	defer j.release()
	evs, ags, sss, tcs := j.take()
	j.recycle(evs, ags, sss, tcs)
}

// BenchmarkJournalThroughput is events committed per second: b.N events
// enqueued at once, timed until Flush returns.
func BenchmarkJournalThroughput(b *testing.B) {
	ctx := context.Background()
	for _, batch := range []int{100, DefaultMaxBatch} {
		b.Run(fmt.Sprintf("maxBatch=%d", batch), func(b *testing.B) {
			db := openTest(b, "", Options{})
			j := startJournal(b, db, JournalOptions{MaxBatch: batch})
			e := ev("alice", 1, "SessionExited")
			b.ReportAllocs()
			start := time.Now()
			b.ResetTimer()
			for i := range b.N {
				e.Seq = uint32(i)
				j.Event(e)
			}
			if err := j.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}
