// Package agent is the pure lifecycle state machine of one swarm agent: the
// 8 states, 9 events, 6 side effects, the two error counters and the backoff
// formula described in docs/architecture.md.
//
// It is pure on purpose: no I/O, no goroutines, no logging and no clock reads
// (the caller passes the current time into Machine.Handle). The runner owns
// timers, processes and the worktree, and only executes the SideEffect that
// Handle returns. Keeping the decisions here and the effects there makes the
// machine exhaustively testable and cheap enough (no allocations on the normal
// path) to call on every event.
//
// A Machine is not safe for concurrent use; it belongs to one runner loop.
package agent
