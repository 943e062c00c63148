package runner

import (
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
)

// Every started session has a seq of its own: a retry after an error, an
// interrupt or a completed session alike takes the next one, and its row
// is begun before the process starts, with the prompt's seq.
func TestEverySessionItsOwnSeq(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.MinSessionInterval = 0 })
		h.be.plan = func(n int, s *fakeSession) {
			if n == 0 || n == 2 {
				s.finish(failure())
				return
			}
			s.finish(success())
		}
		h.start()
		h.waitFor("four sessions", func(Snapshot) bool { return len(h.pr.begins()) >= 4 })
		h.stop()
		seen := map[uint32]string{}
		for i, b := range h.pr.begins()[:4] {
			if other, ok := seen[b.Seq]; ok {
				t.Errorf("seq %d begun by %s and %s", b.Seq, other, b.SessionID)
			}
			seen[b.Seq] = b.SessionID
			if want := uint32(i + 1); b.Seq != want || !strings.HasPrefix(b.SessionID, "alice-"+itoa(want)+"-") {
				t.Errorf("session %d began with seq %d (%s), want %d", i, b.Seq, b.SessionID, want)
			}
		}
		for i, sp := range h.be.specs[:4] {
			if sp.Seq != uint32(i+1) || !strings.HasSuffix(sp.LogPath, "/"+itoa(uint32(i+1))+".log") {
				t.Errorf("spawn %d: seq %d log %s", i, sp.Seq, sp.LogPath)
			}
		}
	})
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// A store that will not take a session's outcome holds the agent where it
// is, shown as waiting on the store after storeWaitShown, for as long as it
// takes: no next session is built before the outcome is recorded.
func TestOutcomeWaitsForTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.pr.hold = make(chan struct{})
		h.be.plan = func(n int, s *fakeSession) { s.finish(success()) }
		h.start()
		s := h.waitFor("waiting on the store", func(s Snapshot) bool { return s.StoreWait != "" })
		if !strings.Contains(s.StoreWait, "waiting on the store: record the session's outcome") {
			t.Errorf("StoreWait = %q", s.StoreWait)
		}
		time.Sleep(time.Hour) // the store stays locked for an hour
		synctest.Wait()
		if n := len(h.pr.requests()); n != 1 {
			t.Fatalf("%d prompts built while the first session's outcome waited, want 1", n)
		}
		if st := h.r.Snapshot(); st.State.Kind != agent.Running || st.StoreWait == "" {
			t.Fatalf("after an hour: %v, wait %q", st.State.Kind, st.StoreWait)
		}
		close(h.pr.hold)
		h.waitFor("second session", func(Snapshot) bool { return len(h.pr.requests()) >= 2 })
		if s := h.r.Snapshot(); s.StoreWait != "" {
			t.Errorf("StoreWait after the store took it: %q", s.StoreWait)
		}
		if got := h.pr.settlements(); len(got) == 0 || !got[0].Completed {
			t.Errorf("settlements %+v", got)
		}
		h.stop()
	})
}

// A stop gives up an outcome the store refuses because the daemon lost
// the agent's lease (another daemon runs the agent and closes the session
// as orphaned): the agent stops without a second signal. An outcome the
// store refuses while it is away is still waited for, up to a force stop.
func TestStopGivesUpAFencedOutcome(t *testing.T) {
	for _, refusal := range []error{errFenced, errStoreBusy} {
		t.Run(refusal.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, nil)
				h.pr.hold, h.pr.refusal = make(chan struct{}), refusal
				h.be.plan = func(n int, s *fakeSession) { s.finish(success()) }
				h.start()
				h.waitFor("waiting on the store", func(s Snapshot) bool { return s.StoreWait != "" })
				h.r.Stop("operator")
				time.Sleep(time.Hour)
				synctest.Wait()
				select {
				case <-h.r.Done():
					if refusal != errFenced {
						t.Fatalf("the agent stopped without the outcome while the store was away")
					}
				default:
					if refusal == errFenced {
						t.Fatalf("the agent still waits an hour after its stop for an outcome its lost lease refuses: %v", h.r.Snapshot().StoreWait)
					}
					h.r.ForceStop()
				}
				if err := <-h.err; err != nil {
					t.Fatal(err)
				}
				<-h.r.Done()
				if got := h.pr.settlements(); len(got) != 0 {
					t.Errorf("settlements %+v, want none", got)
				}
			})
		})
	}
}

// An agent whose sessions hold a task and end, successfully, without a
// signal is held after MaxSilent of them: no further session starts until
// the hold is lifted. A signalled session, or one with nothing to report
// on, resets the count.
func TestSilentSessionsHoldTheAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h *harness
		var holds []string
		h = newHarness(t, func(c *Config) {
			c.MinSessionInterval, c.MaxSilent = 0, 3
			c.Hold = func(reason string) {
				holds = append(holds, reason)
				h.r.Pause(Pause{Actor: "swarmd", Reason: reason, Since: time.Now()})
			}
		})
		h.pr.task = 7
		h.be.plan = func(n int, s *fakeSession) { s.finish(success()) }
		h.start()
		s := h.waitFor("held", func(s Snapshot) bool { return s.Paused })
		if len(holds) != 1 || !strings.Contains(holds[0], "3 sessions in a row held task #7") || s.PausedBy != "swarmd" {
			t.Fatalf("holds %q, paused by %q", holds, s.PausedBy)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := h.be.starts(); n != 3 {
			t.Fatalf("%d sessions started, want 3 then the hold", n)
		}
		h.stop()
	})
}

// Sessions that report (a signal) are never held, however many.
func TestReportingSessionsAreNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		held := false
		h := newHarness(t, func(c *Config) {
			c.MinSessionInterval, c.MaxSilent = 0, 3
			c.Hold = func(string) { held = true }
		})
		h.pr.task, h.pr.signalled = 7, true
		h.be.plan = func(n int, s *fakeSession) { s.finish(success()) }
		h.start()
		h.waitFor("six sessions", func(Snapshot) bool { return h.be.starts() >= 6 })
		h.stop()
		if held {
			t.Fatal("an agent whose sessions signal was held")
		}
	})
}

// The store's refusals double the pause from the first backoff up to the
// most, counted from the first refusal; an answer starts it all again.
func TestStoreBackoff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b storeBackoff
	if b.answered() {
		t.Fatal("answered without a refusal")
	}
	want := storeFirstBackoff
	for i := range 10 {
		d, since := b.refused(t0.Add(time.Duration(i) * time.Second))
		if d != want || !since.Equal(t0) {
			t.Fatalf("refusal %d: pause %v since %v, want %v since %v", i+1, d, since, want, t0)
		}
		want = min(2*want, storeMaxBackoff)
	}
	if !b.answered() || b.answered() {
		t.Fatal("an answer after refusals was not reported exactly once")
	}
	if d, since := b.refused(t0.Add(time.Hour)); d != storeFirstBackoff || !since.Equal(t0.Add(time.Hour)) {
		t.Errorf("after an answer: pause %v since %v", d, since)
	}
}

// A begin whose commit's answer is lost, then a stop while it waits to try
// again: the session never starts, and its row, which the lost commit may
// have made, is closed with the return of its claims (Release, with the
// session's end), not left open for the next start to find orphaned.
func TestBeginGivenUpAtAStopClosesItsRow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.pr.inDoubt = true
		h.start()
		h.waitFor("the begin waiting on the store", func(s Snapshot) bool { return s.StoreWait != "" })
		h.stop()
		if open := h.pr.open(); len(open) != 0 {
			t.Errorf("rows left open %v, want the begun one closed as never started", open)
		}
		if got := h.pr.unstarted(); len(got) != 1 || got[0].Ended == nil || !strings.HasPrefix(got[0].Ended.Result.Reason, "never started: ") ||
			got[0].Ended.SessionID != got[0].SessionID {
			t.Errorf("releases %+v, want one with the session's end: it never started", got)
		}
		if got := h.pr.settlements(); len(got) != 0 {
			t.Errorf("settlements %+v, want none: nothing ran", got)
		}
		if got := h.sessions(); len(got) != 0 {
			t.Errorf("observers told of sessions %+v, want none: no begin was confirmed", got)
		}
	})
}

// A session whose process does not start was a settlement of its row,
// then a return of its claims: two commits, and a daemon killed between
// them left the session closed and the task its begin started
// IN_PROGRESS, which the next start took back as a crash's, a retry for a
// session that never ran. Its row is closed in the step that returns its
// claims (Release, with the session's end), and no commit leaves one
// without the other.
func TestFailedStartIsClosedWithItsClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Thresholds = agent.Thresholds{MaxConsecutiveErrors: 2, MaxTotalErrors: 20} })
		h.pr.task, h.pr.newTask = 7, true
		h.be.startErr = func(int) error { return errBoom }
		h.start()
		h.stoppedOnItsOwn()
		if got := h.pr.splits(); len(got) != 0 {
			t.Errorf("commits that left a session closed with its task held: %v", got)
		}
		if open := h.pr.open(); len(open) != 0 {
			t.Errorf("rows left open %v", open)
		}
		got := h.pr.unstarted()
		if len(got) != 2 {
			t.Fatalf("releases %+v, want one per failed start", got)
		}
		for _, u := range got {
			if u.Started != 7 || u.Ended == nil || u.Ended.SessionID != u.SessionID || !strings.HasPrefix(u.Ended.Result.Reason, "never started: ") ||
				!strings.Contains(u.Ended.Result.Reason, errBoom.Error()) {
				t.Errorf("release %+v, want task 7 and the session's end: it never started, boom", u)
			}
		}
		if got := h.pr.settlements(); len(got) != 0 {
			t.Errorf("%d settlements of their own, want none: the rows are closed by the releases", len(got))
		}
		// Each row is a session that ended, as an error, for the observers
		// (the metrics) too: once each, as the rows are.
		ended := h.sessions()
		if len(ended) != len(got) {
			t.Fatalf("observers told of %d sessions, want the %d rows", len(ended), len(got))
		}
		for i, s := range ended {
			if s.SessionID != got[i].SessionID || s.OutcomeLabel() != OutcomeError {
				t.Errorf("observers told of %s as %s, want %s as %s", s.SessionID, s.OutcomeLabel(), got[i].SessionID, OutcomeError)
			}
		}
	})
}
