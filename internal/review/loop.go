package review

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// DefaultMaxIterations is the default max_iterations.
const DefaultMaxIterations uint32 = 3

// FailureReason says why a loop failed: seed 002's four failure conditions.
type FailureReason string

// The failure reasons.
const (
	ReasonMaxIterations FailureReason = "max_iterations" // the reviewer failed the last allowed iteration
	ReasonAgentError    FailureReason = "agent_error"    // an agent could not start, crashed or errored
	ReasonFailSignal    FailureReason = "fail_signal"    // the worker signalled FAIL
	ReasonCancelled     FailureReason = "cancelled"      // cancelled by a person (task cancel, Ctrl+C)
)

// Valid reports whether r is one of the four reasons.
func (r FailureReason) Valid() bool {
	switch r {
	case ReasonMaxIterations, ReasonAgentError, ReasonFailSignal, ReasonCancelled:
		return true
	}
	return false
}

// Round is one review verdict: the reviewer's PASS or FAIL on an iteration,
// with its result text (the feedback the worker gets after a FAIL).
type Round struct {
	Iteration uint32
	Verdict   Signal // Pass or Fail
	Feedback  string
	At        time.Time // passed in by the caller
}

// Next is what the caller does next for a loop, given its state. It is a
// function of the state alone, so that a resumed loop and a live one agree.
type Next uint8

// The next actions.
const (
	NextNone   Next = iota // failed: nothing; the task is FAILED
	NextStart              // init: start the worker, then call Start
	NextWork               // working: the worker's next prompt gives the task, with the last FAIL round's feedback if any
	NextReview             // reviewing: the reviewer's next prompt carries the review request
	NextMerge              // complete: hand the task to the merge queue
)

var nextNames = [...]string{NextNone: "none", NextStart: "start", NextWork: "work", NextReview: "review", NextMerge: "merge"}

// String returns "none", "start", "work", "review" or "merge".
func (n Next) String() string {
	if int(n) < len(nextNames) {
		return nextNames[n]
	}
	return "Next(" + strconv.Itoa(int(n)) + ")"
}

// ErrInvalidTransition is wrapped by every *InvalidTransitionError.
var ErrInvalidTransition = errors.New("invalid transition")

// InvalidTransitionError reports a transition not in seed 002's table. The
// loop is left unchanged.
type InvalidTransitionError struct {
	From, To State
}

func (e *InvalidTransitionError) Error() string {
	return "review: " + ErrInvalidTransition.Error() + " from " + e.From.String() + " to " + e.To.String()
}

func (e *InvalidTransitionError) Unwrap() error { return ErrInvalidTransition }

// ErrWrongState is wrapped by every *WrongStateError.
var ErrWrongState = errors.New("wrong state")

// WrongStateError reports an event that belongs to another state: a worker
// result while reviewing, a review result while working, Start after init.
// It is separate from InvalidTransitionError because the transition the
// event would take may well be in the table (a PASS while working would be
// working → complete). The loop is left unchanged.
type WrongStateError struct {
	Event       string // "start", "worker result", "review result"
	State, Want State
}

func (e *WrongStateError) Error() string {
	return "review: " + e.Event + " in state " + e.State.String() + ": " + ErrWrongState.Error() + " (want " + e.Want.String() + ")"
}

func (e *WrongStateError) Unwrap() error { return ErrWrongState }

// Loop is one task's primary/reviewer loop. Build one with New or Resume.
type Loop struct {
	state         State
	iteration     uint32
	maxIterations uint32
	history       []Round
	failure       FailureReason
}

// New returns a loop in init at iteration 0. maxIterations 0 means
// DefaultMaxIterations.
func New(maxIterations uint32) *Loop {
	if maxIterations == 0 {
		maxIterations = DefaultMaxIterations
	}
	return &Loop{maxIterations: maxIterations}
}

// State returns the current state.
func (l *Loop) State() State { return l.state }

// Iteration returns the current iteration, 1 for the first piece of work,
// 0 before Start.
func (l *Loop) Iteration() uint32 { return l.iteration }

// MaxIterations returns the effective max_iterations.
func (l *Loop) MaxIterations() uint32 { return l.maxIterations }

// Failure returns why the loop failed, or "".
func (l *Loop) Failure() FailureReason { return l.failure }

// History returns a copy of the rounds so far, oldest first.
func (l *Loop) History() []Round { return append([]Round(nil), l.history...) }

// LastRound returns the latest round, if any: after a FAIL, its Feedback
// goes into the worker's next prompt.
func (l *Loop) LastRound() (Round, bool) {
	if len(l.history) == 0 {
		return Round{}, false
	}
	return l.history[len(l.history)-1], true
}

// Next returns what the caller does next; see Next.
func (l *Loop) Next() Next {
	switch l.state {
	case Init:
		return NextStart
	case Working:
		return NextWork
	case Reviewing:
		return NextReview
	case Complete:
		return NextMerge
	default:
		return NextNone
	}
}

// transition takes one row of the table; every state change goes through it.
func (l *Loop) transition(to State) error {
	if !CanTransition(l.state, to) {
		return &InvalidTransitionError{From: l.state, To: to}
	}
	l.state = to
	return nil
}

func (l *Loop) expect(event string, want State) error {
	if l.state != want {
		return &WrongStateError{Event: event, State: l.state, Want: want}
	}
	return nil
}

// Start reports that the agents started: init → working, iteration 1. If
// they could not start, call Fail with ReasonAgentError instead.
func (l *Loop) Start() error {
	if err := l.expect("start", Init); err != nil {
		return err
	}
	l.iteration = 1
	return l.transition(Working)
}

// WorkerResult applies the signal of a worker session's result while
// working: Done ends the iteration (working → reviewing), Fail fails the
// loop with ReasonFailSignal. Any other signal, a reviewer's PASS included,
// is no verdict: the loop stays working and the worker's next session
// carries on.
func (l *Loop) WorkerResult(sig Signal) error {
	if err := l.expect("worker result", Working); err != nil {
		return err
	}
	switch sig {
	case Done:
		return l.transition(Reviewing)
	case Fail:
		return l.fail(ReasonFailSignal)
	}
	return nil
}

// CompleteWithoutReview takes the seed's working → complete row ("primary
// agent signaled DONE") for a worker's DONE that needs no review, e.g. when a
// reload removed the task's reviewer while the worker was at it. With a
// reviewer, a worker's DONE goes to WorkerResult instead.
func (l *Loop) CompleteWithoutReview() error {
	if err := l.expect("complete without review", Working); err != nil {
		return err
	}
	return l.transition(Complete)
}

// ReviewResult applies the signal of a reviewer session's result, whose
// text is feedback, at time now. Pass and Fail record a Round. Pass
// completes the loop (reviewing → complete). Fail sends the work back to the
// worker for the next iteration (reviewing → working, iteration + 1), or,
// if this was iteration max_iterations, fails the loop with
// ReasonMaxIterations. Any other signal is no verdict: the loop stays
// reviewing and the reviewer's next session carries on.
//
// The seed lists "max iterations" under working → failed: its loop checks
// the count when the next iteration would begin. Checking it here, at the
// FAIL verdict, takes reviewing → failed instead and ends in the same state
// without first handing the worker an iteration it may not have.
func (l *Loop) ReviewResult(sig Signal, feedback string, now time.Time) error {
	if err := l.expect("review result", Reviewing); err != nil {
		return err
	}
	if sig != Pass && sig != Fail {
		return nil
	}
	l.history = append(l.history, Round{Iteration: l.iteration, Verdict: sig, Feedback: feedback, At: now})
	switch {
	case sig == Pass:
		return l.transition(Complete)
	case l.iteration >= l.maxIterations:
		return l.fail(ReasonMaxIterations)
	default:
		l.iteration++
		return l.transition(Working)
	}
}

// Reopen sends passed work back to its worker (complete → working,
// iteration + 1): the merge queue rejected it (a conflict, a red gate) or
// the operator retried it. What the worker commits then is new work, and
// is reviewed like any: a PASS is for the commit it was given on, and
// the worker's branch decides what its gate runs, so a rework merged on
// the old PASS would be work no reviewer saw. Not in seed 002, whose loop
// ends at complete (docs/decisions.md).
func (l *Loop) Reopen() error {
	if err := l.expect("reopen", Complete); err != nil {
		return err
	}
	l.iteration++
	return l.transition(Working)
}

// Retry restarts a failed loop for the operator's retry of its task
// (failed → working, iteration + 1), with as many more rounds as it was
// allowed (max_iterations grows by its value), its rounds and their
// verdicts kept. Without it the retried task's next DONE went unreviewed:
// merged unreviewed, or never (the merge queue takes only a passed
// review). Not in seed 002, whose loop ends at failed (docs/decisions.md).
func (l *Loop) Retry() error {
	if err := l.expect("retry", Failed); err != nil {
		return err
	}
	l.maxIterations += l.iteration
	l.iteration++
	l.failure = ""
	return l.transition(Working)
}

// ErrInvalidReason is wrapped by the error of Fail for an unknown reason.
var ErrInvalidReason = errors.New("unknown failure reason")

// Fail ends the loop as failed for reason, from init, working or reviewing.
// From complete or failed it returns an *InvalidTransitionError.
func (l *Loop) Fail(reason FailureReason) error {
	if !reason.Valid() {
		return fmt.Errorf("review: fail with reason %q: %w", string(reason), ErrInvalidReason)
	}
	return l.fail(reason)
}

func (l *Loop) fail(reason FailureReason) error {
	if err := l.transition(Failed); err != nil {
		return err
	}
	l.failure = reason
	return nil
}
