package logs

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Rotation packs a running agent's ended sessions into an archive once
// every of them have settled since the agent's last archive. Without it an
// agent's logs were archived only when it stopped: an agent that ran for
// weeks kept every session's log and prompt in logs/AGENT/, and neither
// logs.keep_archives nor logs.max_age bounded them.
//
// Settled is called on the settling path and never waits: the archive is
// made by Run, one agent at a time, off every agent's path. Only sessions
// before the settled one's successor are taken (ArchiveBefore), so the
// next session's prompt, written as the settled one's outcome commits, is
// never touched.
type Rotation struct {
	store *Store
	every int

	mu      sync.Mutex
	counted map[string]int    // sessions settled since the agent's last rotation
	due     map[string]uint32 // agents to rotate: archive the sessions before this seq
	wake    chan struct{}     // one buffered wake-up: Run drains due whole
}

// NewRotation returns the rotation of s's agents every sessions; every < 1
// rotates none (Settled does nothing).
func (s *Store) NewRotation(every int) *Rotation {
	return &Rotation{store: s, every: every, counted: make(map[string]int), due: make(map[string]uint32),
		wake: make(chan struct{}, 1)}
}

// Settled counts agent's session seq as settled: its outcome is in the
// store, so its log is no longer needed for restart recovery.
func (r *Rotation) Settled(agent string, seq uint32) {
	if r == nil || r.every < 1 {
		return
	}
	r.mu.Lock()
	r.counted[agent]++
	if r.counted[agent] < r.every {
		r.mu.Unlock()
		return
	}
	r.counted[agent] = 0
	r.due[agent] = seq + 1
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run makes the archives Settled asked for until ctx ends. An archive that
// ctx cuts short leaves its originals, which the agent's next rotation (or
// the next start) takes.
func (r *Rotation) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.rotate(ctx)
	}
}

// rotate archives every agent due, one after another.
func (r *Rotation) rotate(ctx context.Context) {
	r.mu.Lock()
	due := r.due
	r.due = make(map[string]uint32, len(due))
	r.mu.Unlock()
	for agent, before := range due {
		if ctx.Err() != nil {
			return
		}
		if _, err := r.store.ArchiveBefore(ctx, agent, before, time.Now()); err != nil && ctx.Err() == nil {
			r.store.log.Warn("archive a running agent's session logs", zap.String("agent", agent),
				zap.Uint32("before_session", before), zap.Error(err))
		}
	}
}
