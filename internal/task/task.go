package task

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// DefaultMaxRetries is seed 004's default max_retries.
const DefaultMaxRetries uint32 = 3

// EntityTask is LifecycleEvent.EntityType for task events.
const EntityTask = "task"

// LifecycleEvent is the record seed 004 requires for every transition, for
// the audit log, replay and metrics.
type LifecycleEvent struct {
	Timestamp        time.Time // passed in by the caller
	EntityType       string    // always EntityTask here
	EntityID         string    // the task id
	From, To         State
	Actor            string           // who: "operator", "runner", "merge-queue", an agent name...
	Reason           string           // for people
	TransitionReason TransitionReason // "" when none applies
	// AbortReason is seed 004's abort classification of the abnormal agent
	// end that caused the move ("" for none). The machine leaves it empty:
	// only the caller that saw the session end knows it, e.g. for
	// IN_PROGRESS → ORPHANED; AbortOf maps swarmd's own reasons to it.
	AbortReason AbortReason
}

// ErrIllegalTransition is wrapped by every *IllegalTransitionError.
var ErrIllegalTransition = errors.New("illegal transition")

// IllegalTransitionError reports a transition that seed 004's table does not
// allow. The task is left unchanged.
type IllegalTransitionError struct {
	TaskID   string
	From, To State
}

func (e *IllegalTransitionError) Error() string {
	return "task " + e.TaskID + ": " + ErrIllegalTransition.Error() + " from " + e.From.String() + " to " + e.To.String()
}

func (e *IllegalTransitionError) Unwrap() error { return ErrIllegalTransition }

// ErrRetriesExhausted is wrapped by every *RetriesExhaustedError.
var ErrRetriesExhausted = errors.New("retries exhausted")

// RetriesExhaustedError reports a retry (a transition into OPEN with reason
// retry or orphan_recovered) that would take retries past max_retries. The
// task is left unchanged; the caller moves it to FAILED instead.
type RetriesExhaustedError struct {
	TaskID              string
	From                State
	Reason              TransitionReason
	Retries, MaxRetries uint32
}

func (e *RetriesExhaustedError) Error() string {
	return "task " + e.TaskID + ": " + string(e.Reason) + " from " + e.From.String() + " to OPEN: " +
		ErrRetriesExhausted.Error() + " (" + strconv.FormatUint(uint64(e.Retries), 10) +
		" of max_retries " + strconv.FormatUint(uint64(e.MaxRetries), 10) + ")"
}

func (e *RetriesExhaustedError) Unwrap() error { return ErrRetriesExhausted }

// ErrInvalidTask is wrapped by the errors of New and Restore.
var ErrInvalidTask = errors.New("invalid task")

// Task is one task's lifecycle state and retry counter. Build one with New
// or Restore; the zero value has no id.
type Task struct {
	id         string
	state      State
	retries    uint32
	maxRetries uint32
}

// New returns a task with no retries yet in initial, which must be one of
// the seed's two entry points: PLANNED (plan mode) or OPEN (dynamic
// creation). maxRetries is exact, 0 meaning "never retry"; pass
// DefaultMaxRetries for the seed's default.
func New(id string, initial State, maxRetries uint32) (Task, error) {
	if id == "" {
		return Task{}, fmt.Errorf("task: new: empty id: %w", ErrInvalidTask)
	}
	if initial != Planned && initial != Open {
		return Task{}, fmt.Errorf("task %s: new: initial state %v: %w (want PLANNED or OPEN)", id, initial, ErrInvalidTask)
	}
	return Task{id: id, state: initial, maxRetries: maxRetries}, nil
}

// Restore rebuilds a task from the store, in any of the 12 states (the
// approval subsystem sets PENDING_APPROVAL directly, outside the table).
// retries above maxRetries is accepted, since max_retries may have been
// lowered since; the next retry is then refused.
func Restore(id string, s State, retries, maxRetries uint32) (Task, error) {
	if id == "" {
		return Task{}, fmt.Errorf("task: restore: empty id: %w", ErrInvalidTask)
	}
	if !s.Valid() {
		return Task{}, fmt.Errorf("task %s: restore: state %v: %w", id, s, ErrInvalidTask)
	}
	return Task{id: id, state: s, retries: retries, maxRetries: maxRetries}, nil
}

// ID returns the task id.
func (t *Task) ID() string { return t.id }

// State returns the current state.
func (t *Task) State() State { return t.state }

// Retries returns how many retries the task has used.
func (t *Task) Retries() uint32 { return t.retries }

// MaxRetries returns the task's max_retries.
func (t *Task) MaxRetries() uint32 { return t.maxRetries }

// CanRetry reports whether one more retry is allowed by max_retries (not
// whether the current state has a row into OPEN).
func (t *Task) CanRetry() bool { return t.retries < t.maxRetries }

// Transition moves the task to `to` at time now and returns the lifecycle
// event to record. actor and reason are copied into the event as they are;
// tr is "" or a seed TransitionReason. It refuses, leaving the task
// unchanged, a row not in the table (*IllegalTransitionError), a tr that is
// not a seed value (ErrUnknownReason) and a retry past max_retries
// (*RetriesExhaustedError); see the package doc for the retry rule.
//
// Transition does not allocate except to build an error.
func (t *Task) Transition(to State, tr TransitionReason, actor, reason string, now time.Time) (LifecycleEvent, error) {
	from := t.state
	if !CanTransition(from, to) {
		return LifecycleEvent{}, &IllegalTransitionError{TaskID: t.id, From: from, To: to}
	}
	if tr != "" && !tr.Valid() {
		return LifecycleEvent{}, fmt.Errorf("task %s: %v to %v: transition reason %q: %w", t.id, from, to, string(tr), ErrUnknownReason)
	}
	retries := t.retries
	if to == Open && tr.countsRetry() {
		if retries >= t.maxRetries {
			return LifecycleEvent{}, &RetriesExhaustedError{TaskID: t.id, From: from, Reason: tr, Retries: retries, MaxRetries: t.maxRetries}
		}
		retries++
	}
	t.state, t.retries = to, retries
	return LifecycleEvent{
		Timestamp:        now,
		EntityType:       EntityTask,
		EntityID:         t.id,
		From:             from,
		To:               to,
		Actor:            actor,
		Reason:           reason,
		TransitionReason: tr,
	}, nil
}
