package task

import (
	"errors"
	"strings"
	"testing"
)

func TestStateNames(t *testing.T) {
	want := []string{"PLANNED", "OPEN", "CLAIMED", "IN_PROGRESS", "DONE", "CLOSED", "FAILED",
		"BLOCKED", "WAITING_FOR_SUBTASKS", "CANCELLED", "ORPHANED", "PENDING_APPROVAL"}
	if NumStates != len(want) {
		t.Fatalf("NumStates = %d, want %d", NumStates, len(want))
	}
	for i, s := range AllStates {
		if int(s) != i {
			t.Errorf("AllStates[%d] = %d", i, s)
		}
		if got := s.String(); got != want[i] {
			t.Errorf("State(%d).String() = %q, want %q", i, got, want[i])
		}
		for _, in := range []string{want[i], strings.ToLower(want[i]), mixedCase(want[i])} {
			got, err := ParseState(in)
			if err != nil || got != s {
				t.Errorf("ParseState(%q) = %v, %v; want %v", in, got, err, s)
			}
		}
	}
	if got := State(12).String(); got != "State(12)" {
		t.Errorf("State(12).String() = %q", got)
	}
	if State(12).Valid() || !PendingApproval.Valid() {
		t.Error("Valid() wrong at the boundary")
	}
}

func TestParseStateRejects(t *testing.T) {
	for _, bad := range []string{"", " OPEN", "OPEN ", "IN-PROGRESS", "INPROGRESS", "in progress", "1", "State(3)", "CANCELED", "OPEN\n"} {
		s, err := ParseState(bad)
		if !errors.Is(err, ErrUnknownState) {
			t.Errorf("ParseState(%q) = %v, %v; want ErrUnknownState", bad, s, err)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") && !strings.Contains(bad, "\n") || !strings.Contains(msg, "PENDING_APPROVAL") {
			t.Errorf("ParseState(%q) error %q: want one line listing the valid names", bad, msg)
		}
	}
}

func TestIsTerminal(t *testing.T) {
	terminal := map[State]bool{Closed: true, Cancelled: true, PendingApproval: true}
	for _, s := range AllStates {
		if got := s.IsTerminal(); got != terminal[s] {
			t.Errorf("%v.IsTerminal() = %v, want %v", s, got, terminal[s])
		}
		// Seed: "Terminal states have no outbound transitions", and every
		// other state has at least one.
		out := 0
		for _, to := range AllStates {
			if CanTransition(s, to) {
				out++
			}
		}
		if (out == 0) != s.IsTerminal() {
			t.Errorf("%v: %d outbound rows, IsTerminal %v", s, out, s.IsTerminal())
		}
	}
}

func TestTransitionReasons(t *testing.T) {
	want := []string{"completed", "aborted", "retry", "prompt_too_long", "max_output_tokens", "max_turns",
		"provider_413", "provider_529", "compaction_failed", "stop_hook_blocked", "permission_denied",
		"sibling_aborted", "orphan_recovered"}
	if len(AllReasons) != len(want) {
		t.Fatalf("len(AllReasons) = %d, want %d", len(AllReasons), len(want))
	}
	for i, r := range AllReasons {
		if string(r) != want[i] || !r.Valid() {
			t.Errorf("AllReasons[%d] = %q (valid %v), want %q", i, r, r.Valid(), want[i])
		}
		for _, in := range []string{want[i], strings.ToUpper(want[i])} {
			if got, err := ParseTransitionReason(in); err != nil || got != r {
				t.Errorf("ParseTransitionReason(%q) = %q, %v", in, got, err)
			}
		}
	}
	for _, bad := range []string{"", "completed ", "max-turns", "timeout", "max_iterations", "oom"} {
		if TransitionReason(bad).Valid() {
			t.Errorf("TransitionReason(%q).Valid() = true", bad)
		}
		if _, err := ParseTransitionReason(bad); !errors.Is(err, ErrUnknownReason) {
			t.Errorf("ParseTransitionReason(%q) error = %v, want ErrUnknownReason", bad, err)
		}
	}
}

// mixedCase alternates letter case: "In_pRoGrEsS".
func mixedCase(s string) string {
	b := []byte(strings.ToLower(s))
	for i := 0; i < len(b); i += 2 {
		b[i] = strings.ToUpper(string(b[i]))[0]
	}
	return string(b)
}
