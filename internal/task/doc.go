// Package task is the pure lifecycle state machine of one task of the task
// board: the 12 states, the 30 transitions of seed 004's exhaustive table and
// no others, its terminal states, its TransitionReason values and the
// LifecycleEvent every transition produces.
//
// Like internal/agent it does no I/O, starts no goroutines and reads no clock:
// the caller passes the time into Task.Transition and records the returned
// LifecycleEvent. A refused transition returns a typed error and leaves the
// task unchanged, so the store can validate a request before writing it.
//
// # Retries
//
// Seed 004 says FAILED → OPEN "respects max_retries, default 3" but gives no
// counting rule, so this package fixes one. A Task counts retries: every
// transition into OPEN whose TransitionReason is retry or orphan_recovered
// increments it, from whatever state it comes (the seed's two retry rows are
// FAILED → OPEN and ORPHANED → OPEN). Such a transition is refused with a
// *RetriesExhaustedError when retries would exceed max_retries, so retries
// never exceeds max_retries; the caller then sends the task to FAILED instead
// (ORPHANED → FAILED). Other ways into OPEN are not failures and are not
// counted: approval (PLANNED), unclaim and force-requeue (CLAIMED,
// IN_PROGRESS), a resolved dependency (BLOCKED), and the review loop's rework
// (FAILED → OPEN after a reviewer's FAIL, bounded by the loop's own
// max_iterations; see docs/task-lifecycle.md), which pass no TransitionReason.
//
// A Task is a value with no internal pointers; it is not safe for concurrent
// use.
package task
