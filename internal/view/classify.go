package view

import (
	"time"

	"github.com/swarmd/swarmd/internal/agent"
)

// Visual is seed 004's visual classification of an agent: what an operator
// needs to see at a glance, derived from the agent's state and what its
// session last did, not one of the state machine's states.
type Visual string

// The visual states. Paused is swarmd's own: seed 004 folds it into idle,
// but an operator who paused an agent wants to see that it is held, not
// merely waiting.
const (
	Spawning Visual = "spawning" // a session is being prepared or launched
	Running  Visual = "running"  // a session works and printed recently
	Stalled  Visual = "stalled"  // a session printed nothing for stall_after
	Merging  Visual = "merging"  // the session ended and its work is being integrated
	Idle     Visual = "idle"     // waiting: for mail or a task, or backing off
	Paused   Visual = "paused"   // held by the operator or a budget
	Dead     Visual = "dead"     // stopped, or its spawn timed out
	Unknown  Visual = "unknown"  // a state this version does not know
)

// Visuals lists every visual state in display order.
var Visuals = []Visual{Spawning, Running, Stalled, Merging, Idle, Paused, Dead, Unknown}

var indicators = map[Visual][2]string{
	Spawning: {"◔", "s"},
	Running:  {"●", "R"},
	Stalled:  {"◐", "!"},
	Merging:  {"⇄", "M"},
	Idle:     {"□", "-"},
	Paused:   {"‖", "P"},
	Dead:     {"○", "x"},
	Unknown:  {"◌", "?"},
}

// Indicator is seed 004's symbol for v (one terminal cell wide).
func (v Visual) Indicator() string {
	if s, ok := indicators[v]; ok {
		return s[0]
	}
	return indicators[Unknown][0]
}

// ASCII is v's indicator for a terminal that cannot show the symbols.
func (v Visual) ASCII() string {
	if s, ok := indicators[v]; ok {
		return s[1]
	}
	return indicators[Unknown][1]
}

// DefaultSpawnTimeout is seed 004's spawn timeout: a session still being
// launched after this long is shown dead.
const DefaultSpawnTimeout = 60 * time.Second

// Thresholds are the times after which classification changes.
type Thresholds struct {
	StallAfter   time.Duration // config stall_after (seed 004: 5 minutes)
	SpawnTimeout time.Duration // 0: DefaultSpawnTimeout
}

// Condition is what Classify reads of one agent.
type Condition struct {
	State agent.StateKind
	// Since is when the agent entered State.
	Since time.Time
	// SessionStarted and LastOutput are the running session's start and
	// its last output (zero when it printed nothing yet).
	SessionStarted time.Time
	LastOutput     time.Time
	Idle           bool // said DONE: waits for mail or a task
	Paused         bool
	// Merging: the merge queue is integrating this agent's work.
	Merging bool
}

// Classify is seed 004's mapping from an agent's condition to its visual
// state at now. It is pure: the caller passes the time.
//
//   - Stopped is dead; Spawning for SpawnTimeout or longer is dead too.
//   - Paused wins over everything but dead: the agent is held.
//   - Initializing, BuildingPrompt and Spawning are spawning, unless the
//     agent is idle (it said DONE and waits in BuildingPrompt).
//   - Running and Interrupting are running, or stalled once the session has
//     printed nothing for StallAfter (counted from its start when it never
//     printed: a heartbeat that never came is as stale).
//   - SessionComplete is merging (the session's work is being counted and
//     handed on), and so is an agent between sessions whose work the merge
//     queue holds.
//   - CoolingDown is idle: it waits out its backoff.
func Classify(c Condition, now time.Time, th Thresholds) Visual {
	spawnTimeout := th.SpawnTimeout
	if spawnTimeout <= 0 {
		spawnTimeout = DefaultSpawnTimeout
	}
	switch c.State {
	case agent.Stopped:
		return Dead
	case agent.Spawning:
		if now.Sub(c.Since) >= spawnTimeout {
			return Dead
		}
	}
	if c.Paused {
		return Paused
	}
	switch c.State {
	case agent.Initializing, agent.BuildingPrompt, agent.Spawning:
		if c.Idle {
			if c.Merging {
				return Merging
			}
			return Idle
		}
		return Spawning
	case agent.Running, agent.Interrupting:
		heartbeat := c.LastOutput
		if heartbeat.IsZero() {
			heartbeat = c.SessionStarted
		}
		if heartbeat.IsZero() {
			heartbeat = c.Since
		}
		if th.StallAfter > 0 && now.Sub(heartbeat) >= th.StallAfter {
			return Stalled
		}
		return Running
	case agent.SessionComplete:
		return Merging
	case agent.CoolingDown:
		if c.Merging {
			return Merging
		}
		return Idle
	}
	return Unknown
}
