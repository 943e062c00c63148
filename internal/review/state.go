package review

import (
	"errors"
	"fmt"
	"strconv"
)

// State is one of the five loop states of seed 002.
type State uint8

// The five states, in seed order.
const (
	Init      State = iota // run created, agents starting
	Working                // the worker is doing the task
	Reviewing              // the reviewer is reviewing the work
	Complete               // finished successfully; terminal
	Failed                 // error or max iterations; terminal
)

// AllStates lists every State in seed order.
var AllStates = [...]State{Init, Working, Reviewing, Complete, Failed}

var stateNames = [...]string{
	Init:      "init",
	Working:   "working",
	Reviewing: "reviewing",
	Complete:  "complete",
	Failed:    "failed",
}

// String returns the seed name, e.g. "reviewing".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is one of the five states.
func (s State) Valid() bool { return int(s) < len(stateNames) }

// IsTerminal reports whether the loop is over: complete or failed.
func (s State) IsTerminal() bool { return s == Complete || s == Failed }

// ErrUnknownState is wrapped by the error ParseState returns.
var ErrUnknownState = errors.New("unknown review state")

// ParseState is the inverse of State.String. It is exact: the names are
// persisted and compared verbatim.
func ParseState(s string) (State, error) {
	for _, st := range AllStates {
		if stateNames[st] == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("review: parse state %q: %w", s, ErrUnknownState)
}

// The run states of seed 002's "Run State Mapping", under which a loop's
// state is persisted.
const (
	RunSubmitted = "submitted"
	RunWorking   = "working"
	RunReviewing = "reviewing"
	RunCompleted = "completed"
	RunFailed    = "failed"
)

// RunState returns the run state that persists s (seed 002: init is
// "submitted", complete is "completed", the others keep their name).
func (s State) RunState() string {
	switch s {
	case Init:
		return RunSubmitted
	case Working:
		return RunWorking
	case Reviewing:
		return RunReviewing
	case Complete:
		return RunCompleted
	default:
		return RunFailed
	}
}

// FromRunState is seed 002's resume mapping from a persisted run state back
// to a loop state. As in the seed, anything it does not know, the empty
// string included, is failed: a loop whose record cannot be read must not
// resume work.
func FromRunState(rs string) State {
	switch rs {
	case RunSubmitted:
		return Init
	case RunWorking:
		return Working
	case RunReviewing:
		return Reviewing
	case RunCompleted:
		return Complete
	default:
		return Failed
	}
}

// CanTransition reports whether seed 002's table allows from → to. These
// eight rows are the only transitions a Loop ever takes.
func CanTransition(from, to State) bool {
	switch from {
	case Init:
		return to == Working || to == Failed
	case Working:
		return to == Reviewing || to == Complete || to == Failed
	case Reviewing:
		return to == Working || to == Complete || to == Failed
	}
	return false
}
