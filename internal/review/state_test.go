package review

import (
	"errors"
	"testing"
)

func TestStateNames(t *testing.T) {
	want := []string{"init", "working", "reviewing", "complete", "failed"}
	if len(AllStates) != len(want) {
		t.Fatalf("len(AllStates) = %d", len(AllStates))
	}
	for i, s := range AllStates {
		if int(s) != i || s.String() != want[i] || !s.Valid() {
			t.Errorf("AllStates[%d] = %d %q valid %v, want %q", i, s, s, s.Valid(), want[i])
		}
		if got, err := ParseState(want[i]); err != nil || got != s {
			t.Errorf("ParseState(%q) = %v, %v", want[i], got, err)
		}
		if got := s.IsTerminal(); got != (s == Complete || s == Failed) {
			t.Errorf("%v.IsTerminal() = %v", s, got)
		}
	}
	if State(5).Valid() || State(5).String() != "State(5)" {
		t.Errorf("State(5): valid %v, %q", State(5).Valid(), State(5))
	}
	for _, bad := range []string{"", "Init", "WORKING", "completed", "submitted", "done"} {
		if _, err := ParseState(bad); !errors.Is(err, ErrUnknownState) {
			t.Errorf("ParseState(%q) error = %v", bad, err)
		}
	}
}

// TestCanTransition checks all 6 × 6 pairs (one out of range) against seed
// 002's "Valid Transitions" table and swarmd's two rows (Reopen, Retry).
func TestCanTransition(t *testing.T) {
	valid := map[[2]State]bool{
		{Init, Working}: true, {Init, Failed}: true,
		{Working, Reviewing}: true, {Working, Complete}: true, {Working, Failed}: true,
		{Reviewing, Working}: true, {Reviewing, Complete}: true, {Reviewing, Failed}: true,
		{Complete, Working}: true, {Failed, Working}: true,
	}
	all := append(AllStates[:], State(5))
	n := 0
	for _, from := range all {
		for _, to := range all {
			got := CanTransition(from, to)
			if got != valid[[2]State{from, to}] {
				t.Errorf("CanTransition(%v, %v) = %v", from, to, got)
			}
			if got {
				n++
			}
		}
	}
	if n != 10 {
		t.Errorf("%d valid transitions, want 10", n)
	}
}
