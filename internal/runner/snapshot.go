package runner

import (
	"sync"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
)

// The agent's observable state; publishTransition rebuilds it at every
// transition, and the parts that other goroutines change update it.

// Snapshot is the agent's observable state at one moment.
type Snapshot struct {
	Agent             string
	State             agent.State
	Seq               uint32 // the session sequence counter
	SessionID         string // current or last session
	SessionStarted    time.Time
	ConsecutiveErrors uint32
	TotalErrors       uint32
	Reason            string // why the last transition happened (the stop reason once Stopped)
	Since             time.Time
	Version           uint64 // increments on every transition
	// HotLoop: the last sessions each ended on their own within a second
	// of starting (a backend that exits at once), so the agent only runs
	// as fast as min_session_interval allows.
	HotLoop bool
	// DiskFull, if set, is how the last write of a session log or prompt
	// failed for lack of space; it clears at the next write that works.
	DiskFull string
	// Idle: waiting in BuildingPrompt for mail or a task (see Prompt.Idle).
	Idle bool
	// Paused: held by Pause (who, why, since when); Frozen: the running
	// session's processes are stopped (Pause.Now).
	Paused      bool
	PauseReason string
	PausedBy    string
	PausedSince time.Time
	Frozen      bool
	FrozenProcs int // how many processes the freeze stopped
	// Waiting, if set, is why the agent waits for its provider before its
	// next session (Config.Gate).
	Waiting string
	// StoreWait, if set, is what the agent waits for the store to record
	// (its session's outcome, its start, a prompt's claims) while the store
	// is slow, locked or away, and since when: nothing is dropped, the
	// agent waits where it is.
	StoreWait      string
	StoreWaitSince time.Time
}

// published is the snapshot as other goroutines read it, with the channel
// closed at its next change.
type published struct {
	mu      sync.Mutex
	snap    Snapshot
	changed chan struct{}
}

func (p *published) init(s Snapshot) {
	p.snap, p.changed = s, make(chan struct{})
}

func (p *published) get() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snap
}

func (p *published) watch() (Snapshot, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snap, p.changed
}

// update lets f change the snapshot; when f reports a change the version
// moves on and watchers wake. It reports what f did. f runs with p.mu held:
// it may take only locks that are never held while calling update.
func (p *published) update(f func(*Snapshot) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !f(&p.snap) {
		return false
	}
	p.snap.Version++
	close(p.changed)
	p.changed = make(chan struct{})
	return true
}

// Snapshot returns the current state.
func (r *Runner) Snapshot() Snapshot { return r.snaps.get() }

// Watch returns the current state and a channel closed at the next change:
// observers wait on it instead of polling.
func (r *Runner) Watch() (Snapshot, <-chan struct{}) { return r.snaps.watch() }

func (r *Runner) snapReason() string { return r.snaps.get().Reason }
