package daemon

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

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
			d.targetMoved(ctx, m.From, m.To, seen)
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
			d.recordTargetMoved(kind, s.Last, s.Tip, seen)
			return
		}
	}
}

// lookTries bounds the sightings of one look.
const lookTries = 3

// targetMoved records a move from prev to tip.
func (d *Daemon) targetMoved(ctx context.Context, prev, tip, seen string) {
	d.recordTargetMoved(d.moveKind(ctx, prev, tip), prev, tip, seen)
}

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

func (d *Daemon) recordTargetMoved(kind, prev, tip, seen string) {
	cfg, _ := d.current()
	into := ""
	if cfg.Merge != nil {
		into = cfg.Merge.Into
	}
	reason := fmt.Sprintf("%s %s from %.12s to %.12s by someone other than the merge queue, seen %s", into, kind, prev, tip, seen)
	if kind == "rewound" {
		reason += ": merges the queue made may no longer be on it"
	}
	d.log.Error("MERGE TARGET MOVED: "+reason, zap.String("target", into), zap.String("kind", kind),
		zap.String("from", prev), zap.String("to", tip))
	d.journal.Event(store.EventRecord{At: time.Now(), Agent: "merge", Event: "target_moved", Actor: "swarmd", Reason: reason})
	d.metrics.TargetMoved(kind)
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
