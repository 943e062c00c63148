// Package history prunes what the swarm keeps of its past once it is older
// than history.max_age: the event log's agent events and the tool audit.
// Both grow with every session (about 2.3 KB of the 3.7 KB a session adds
// to the store, in a soak run), nothing the swarm does reads their old
// rows, and a daemon left running for months kept every one.
package history

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/service"
	"github.com/swarmd/swarmd/internal/store"
)

// DefaultEvery is how often a Pruner prunes.
const DefaultEvery = time.Hour

// Store is what a Pruner prunes.
type Store interface {
	PruneHistory(ctx context.Context, l store.HistoryLog, before time.Time, after int64) (deleted int, next int64, err error)
}

// Pruner deletes the rows of the history logs older than MaxAge, every
// Every, the first time at its start.
type Pruner struct {
	DB     Store
	MaxAge time.Duration // 0: keep everything (Run returns at once)
	Every  time.Duration // 0: DefaultEvery
	Now    func() time.Time
	Log    *zap.Logger

	after map[string]int64 // by log: the id each prune went past
}

// Run prunes until ctx ends.
func (p *Pruner) Run(ctx context.Context) {
	if p.MaxAge <= 0 {
		return
	}
	every := p.Every
	if every <= 0 {
		every = DefaultEvery
	}
	service.Every(ctx, every, true, p.Prune)
}

// Prune prunes every log once.
func (p *Pruner) Prune(ctx context.Context) {
	if p.after == nil {
		p.after = make(map[string]int64)
	}
	now, log := time.Now, p.Log
	if p.Now != nil {
		now = p.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	before := now().Add(-p.MaxAge)
	for name, l := range map[string]store.HistoryLog{"agent events": store.AgentEvents, "tool calls": store.ToolCalls} {
		n, next, err := p.DB.PruneHistory(ctx, l, before, p.after[name])
		p.after[name] = next
		if err != nil && ctx.Err() == nil {
			log.Warn("prune the history", zap.String("log", name), zap.Int("deleted", n), zap.Error(err))
			continue
		}
		if n > 0 {
			log.Info("history pruned", zap.String("log", name), zap.Int("deleted", n), zap.Time("before", before))
		}
	}
}
