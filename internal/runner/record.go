package runner

import (
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// Transition is one applied event, as observers and the event log see it.
type Transition struct {
	Agent     string
	At        time.Time
	From      agent.State
	Event     agent.Event
	To        agent.State
	Effect    agent.SideEffect
	Actor     string // runner, router, operator, daemon
	Reason    string
	SessionID string
	Seq       uint32
	// UrgentCommitted is when the urgent message behind an UrgentMessage
	// event was committed (zero otherwise): At minus it is the interrupt
	// latency.
	UrgentCommitted   time.Time
	ConsecutiveErrors uint32
	TotalErrors       uint32
}

// SessionRecord describes one finished backend session.
type SessionRecord struct {
	Agent      string
	SessionID  string
	Seq        uint32
	Outcome    agent.ExitOutcome
	Result     backend.Result
	Stopped    bool // ended because the agent was stopping
	LogPath    string
	HeadBefore string
	HeadAfter  string
	Commits    int   // commits the session made (HEAD before..after)
	Task       int64 // the task the session worked on (0: none)
	// ForceStopped: the runner killed the session after its timeout's or
	// its stop's grace period (a GraceExceeded force stop is a transition).
	ForceStopped bool
	// Interrupted: urgent mail interrupted the session and it did not
	// succeed (its Result's AbortReason is then backend.AbortUrgentMessage).
	// The state machine counts no error for it; see OutcomeLabel.
	Interrupted bool
	// TurnLimit: the session reached max_turns (its Result's AbortReason is
	// backend.AbortMaxTurns). Not an error either; see OutcomeLabel.
	TurnLimit bool
	// StoppedFor is why swarmd stopped the session on purpose (max_turns,
	// Provider is why the session's provider cut it off (providerTrouble):
	// recorded as an error, counted against nobody.
	Provider string
	// permission_denied, budget_exhausted; see stoppedFor), "" otherwise.
	StoppedFor string
	// Backend is the name of the backend the session ran on.
	Backend string
}

// Outcome labels of a finished session, as the metrics
// (swarmd_sessions_total{outcome}) and the sessions table record it.
const (
	OutcomeSuccess     = "success"
	OutcomeError       = "error"
	OutcomeTimeout     = "timeout"
	OutcomeInterrupted = "interrupted"
	OutcomeMaxTurns    = "max_turns"
	// OutcomePermissionDenied: the session called a tool its policy
	// refuses and was stopped; OutcomeBudgetExhausted: its agent's budget
	// ran out. Neither is an error, like max_turns.
	OutcomePermissionDenied = "permission_denied"
	OutcomeBudgetExhausted  = "budget_exhausted"
)

// OutcomeLabel is the session's recorded outcome: the state machine's exit
// outcome, except that a session interrupted by urgent mail is
// "interrupted", not an error: it was stopped on purpose, and the machine
// counts no error for it either, so an agent that is merely interrupted
// often must not look like one that fails. A session that swarmd stopped
// on purpose is its reason (max_turns, permission_denied,
// budget_exhausted), for the same reason.
func (s SessionRecord) OutcomeLabel() string {
	switch {
	case s.Interrupted:
		return OutcomeInterrupted
	case s.StoppedFor != "":
		return s.StoppedFor
	case s.TurnLimit:
		return OutcomeMaxTurns
	case s.Provider != "":
		return OutcomeError
	case s.Outcome.Kind == agent.Success:
		return OutcomeSuccess
	case s.Outcome.Kind == agent.Timeout:
		return OutcomeTimeout
	}
	return OutcomeError
}
