package runner

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

func (r *recorder) records() []SessionRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]SessionRecord(nil), r.sessions...)
}

// checkRecord asserts a session's recorded outcome and abort reason.
func checkRecord(t *testing.T, rec SessionRecord, label, abort string) {
	t.Helper()
	if got := rec.OutcomeLabel(); got != label || rec.Result.AbortReason != abort || rec.Interrupted != (label == OutcomeInterrupted) {
		t.Errorf("session %s recorded as %q (Interrupted %v), abort reason %q; want %q, %q",
			rec.SessionID, got, rec.Interrupted, rec.Result.AbortReason, label, abort)
	}
}

// A command backend's session is cancelled with SIGTERM, which reads
// shutdown_signal; interrupted by urgent mail, it is recorded as
// interrupted with abort reason urgent_message. The operator's stop of the
// next session is still an error with the signal's reason.
func TestRealInterruptRecordedAsInterrupted(t *testing.T) {
	sup := newSupervisor(t)
	be, err := backend.NewCommand(sup, backend.CommandConfig{Command: "/bin/sleep", Args: []string{"3600"}})
	if err != nil {
		t.Fatal(err)
	}
	h := realHarness(t, be, nil)
	h.start()
	h.waitReal("Running", func(s Snapshot) bool { return s.State.Kind == agent.Running })
	h.r.Interrupt(1, time.Now())
	h.waitReal("next session", func(s Snapshot) bool { return s.State.Kind == agent.Running && len(sessionIDs(h)) == 2 })
	h.stop()
	recs := h.rec.records()
	if len(recs) != 2 {
		t.Fatalf("%d session records, want 2", len(recs))
	}
	checkRecord(t, recs[0], OutcomeInterrupted, backend.AbortUrgentMessage)
	checkRecord(t, recs[1], OutcomeError, backend.AbortShutdownSignal)
}

// A session that ignores the interrupt and is force-stopped after the grace
// period is interrupted too; so is one that exits 0 while being
// interrupted: the machine goes back to BuildingPrompt, not
// SessionComplete, so it did not complete (its mail is shown again, its
// signal is not applied), and its row must not say success. Only the
// interrupt's own end carries the abort reason.
func TestInterruptRecordAfterGraceAndSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		// The first two sessions ignore their cancel; the third exits on
		// the operator's stop.
		h.be.plan = func(n int, s *fakeSession) { s.exitOnCancel = n == 2 }
		h.start()
		h.waitState(agent.Running)
		h.r.Interrupt(1, time.Now())
		h.waitFor("second session", func(s Snapshot) bool { return h.be.starts() == 2 && s.State.Kind == agent.Running })
		h.r.Interrupt(2, time.Now())
		h.waitFor("second session interrupted", func(s Snapshot) bool { return s.State.Kind == agent.Interrupting })
		// The second session's cancel lands as it finishes its work.
		h.be.session(1).finish(backend.Result{Outcome: backend.OutcomeSuccess, Reason: "exit status 0"})
		h.waitFor("third session", func(s Snapshot) bool { return h.be.starts() == 3 && s.State.Kind == agent.Running })
		h.stop()
		recs := h.rec.records()
		if len(recs) != 3 {
			t.Fatalf("%d session records, want 3", len(recs))
		}
		checkRecord(t, recs[0], OutcomeInterrupted, backend.AbortUrgentMessage)
		checkRecord(t, recs[1], OutcomeInterrupted, "")
		if recs[2].Interrupted {
			t.Errorf("the operator's stop recorded as an interrupt: %+v", recs[2])
		}
	})
}
