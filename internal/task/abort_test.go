package task

import (
	"errors"
	"testing"
)

// TestAbortReasons: the 11 seed values, in seed order, each its own; the
// parse is the inverse of the names, ignoring case.
func TestAbortReasons(t *testing.T) {
	want := []string{"user_interrupt", "shutdown_signal", "timeout", "oom", "permission_denied", "provider_error",
		"bash_error", "sibling_aborted", "parent_aborted", "compact_failure", "unknown"}
	if len(AllAbortReasons) != len(want) {
		t.Fatalf("%d abort reasons, want %d", len(AllAbortReasons), len(want))
	}
	for i, r := range AllAbortReasons {
		if string(r) != want[i] || !r.Valid() {
			t.Errorf("AllAbortReasons[%d] = %q (valid %v), want %q", i, r, r.Valid(), want[i])
		}
		if got, err := ParseAbortReason(want[i]); err != nil || got != r {
			t.Errorf("ParseAbortReason(%q) = %q, %v", want[i], got, err)
		}
	}
	for _, bad := range []string{"", "oom_killed", "time out"} {
		if _, err := ParseAbortReason(bad); !errors.Is(err, ErrUnknownReason) {
			t.Errorf("ParseAbortReason(%q) error = %v", bad, err)
		}
	}
}

// TestAbortOf is the table of docs/decisions.md: swarmd's own abort reasons
// as the seed values a task event records.
func TestAbortOf(t *testing.T) {
	for in, want := range map[string]AbortReason{
		"":                  "",
		"user_interrupt":    AbortUserInterrupt,
		"shutdown_signal":   AbortShutdownSignal,
		"timeout":           AbortTimeout,
		"oom":               AbortOOM,
		"oom_killed":        AbortOOM,
		"permission_denied": AbortPermissionDenied,
		"unknown":           AbortUnknown,
		"urgent_message":    AbortUserInterrupt,
		"budget_exhausted":  AbortParentAborted,
		"max_turns":         AbortUnknown,
		"something new":     AbortUnknown,
	} {
		if got := AbortOf(in); got != want {
			t.Errorf("AbortOf(%q) = %q, want %q", in, got, want)
		}
	}
}
