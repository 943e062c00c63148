package task

import (
	"fmt"
	"strings"
)

// AbortReason is seed 004's canonical classification of an abnormal agent
// end, recorded on the lifecycle event of a task that moved because of one.
// The empty value means the move had none.
type AbortReason string

// The 11 AbortReason values of seed 004, in seed order.
const (
	AbortUserInterrupt    AbortReason = "user_interrupt"    // SIGINT: someone interrupted it
	AbortShutdownSignal   AbortReason = "shutdown_signal"   // SIGTERM: a graceful shutdown
	AbortTimeout          AbortReason = "timeout"           // its watchdog ran out (exit 124)
	AbortOOM              AbortReason = "oom"               // out of memory (exit 137, a SIGKILL)
	AbortPermissionDenied AbortReason = "permission_denied" // exit 126, or a refused tool call
	AbortProviderError    AbortReason = "provider_error"    // the provider failed for good
	AbortBashError        AbortReason = "bash_error"        // a shell tool call was fatal
	AbortSiblingAborted   AbortReason = "sibling_aborted"   // a sibling's abort cascaded
	AbortParentAborted    AbortReason = "parent_aborted"    // its parent ended it
	AbortCompactFailure   AbortReason = "compact_failure"   // context compaction failed
	AbortUnknown          AbortReason = "unknown"           // unclassified
)

// AllAbortReasons lists every AbortReason in seed order.
var AllAbortReasons = [...]AbortReason{
	AbortUserInterrupt, AbortShutdownSignal, AbortTimeout, AbortOOM, AbortPermissionDenied,
	AbortProviderError, AbortBashError, AbortSiblingAborted, AbortParentAborted,
	AbortCompactFailure, AbortUnknown,
}

// Valid reports whether r is one of the seed values. The empty reason is
// not a value: it means "none".
func (r AbortReason) Valid() bool {
	for _, v := range AllAbortReasons {
		if r == v {
			return true
		}
	}
	return false
}

// ParseAbortReason returns the seed value named by s, ignoring case. The
// empty string is refused.
func ParseAbortReason(s string) (AbortReason, error) {
	for _, v := range AllAbortReasons {
		if strings.EqualFold(string(v), s) {
			return v, nil
		}
	}
	return "", fmt.Errorf("task: parse abort reason %q: %w", s, ErrUnknownReason)
}

// swarmdAborts are swarmd's own abort reasons that are not seed values, by
// the seed value each is recorded as on a task's event (docs/decisions.md
// has the table and why). The session's row keeps swarmd's own.
var swarmdAborts = map[string]AbortReason{
	"oom_killed":       AbortOOM,           // the kernel's OOM killer, by the cgroup's count
	"urgent_message":   AbortUserInterrupt, // interrupted to deliver urgent mail
	"budget_exhausted": AbortParentAborted, // swarmd cancelled it: the budget ran out
	"max_turns":        AbortUnknown,       // the turn limit: a TransitionReason in the seed, no abort value
}

// AbortOf is the seed value of a session's abort reason as swarmd records it
// (a seed value itself, or one of swarmd's own): "" for "" (a normal end),
// unknown for a value it does not know.
func AbortOf(s string) AbortReason {
	if s == "" {
		return ""
	}
	if r := AbortReason(s); r.Valid() {
		return r
	}
	if r, ok := swarmdAborts[s]; ok {
		return r
	}
	return AbortUnknown
}
