package task

import (
	"errors"
	"fmt"
	"strings"
)

// TransitionReason is seed 004's canonical classification of why a lifecycle
// transition happened. The empty value means none applies (the seed records
// it "when applicable").
type TransitionReason string

// The 13 TransitionReason values of seed 004, in seed order.
const (
	ReasonCompleted        TransitionReason = "completed"         // normal successful completion
	ReasonAborted          TransitionReason = "aborted"           // explicit abort requested
	ReasonRetry            TransitionReason = "retry"             // retried after failure; counts a retry
	ReasonPromptTooLong    TransitionReason = "prompt_too_long"   // input exceeded the context window
	ReasonMaxOutputTokens  TransitionReason = "max_output_tokens" // model hit its output token limit
	ReasonMaxTurns         TransitionReason = "max_turns"         // agent reached max conversation turns
	ReasonProvider413      TransitionReason = "provider_413"      // provider said payload too large
	ReasonProvider529      TransitionReason = "provider_529"      // provider said overloaded
	ReasonCompactionFailed TransitionReason = "compaction_failed" // context compaction failed
	ReasonStopHookBlocked  TransitionReason = "stop_hook_blocked" // a stop hook prevented the transition
	ReasonPermissionDenied TransitionReason = "permission_denied" // insufficient permissions
	ReasonSiblingAborted   TransitionReason = "sibling_aborted"   // a sibling agent was aborted
	ReasonOrphanRecovered  TransitionReason = "orphan_recovered"  // orphaned task recovered; counts a retry
)

// AllReasons lists every TransitionReason in seed order.
var AllReasons = [...]TransitionReason{
	ReasonCompleted, ReasonAborted, ReasonRetry, ReasonPromptTooLong,
	ReasonMaxOutputTokens, ReasonMaxTurns, ReasonProvider413, ReasonProvider529,
	ReasonCompactionFailed, ReasonStopHookBlocked, ReasonPermissionDenied,
	ReasonSiblingAborted, ReasonOrphanRecovered,
}

// Valid reports whether r is one of the seed values. The empty reason is not
// a value; Transition accepts it as "none".
func (r TransitionReason) Valid() bool {
	for _, v := range AllReasons {
		if r == v {
			return true
		}
	}
	return false
}

// countsRetry reports whether a transition into OPEN with r is a retry.
func (r TransitionReason) countsRetry() bool {
	return r == ReasonRetry || r == ReasonOrphanRecovered
}

// ErrUnknownReason is wrapped by every error about a TransitionReason that is
// not a seed value.
var ErrUnknownReason = errors.New("unknown transition reason")

// ParseTransitionReason returns the seed value named by s, ignoring case,
// e.g. "orphan_recovered". The empty string is refused: a caller with no
// reason passes the zero value instead of parsing.
func ParseTransitionReason(s string) (TransitionReason, error) {
	for _, v := range AllReasons {
		if strings.EqualFold(string(v), s) {
			return v, nil
		}
	}
	return "", fmt.Errorf("task: parse transition reason %q: %w", s, ErrUnknownReason)
}
