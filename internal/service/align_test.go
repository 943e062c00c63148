package service

import (
	"testing"
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
