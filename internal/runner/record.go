package runner

import "github.com/swarmd/swarmd/internal/agent"

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
	case s.Outcome.Kind == agent.Success:
		return OutcomeSuccess
	case s.Outcome.Kind == agent.Timeout:
		return OutcomeTimeout
	}
	return OutcomeError
}
