package review

import (
	"errors"
	"fmt"
)

// Snapshot is what a loop persists: its state (stored by its name,
// State.String), iteration, max_iterations, rounds and failure reason.
type Snapshot struct {
	State         State
	Iteration     uint32
	MaxIterations uint32 // 0 means DefaultMaxIterations
	History       []Round
	Failure       FailureReason
}

// Snapshot returns the loop's persistent form. History is a copy.
func (l *Loop) Snapshot() Snapshot {
	return Snapshot{
		State:         l.state,
		Iteration:     l.iteration,
		MaxIterations: l.maxIterations,
		History:       l.History(),
		Failure:       l.failure,
	}
}

// ErrInvalidSnapshot is wrapped by every error of Resume.
var ErrInvalidSnapshot = errors.New("invalid snapshot")

// Resume rebuilds a loop after a restart (seed 002's "Resuming": load the
// last known state, continue from there; Restore is the same from a stored
// state name, failed when the record cannot be read). Next on the result says how to continue: init starts the worker,
// working gives the task back to the worker (with the last round's
// feedback), reviewing asks the reviewer again (a round is recorded only with
// its verdict, so none is lost or repeated), complete hands the task to the
// merge queue, failed does nothing.
//
// It refuses a snapshot this package could not have produced, naming the
// field. An iteration beyond a since-lowered max_iterations is accepted: the
// next FAIL verdict then fails the loop.
func Resume(s Snapshot) (*Loop, error) {
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("review: resume: %w: %w", ErrInvalidSnapshot, err)
	}
	l := New(s.MaxIterations)
	l.state, l.iteration, l.failure = s.State, s.Iteration, s.Failure
	l.history = append([]Round(nil), s.History...)
	return l, nil
}

func (s Snapshot) validate() error {
	switch {
	case !s.State.Valid():
		return fmt.Errorf("state %v unknown", s.State)
	case s.Failure != "" && s.State != Failed:
		return fmt.Errorf("failure %q in state %v", string(s.Failure), s.State)
	case s.Failure != "" && !s.Failure.Valid():
		return fmt.Errorf("failure %q unknown", string(s.Failure))
	case s.State == Init && (s.Iteration != 0 || len(s.History) != 0):
		return fmt.Errorf("state init with iteration %d and %d rounds, want none", s.Iteration, len(s.History))
	case s.State != Init && s.State != Failed && s.Iteration == 0:
		return fmt.Errorf("state %v at iteration 0", s.State)
	}
	// Rounds are recorded only with a verdict, which ends the iteration:
	// while working or reviewing, none is for the current one.
	open := s.State == Working || s.State == Reviewing
	var prev uint32
	for i, r := range s.History {
		switch {
		case r.Iteration <= prev:
			return fmt.Errorf("history[%d]: iteration %d after %d, want increasing from 1", i, r.Iteration, prev)
		case r.Iteration > s.Iteration || open && r.Iteration == s.Iteration:
			return fmt.Errorf("history[%d]: iteration %d in state %v at iteration %d", i, r.Iteration, s.State, s.Iteration)
		case r.Verdict != Pass && r.Verdict != Fail:
			return fmt.Errorf("history[%d]: verdict %v, want pass or fail", i, r.Verdict)
		case r.Verdict == Pass && i == len(s.History)-1 && s.State != Complete && s.Iteration == r.Iteration:
			// After a PASS the loop is complete, or reopened (Reopen):
			// then at a later iteration.
			return fmt.Errorf("history[%d]: pass verdict in state %v at its own iteration, want complete", i, s.State)
		}
		prev = r.Iteration
	}
	return nil
}

// Restore is Resume from a stored record: the state by its name, the rest
// in s (whose State it ignores). A record that cannot be read, an unknown
// name or a snapshot Resume refuses, resumes as failed, as seed 002 has it
// (a loop whose record cannot be read must not resume work): the loop is
// failed at the stored iteration, with no rounds and no failure reason, and
// unreadable says why; nil otherwise.
func Restore(state string, s Snapshot) (l *Loop, unreadable error) {
	st, err := ParseState(state)
	if err == nil {
		s.State = st
		if l, err = Resume(s); err == nil {
			return l, nil
		}
	}
	l = New(s.MaxIterations)
	l.state, l.iteration = Failed, s.Iteration
	return l, err
}
