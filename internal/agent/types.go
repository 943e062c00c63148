package agent

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// StateKind names one of the eight observable agent states.
type StateKind uint8

// The eight states of seed 001, in seed order.
const (
	Initializing StateKind = iota
	BuildingPrompt
	Spawning
	Running
	Interrupting
	SessionComplete
	CoolingDown
	Stopped
)

// AllStates lists every StateKind in order, so that callers such as metrics
// can emit one label per state, including those no agent is in.
var AllStates = [...]StateKind{
	Initializing,
	BuildingPrompt,
	Spawning,
	Running,
	Interrupting,
	SessionComplete,
	CoolingDown,
	Stopped,
}

var stateNames = [...]string{
	Initializing:    "Initializing",
	BuildingPrompt:  "BuildingPrompt",
	Spawning:        "Spawning",
	Running:         "Running",
	Interrupting:    "Interrupting",
	SessionComplete: "SessionComplete",
	CoolingDown:     "CoolingDown",
	Stopped:         "Stopped",
}

// String returns the seed name of the state, e.g. "BuildingPrompt".
func (k StateKind) String() string {
	if int(k) < len(stateNames) {
		return stateNames[k]
	}
	return "StateKind(" + strconv.Itoa(int(k)) + ")"
}

// ErrUnknownStateKind is returned by ParseStateKind for a name that is not
// one of the eight seed state names.
var ErrUnknownStateKind = errors.New("unknown state kind")

// ParseStateKind is the inverse of StateKind.String. It is exact and
// case-sensitive, because the names are persisted and compared verbatim.
func ParseStateKind(s string) (StateKind, error) {
	for _, k := range AllStates {
		if stateNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("agent: parse state kind %q: %w", s, ErrUnknownStateKind)
}

// State is an agent state with its payload. SessionSeq is meaningful only for
// Running and Interrupting, Until only for CoolingDown.
type State struct {
	Kind       StateKind
	SessionSeq uint32
	Until      time.Time
}

// IsTerminal reports whether the agent will never run again (only Stopped).
func (s State) IsTerminal() bool { return s.Kind == Stopped }

// String renders the state with its payload, e.g. "Running{session_seq: 3}"
// or "CoolingDown{until: 2025-01-02T03:04:05.000000006Z}".
func (s State) String() string {
	switch s.Kind {
	case Running, Interrupting:
		return s.Kind.String() + "{session_seq: " + strconv.FormatUint(uint64(s.SessionSeq), 10) + "}"
	case CoolingDown:
		return "CoolingDown{until: " + s.Until.Format(time.RFC3339Nano) + "}"
	default:
		return s.Kind.String()
	}
}

// EventKind names one of the nine events that drive the machine. The zero
// value is deliberately not an event, so an unset Event is rejected.
type EventKind uint8

// The nine events of seed 001.
const (
	WorktreeReady EventKind = iota + 1
	PromptReady
	SessionStarted
	SessionExited
	UrgentMessage
	GraceExceeded
	BackoffElapsed
	OperatorStop
	FatalError
)

var eventNames = [...]string{
	WorktreeReady:  "WorktreeReady",
	PromptReady:    "PromptReady",
	SessionStarted: "SessionStarted",
	SessionExited:  "SessionExited",
	UrgentMessage:  "UrgentMessage",
	GraceExceeded:  "GraceExceeded",
	BackoffElapsed: "BackoffElapsed",
	OperatorStop:   "OperatorStop",
	FatalError:     "FatalError",
}

// String returns the seed name of the event kind, e.g. "SessionExited".
func (k EventKind) String() string {
	if k != 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// OutcomeKind says how a backend session ended.
type OutcomeKind uint8

// The three ExitOutcome variants of seed 000.
const (
	Success OutcomeKind = iota
	Error
	Timeout
)

// String returns "Success", "Error" or "Timeout".
func (k OutcomeKind) String() string {
	switch k {
	case Success:
		return "Success"
	case Error:
		return "Error"
	case Timeout:
		return "Timeout"
	default:
		return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
	}
}

// ExitOutcome is how a backend session ended. Msg is set only for Error.
type ExitOutcome struct {
	Kind OutcomeKind
	Msg  string
}

// String returns "Success", "Error(msg)" or "Timeout".
func (o ExitOutcome) String() string {
	if o.Kind == Error {
		return "Error(" + o.Msg + ")"
	}
	return o.Kind.String()
}

// Event is one input to Machine.Handle. Only the field matching Kind is used;
// build events with the Ev* constructors.
type Event struct {
	Kind    EventKind
	Prompt  string      // PromptReady
	Seq     uint32      // SessionStarted
	Outcome ExitOutcome // SessionExited
	Msg     string      // FatalError
}

// EvWorktreeReady reports that the agent's git worktree is ready.
func EvWorktreeReady() Event { return Event{Kind: WorktreeReady} }

// EvPromptReady reports that the system prompt p has been assembled.
func EvPromptReady(p string) Event { return Event{Kind: PromptReady, Prompt: p} }

// EvSessionStarted reports that backend session seq has been launched.
func EvSessionStarted(seq uint32) Event { return Event{Kind: SessionStarted, Seq: seq} }

// EvSessionExited reports that the backend session ended with o.
func EvSessionExited(o ExitOutcome) Event { return Event{Kind: SessionExited, Outcome: o} }

// EvUrgentMessage reports that the router found urgent mail for the agent.
func EvUrgentMessage() Event { return Event{Kind: UrgentMessage} }

// EvGraceExceeded reports that an interrupted session outlived its grace period.
func EvGraceExceeded() Event { return Event{Kind: GraceExceeded} }

// EvBackoffElapsed reports that the CoolingDown timer fired.
func EvBackoffElapsed() Event { return Event{Kind: BackoffElapsed} }

// EvOperatorStop reports that the operator asked the agent to stop.
func EvOperatorStop() Event { return Event{Kind: OperatorStop} }

// EvFatalError reports an unrecoverable error described by msg.
func EvFatalError(msg string) Event { return Event{Kind: FatalError, Msg: msg} }

// String renders the event with its payload, e.g. "SessionExited(Error(boom))".
// PromptReady shows only the prompt's length: prompts are large and may hold
// text that does not belong in logs.
func (e Event) String() string {
	switch e.Kind {
	case PromptReady:
		return "PromptReady(len=" + strconv.Itoa(len(e.Prompt)) + ")"
	case SessionStarted:
		return "SessionStarted(" + strconv.FormatUint(uint64(e.Seq), 10) + ")"
	case SessionExited:
		return "SessionExited(" + e.Outcome.String() + ")"
	case FatalError:
		return "FatalError(" + e.Msg + ")"
	default:
		return e.Kind.String()
	}
}

// EffectKind names the action the runner must take after a transition.
type EffectKind uint8

// The six side effects of seed 001; NoEffect is the seed's None.
const (
	NoEffect EffectKind = iota
	StorePrompt
	CancelSession
	ForceStopSession
	IncrementSession
	LogFatal
)

var effectNames = [...]string{
	NoEffect:         "None",
	StorePrompt:      "StorePrompt",
	CancelSession:    "CancelSession",
	ForceStopSession: "ForceStopSession",
	IncrementSession: "IncrementSession",
	LogFatal:         "LogFatal",
}

// String returns the seed name of the effect; NoEffect is "None".
func (k EffectKind) String() string {
	if int(k) < len(effectNames) {
		return effectNames[k]
	}
	return "EffectKind(" + strconv.Itoa(int(k)) + ")"
}

// SideEffect is what Handle asks the runner to do. Prompt is set for
// StorePrompt, Msg for LogFatal.
type SideEffect struct {
	Kind   EffectKind
	Prompt string
	Msg    string
}

// String renders the effect, e.g. "LogFatal(boom)". StorePrompt shows only
// the prompt's length, like Event.String.
func (e SideEffect) String() string {
	switch e.Kind {
	case StorePrompt:
		return "StorePrompt(len=" + strconv.Itoa(len(e.Prompt)) + ")"
	case LogFatal:
		return "LogFatal(" + e.Msg + ")"
	default:
		return e.Kind.String()
	}
}
