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

// CanTransition reports whether seed 002's table allows from → to, with
// two rows of swarmd's: complete → working, the reviewed work sent back by
// the merge queue (Reopen), and failed → working, a failed task retried
// by the operator (Retry). These ten rows are the only transitions a Loop
// ever takes.
func CanTransition(from, to State) bool {
	switch from {
	case Init:
		return to == Working || to == Failed
	case Working:
		return to == Reviewing || to == Complete || to == Failed
	case Reviewing:
		return to == Working || to == Complete || to == Failed
	case Complete, Failed:
		return to == Working
	}
	return false
}
