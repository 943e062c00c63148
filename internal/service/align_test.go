package service

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

func TestUntilAligned(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, time.Second, 5 * time.Second} {
		wait := UntilAligned(d)
		if wait <= 0 || wait > d {
			t.Fatalf("UntilAligned(%v) = %v, want in (0, %v]", d, wait, d)
		}
		if at := time.Now().Add(wait); at.Sub(at.Truncate(d)) > 50*time.Millisecond && d >= time.Second {
			t.Errorf("UntilAligned(%v) lands %v past a multiple of it", d, at.Sub(at.Truncate(d)))
		}
	}
}

// Every calls its function at the clock's multiples of its period (at once
// first when asked), however long a call takes, and returns when its
// context ends.
func TestEvery(t *testing.T) {
	for _, now := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			time.Sleep(20 * time.Second) // 20 s past a minute
			start := time.Now()
			var at []time.Duration
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				Every(ctx, time.Minute, now, func(context.Context) {
					at = append(at, time.Since(start))
					time.Sleep(5 * time.Second) // a call's own time
				})
			}()
			time.Sleep(2*time.Minute + 30*time.Second)
			synctest.Wait()
			cancel()
			<-done
			want := []time.Duration{40 * time.Second, 100 * time.Second}
			if now {
				want = append([]time.Duration{0}, want...)
			}
			if !slices.Equal(at, want) {
				t.Fatalf("now %v: calls at %v, want %v", now, at, want)
			}
		})
	}
}
