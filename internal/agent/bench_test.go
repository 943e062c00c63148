package agent

import (
	"strings"
	"testing"
	"time"
)

// BenchmarkTransition measures one Handle call (one op = one transition) over
// the normal session cycle BuildingPrompt → Spawning → Running →
// SessionComplete → BuildingPrompt.
func BenchmarkTransition(b *testing.B) {
	prompt := strings.Repeat("x", 16<<10)
	cycle := [...]Event{
		EvPromptReady(prompt),
		EvSessionStarted(1),
		EvSessionExited(ExitOutcome{Kind: Success}),
		EvWorktreeReady(),
	}
	m := Restore(Thresholds{}, State{Kind: BuildingPrompt}, 0, 0)
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := m.Handle(cycle[i&3], now); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkTransitionError measures a non-fatal failure cycle, which also
// computes the backoff deadline: Spawning → CoolingDown → BuildingPrompt →
// Spawning.
func BenchmarkTransitionError(b *testing.B) {
	cycle := [...]Event{
		EvSessionExited(ExitOutcome{Kind: Timeout}),
		EvBackoffElapsed(),
		EvPromptReady("p"),
	}
	m := Restore(Thresholds{MaxConsecutiveErrors: ^uint32(0), MaxTotalErrors: ^uint32(0)}, State{Kind: Spawning}, 0, 0)
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := m.Handle(cycle[i%3], now); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
