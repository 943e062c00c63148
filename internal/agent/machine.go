package agent

import (
	"errors"
	"strconv"
	"time"
)

// Default error thresholds of seed 000.
const (
	DefaultMaxConsecutiveErrors uint32 = 5
	DefaultMaxTotalErrors       uint32 = 20
)

// Thresholds are the error-counter limits at which the agent stops. A zero
// field means its default, so the zero value is the seed's 5 and 20.
type Thresholds struct {
	MaxConsecutiveErrors uint32
	MaxTotalErrors       uint32
}

// DefaultThresholds returns the seed defaults: 5 consecutive, 20 total.
func DefaultThresholds() Thresholds {
	return Thresholds{
		MaxConsecutiveErrors: DefaultMaxConsecutiveErrors,
		MaxTotalErrors:       DefaultMaxTotalErrors,
	}
}

func (th Thresholds) withDefaults() Thresholds {
	if th.MaxConsecutiveErrors == 0 {
		th.MaxConsecutiveErrors = DefaultMaxConsecutiveErrors
	}
	if th.MaxTotalErrors == 0 {
		th.MaxTotalErrors = DefaultMaxTotalErrors
	}
	return th
}

const (
	backoffBase = 2000 * time.Millisecond
	backoffCap  = 60000 * time.Millisecond
)

// Backoff returns the CoolingDown duration min(2000*2^(n-1), 60000) ms, where
// n is consecutive_errors after the increment. Backoff(0) is 0.
func Backoff(n uint32) time.Duration {
	switch {
	case n == 0:
		return 0
	case n >= 6: // 2000*2^5 = 64000 > cap; also keeps the shift below from overflowing
		return backoffCap
	default:
		return min(backoffBase<<(n-1), backoffCap)
	}
}

// ErrInvalidTransition is wrapped by every *TransitionError, for errors.Is.
var ErrInvalidTransition = errors.New("invalid transition")

// TransitionError reports an event that the transition table does not allow
// in the current state. The machine is left unchanged. The runner
// logs it and carries on (a late SessionExited after GraceExceeded is the
// usual case); it is never a panic.
type TransitionError struct {
	From  State
	Event EventKind
}

func (e *TransitionError) Error() string {
	return "agent: " + ErrInvalidTransition.Error() + ": event " + e.Event.String() + " in state " + e.From.String()
}

func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// Machine is one agent's state plus its two error counters. The zero value is
// not usable; build one with New or Restore.
type Machine struct {
	state       State
	consecutive uint32
	total       uint32
	th          Thresholds
}

// New returns a machine in Initializing with both counters at zero. Zero
// threshold fields take their defaults.
func New(th Thresholds) *Machine {
	return &Machine{state: State{Kind: Initializing}, th: th.withDefaults()}
}

// Restore rebuilds a machine from persisted state and counters, for restart
// recovery. Nothing is validated: counters at or above a threshold simply make
// the next counted error fatal.
func Restore(th Thresholds, s State, consecutiveErrors, totalErrors uint32) *Machine {
	return &Machine{
		state:       s,
		consecutive: consecutiveErrors,
		total:       totalErrors,
		th:          th.withDefaults(),
	}
}

// State returns the current state.
func (m *Machine) State() State { return m.state }

// ConsecutiveErrors returns consecutive_errors.
func (m *Machine) ConsecutiveErrors() uint32 { return m.consecutive }

// TotalErrors returns total_errors.
func (m *Machine) TotalErrors() uint32 { return m.total }

// Thresholds returns the effective thresholds, defaults filled in.
func (m *Machine) Thresholds() Thresholds { return m.th }

// Handle applies ev at time now (used only to compute CoolingDown.Until) and
// returns the side effect the runner must execute. For an event the table
// does not allow in the current state it returns a *TransitionError wrapping
// ErrInvalidTransition, and state and counters are unchanged.
//
// Handle does not allocate except to build that error or the LogFatal message
// when an error threshold is reached.
//
// It is one switch on purpose: each case is a row of the transition table
// in docs/architecture.md, which TestAgentMachineTable checks against it.
func (m *Machine) Handle(ev Event, now time.Time) (SideEffect, error) {
	from := m.state.Kind

	// Global transitions, valid from every state. From Stopped they are
	// no-ops so shutdown can be sent to every agent blindly.
	switch ev.Kind {
	case OperatorStop:
		if from == Stopped {
			return SideEffect{}, nil
		}
		m.state = State{Kind: Stopped}
		if from == Running || from == Interrupting {
			return SideEffect{Kind: CancelSession}, nil
		}
		return SideEffect{}, nil
	case FatalError:
		if from == Stopped {
			return SideEffect{}, nil
		}
		m.state = State{Kind: Stopped}
		return SideEffect{Kind: LogFatal, Msg: ev.Msg}, nil
	}

	switch from {
	case Initializing:
		if ev.Kind == WorktreeReady {
			m.state = State{Kind: BuildingPrompt}
			return SideEffect{}, nil
		}
	case BuildingPrompt:
		if ev.Kind == PromptReady {
			m.state = State{Kind: Spawning}
			return SideEffect{Kind: StorePrompt, Prompt: ev.Prompt}, nil
		}
	case Spawning:
		switch ev.Kind {
		case SessionStarted:
			m.consecutive = 0
			m.state = State{Kind: Running, SessionSeq: ev.Seq}
			return SideEffect{}, nil
		case SessionExited:
			// Success while Spawning is not in the seed table.
			if k := ev.Outcome.Kind; k == Error || k == Timeout {
				return m.sessionFailed(ev.Outcome, now), nil
			}
		}
	case Running:
		switch ev.Kind {
		case SessionExited:
			switch ev.Outcome.Kind {
			case Success:
				m.consecutive = 0
				m.state = State{Kind: SessionComplete}
				return SideEffect{}, nil
			case Error, Timeout:
				return m.sessionFailed(ev.Outcome, now), nil
			}
		case UrgentMessage:
			m.state = State{Kind: Interrupting, SessionSeq: m.state.SessionSeq}
			return SideEffect{Kind: CancelSession}, nil
		}
	case Interrupting:
		switch ev.Kind {
		case SessionExited:
			// Any outcome: the interrupt was intentional, so no counter moves.
			// An out-of-range outcome kind is a caller bug and is rejected.
			if ev.Outcome.Kind <= Timeout {
				m.state = State{Kind: BuildingPrompt}
				return SideEffect{}, nil
			}
		case GraceExceeded:
			m.state = State{Kind: BuildingPrompt}
			return SideEffect{Kind: ForceStopSession}, nil
		}
	case SessionComplete:
		if ev.Kind == WorktreeReady {
			m.state = State{Kind: BuildingPrompt}
			return SideEffect{Kind: IncrementSession}, nil
		}
	case CoolingDown:
		// now is not compared with Until: the runner owns the timer and
		// only sends BackoffElapsed when it fires.
		if ev.Kind == BackoffElapsed {
			m.state = State{Kind: BuildingPrompt}
			return SideEffect{}, nil
		}
	}
	return SideEffect{}, &TransitionError{From: m.state, Event: ev.Kind}
}

// sessionFailed counts an Error or Timeout exit from Spawning or Running and
// moves to CoolingDown, or to Stopped once either counter reaches its limit.
func (m *Machine) sessionFailed(o ExitOutcome, now time.Time) SideEffect {
	m.consecutive = incr(m.consecutive)
	m.total = incr(m.total)
	consHit := m.consecutive >= m.th.MaxConsecutiveErrors
	totalHit := m.total >= m.th.MaxTotalErrors
	if consHit || totalHit {
		m.state = State{Kind: Stopped}
		return SideEffect{Kind: LogFatal, Msg: m.thresholdMsg(consHit, totalHit, o)}
	}
	m.state = State{Kind: CoolingDown, Until: now.Add(Backoff(m.consecutive))}
	return SideEffect{}
}

// thresholdMsg names the threshold(s) reached and the last outcome, e.g.
// "5 consecutive errors (max 5), last: Error(exit status 1)".
func (m *Machine) thresholdMsg(consHit, totalHit bool, o ExitOutcome) string {
	cons := strconv.FormatUint(uint64(m.consecutive), 10) + " consecutive errors (max " +
		strconv.FormatUint(uint64(m.th.MaxConsecutiveErrors), 10) + ")"
	total := strconv.FormatUint(uint64(m.total), 10) + " total errors (max " +
		strconv.FormatUint(uint64(m.th.MaxTotalErrors), 10) + ")"
	var msg string
	switch {
	case consHit && totalHit:
		msg = cons + " and " + total
	case consHit:
		msg = cons
	default:
		msg = total
	}
	return msg + ", last: " + o.String()
}

// incr saturates rather than wraps, so a restored counter near the top of the
// range can never fall back below its threshold.
func incr(n uint32) uint32 {
	if n == ^uint32(0) {
		return n
	}
	return n + 1
}
