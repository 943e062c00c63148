package task

import (
	"math"
	"testing"
)

// BenchmarkTransition measures one Transition (one op = one transition) over
// a fail-and-retry cycle OPEN → CLAIMED → IN_PROGRESS → FAILED → OPEN
// (retry), so the retry counter is exercised too.
func BenchmarkTransition(b *testing.B) {
	type step struct {
		to State
		tr TransitionReason
	}
	cycle := [...]step{{Claimed, ""}, {InProgress, ""}, {Failed, ReasonMaxTurns}, {Open, ReasonRetry}}
	tk, err := Restore("t-bench", Open, 0, math.MaxUint32)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s := cycle[i&3]
		if _, err := tk.Transition(s.to, s.tr, "runner", "bench", t0); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
