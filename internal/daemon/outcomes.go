package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/settle"
	"github.com/swarmd/swarmd/internal/store"
)

// settlerFor is the Settler of agent a's sessions: its signal words under
// the config that built it (a reload's apply from the agent's next session).
func (d *Daemon) settlerFor(a config.Agent) *settle.Settler {
	return &settle.Settler{
		DB: d.db, Mail: d.mail, Tasks: d.tasks, Logger: d.log.Named("settle"), Group: &d.kit.settles,
		Signals:  review.Signals{Done: a.Signals.Done, Pass: a.Signals.Pass, Fail: a.Signals.Fail},
		Observe:  func(_ string, latency, waited time.Duration) { d.metrics.ObserveSettle(latency, waited) },
		Settled:  d.kit.rotation.Settled,
		GaveUp:   d.reviewGaveUp,
		Orphaned: d.retriesUsedUp,
	}
}

// reviewGaveUp is settle.Settler.GaveUp: a verdict, a live session's or
// one restart recovery applied, left its task FAILED for good.
func (d *Daemon) reviewGaveUp(task int64, reviewer, failure, feedback string) {
	why := "its review record could not be read: the review loop resumed as failed"
	if failure != "" {
		why = failure + ": the review failed it past its iterations; the reviewer said: " + feedback
	}
	d.notifyTaskFailed(task, reviewer, why)
}

// recoverOutcomes applies what a killed daemon's sessions left in their
// logs and not in the store: outcomes of sessions that ended, recorded
// before any agent runs and before the rest are closed as orphaned. A
// verdict among them that fails its task for good alerts as a live one
// does (the alert is held until the notifier opens: alerts.go).
func (d *Daemon) recoverOutcomes(ctx context.Context, own []string, now time.Time) error {
	s := &settle.Settler{DB: d.db, Mail: d.mail, Tasks: d.tasks, Logger: d.log.Named("settle"), GaveUp: d.reviewGaveUp}
	recs, err := s.Recover(ctx, own)
	for _, r := range recs {
		d.log.Warn("outcome of a session that ended as an earlier daemon died recorded from its log",
			zap.String("agent", r.Session.Agent), zap.String("session", r.Session.SessionID), zap.Uint32("seq", r.Session.Seq),
			zap.String("outcome", r.Session.Outcome), zap.String("reported", r.Result.Reported), zap.Int("acked", r.Result.Acked))
		d.journal.Event(store.EventRecord{At: now, Agent: r.Session.Agent, From: "SessionComplete", Event: "Recovery",
			To: "Initializing", Actor: "daemon", SessionID: r.Session.SessionID, Seq: r.Session.Seq,
			Reason: "outcome of session " + r.Session.SessionID + " recorded from its log after a daemon died"})
	}
	return err
}
