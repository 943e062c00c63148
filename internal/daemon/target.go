package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
)

// The merge target is the queue's. Where nothing keeps an agent from
// writing refs/heads/INTO (isolation without a sandbox), the daemon looks
// at the target at the end of every session and every targetWatchEvery,
// and a move the queue did not make (merge.Queue.Sight) is recorded (an
// event, target_moved), counted (swarmd_merge_target_moves_total) and
// logged as an error, once per tip: rewound (merges the queue counted are
// no longer on the target), or advanced or moved by someone else.

// targetWatchEvery is how often the target is looked at besides session ends.
const targetWatchEvery = 2 * time.Second

// lookAtTarget records a move of the target the queue did not make; seen
// says where it was seen ("at the end of a session of alice"). A move the
// queue built on before this look could claim it is one the queue found
// (merge.Queue.Found): it is recorded here, and a look that read the target
// before the queue moved it looks again rather than claim a stale tip.
func (d *Daemon) lookAtTarget(ctx context.Context, seen string) {
	q := d.merge.queue
	if q == nil {
		return
	}
	d.merge.looking.Lock()
	defer d.merge.looking.Unlock()
	// Each try that fails is a move of the queue's since the sighting; a
	// queue that keeps moving leaves the rest to the next look (the watch).
	for range lookTries {
		for _, m := range q.Found() {
			d.recordTargetMoved(ctx, d.moveKind(ctx, m.From, m.To), m, seen, func(reason string) error {
				return q.Record(ctx, m, merge.Sighting{}, true, reason)
			})
		}
		s, err := q.Sight(ctx)
		if err != nil || s.Own {
			return
		}
		kind := d.moveKind(ctx, s.Last, s.Tip)
		if d.merge.lookHook != nil {
			d.merge.lookHook(s)
		}
		if q.Claim(s) { // reported once
			d.recordTargetMoved(ctx, kind, merge.Move{From: s.Last, To: s.Tip}, seen, func(reason string) error {
				return q.Record(ctx, merge.Move{From: s.Last, To: s.Tip}, s, false, reason)
			})
			return
		}
	}
}

// lookTries bounds the sightings of one look.
const lookTries = 3

// moveKind says how the target went from prev to tip.
func (d *Daemon) moveKind(ctx context.Context, prev, tip string) string {
	switch ok, err := d.merge.queue.IsAncestor(ctx, prev, tip); {
	case err == nil && ok:
		return "advanced"
	case err == nil:
		return "rewound"
	}
	return "moved" // unknown how: git could not tell
}

// recordTargetMoved records m, of kind, seen as seen: record writes its
// event with the target's known tip (merge.Queue.Record), in one
// transaction. A store that refuses gets the move handed back
// (merge.Queue.Unrecorded), recorded by the next look, the queue's next
// merge or the next start, whichever comes first: an event of its own
// besides (the journal's) would be recorded again by that start, which
// finds the known tip still before the move.
func (d *Daemon) recordTargetMoved(ctx context.Context, kind string, m merge.Move, seen string, record func(reason string) error) {
	reason := d.targetMovedReason(kind, m, seen)
	if err := record(reason); err != nil {
		d.log.Warn("merge target: the store refused the record of a move of the target; the next look records it",
			zap.String("kind", kind), zap.String("from", m.From), zap.String("to", m.To), zap.Error(err))
		d.merge.queue.Unrecorded(m)
		return
	}
	d.targetMovedRecorded(kind, m, reason)
}

// targetMovedReason is the reason of a target_moved event.
func (d *Daemon) targetMovedReason(kind string, m merge.Move, seen string) string {
	cfg, _ := d.current()
	reason := fmt.Sprintf("%s %s from %.12s to %.12s by someone other than the merge queue, seen %s", mergeInto(cfg), kind, m.From, m.To, seen)
	if kind == "rewound" {
		reason += ": merges the queue made may no longer be on it"
	}
	return reason
}

// targetMovedRecorded logs and counts a move recorded.
func (d *Daemon) targetMovedRecorded(kind string, m merge.Move, reason string) {
	cfg, _ := d.current()
	d.log.Error("MERGE TARGET MOVED: "+reason, zap.String("target", mergeInto(cfg)), zap.String("kind", kind),
		zap.String("from", m.From), zap.String("to", m.To))
	d.metrics.TargetMoved(kind)
}

// moveReporter is the queue's merge.MoveReporter: the moves it records
// itself (at the daemon's start, and one it built on) are worded, logged
// and counted as the looks' are.
type moveReporter struct{ d *Daemon }

func (t moveReporter) Reason(ctx context.Context, m merge.Move, seen string) (string, string) {
	kind := t.d.moveKind(ctx, m.From, m.To)
	return kind, t.d.targetMovedReason(kind, m, seen)
}

func (t moveReporter) Recorded(m merge.Move, kind, reason string) {
	t.d.targetMovedRecorded(kind, m, reason)
}

// settleTarget compares the target with where the store last knew it to
// be, once at start (merge.Queue.Settle): a move nobody looked at before
// the last stop, or made while no daemon ran, is recorded then.
func (d *Daemon) settleTarget(ctx context.Context) error {
	if d.merge.queue == nil {
		return nil
	}
	return d.merge.queue.Settle(ctx)
}

// targetClone names this repository in the store's record of where its
// target was last known: its git directory, and on a shared store its
// host too (every daemon's clone has a row of its own).
func targetClone(cfg *config.Config) string {
	dir := cfg.Repo
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if !cfg.SharedStore() {
		return dir
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + dir
}

// remoteTargetMoved records, once per tip, that the remote's target is at a
// commit no merge queue made (called by takeTarget, under its lock).
func (d *Daemon) remoteTargetMoved(into, remote, theirs, ours string) {
	if d.merge.remoteMoved == theirs {
		return
	}
	d.merge.remoteMoved = theirs
	reason := fmt.Sprintf("%s on %s moved to %.12s by someone other than a merge queue (this repository's is at %.12s): not taken", into, remote, theirs, ours)
	d.log.Error("MERGE TARGET MOVED ON THE REMOTE: "+reason, zap.String("target", into), zap.String("remote", remote),
		zap.String("to", theirs))
	d.journal.Event(store.EventRecord{At: time.Now(), Agent: "merge", Event: "target_moved", Actor: "swarmd", Reason: reason})
	d.metrics.TargetMoved("remote")
}

// watchTarget looks at the target every targetWatchEvery until stop.
func (d *Daemon) watchTarget(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(targetWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			d.lookAtTarget(ctx, "by the daemon's watch")
		}
	}
}

// targetObserver looks at the target when a session ends: a move then is
// seen with the agent whose session just ended (the likeliest, not a proof).
type targetObserver struct{ d *Daemon }

func (o targetObserver) OnSessionEnd(s runner.SessionRecord) {
	if o.d.merge.queue == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.d.lookAtTarget(ctx, "at the end of session "+s.SessionID+" of "+s.Agent)
}

func (targetObserver) OnTransition(runner.Transition) {}
func (targetObserver) OnIdle(string, bool, time.Time) {}
