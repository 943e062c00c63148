package task

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// State is one of the 12 task states of seed 004.
type State uint8

// The 12 states, in seed order.
const (
	Planned            State = iota // awaiting human approval (plan mode)
	Open                            // ready for an agent to claim
	Claimed                         // claimed, work not started
	InProgress                      // an agent is working on it
	Done                            // reported complete, pending verification and merge
	Closed                          // verified and merged; terminal
	Failed                          // failed or rejected; can be retried
	Blocked                         // waiting on an external dependency
	WaitingForSubtasks              // parent waiting for its subtasks
	Cancelled                       // cancelled; terminal
	Orphaned                        // its agent died mid-task; pending recovery
	PendingApproval                 // set directly by the approval subsystem; terminal
)

// NumStates is the number of task states.
const NumStates = 12

// AllStates lists every State in seed order, so that callers such as
// metrics and `task list` can show each state, including empty ones.
var AllStates = [NumStates]State{
	Planned, Open, Claimed, InProgress, Done, Closed,
	Failed, Blocked, WaitingForSubtasks, Cancelled, Orphaned, PendingApproval,
}

var stateNames = [NumStates]string{
	Planned:            "PLANNED",
	Open:               "OPEN",
	Claimed:            "CLAIMED",
	InProgress:         "IN_PROGRESS",
	Done:               "DONE",
	Closed:             "CLOSED",
	Failed:             "FAILED",
	Blocked:            "BLOCKED",
	WaitingForSubtasks: "WAITING_FOR_SUBTASKS",
	Cancelled:          "CANCELLED",
	Orphaned:           "ORPHANED",
	PendingApproval:    "PENDING_APPROVAL",
}

// String returns the seed name, e.g. "IN_PROGRESS". States are printed by
// these names everywhere (CLI, JSON, event log).
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is one of the 12 states.
func (s State) Valid() bool { return int(s) < NumStates }

// IsTerminal reports whether s has no way out: CLOSED, CANCELLED and
// PENDING_APPROVAL (which only the approval subsystem, outside this machine,
// can move).
func (s State) IsTerminal() bool {
	return s == Closed || s == Cancelled || s == PendingApproval
}

// ErrUnknownState is wrapped by the error ParseState returns for a name that
// is not a seed state name.
var ErrUnknownState = errors.New("unknown task state")

// ParseState is the inverse of State.String. It ignores case, so that
// `--state in_progress` works, but accepts nothing else: no spaces, no
// aliases, no numbers.
func ParseState(s string) (State, error) {
	for _, st := range AllStates {
		if strings.EqualFold(stateNames[st], s) {
			return st, nil
		}
	}
	return 0, fmt.Errorf("task: parse state %q: %w (want one of %s)", s, ErrUnknownState, strings.Join(stateNames[:], ", "))
}
