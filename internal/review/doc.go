// Package review is the primary/reviewer loop of seed 002, as a pure state
// machine, and the scanner that finds the DONE / PASS / FAIL signals in a
// session's result.
//
// A Loop is the review of one task: a worker (the seed's primary agent) does
// the work, a reviewer (its secondary agent) approves it with PASS or sends it
// back with FAIL, at most max_iterations times (default 3). Its states are the
// seed's five, init, working, reviewing, complete and failed, and it takes only
// the seed's eight transitions. It records the iteration count and one Round
// per review verdict, and can be rebuilt after a daemon restart (Resume) with
// the next action to take. docs/task-lifecycle.md says how a loop drives the
// task machine of package task.
//
// Like internal/agent and internal/task it does no I/O and reads no clock:
// the caller passes the time of each verdict. A Loop is not safe for
// concurrent use.
package review
