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

// Every calls its function after first, then every after each call, and
// returns when its context ends.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, time.Second, time.Minute, func(context.Context) { at = append(at, time.Since(start)) })
		}()
		time.Sleep(2*time.Minute + 2*time.Second)
		synctest.Wait()
		cancel()
		<-done
		want := []time.Duration{time.Second, time.Minute + time.Second, 2*time.Minute + time.Second}
		if !slices.Equal(at, want) {
			t.Fatalf("calls at %v, want %v", at, want)
		}
	})
}
