package runner

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/swarmd/swarmd/internal/backend"
)

// A backend that exits 0 at once is started once per min_session_interval,
// not as fast as the machine allows, and status calls it a hot loop.
func TestRealMinSessionIntervalBoundsRespawns(t *testing.T) {
	sup := newSupervisor(t)
	be, err := backend.NewCommand(sup, backend.CommandConfig{Command: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	h := realHarness(t, be, func(c *Config) { c.MinSessionInterval = 200 * time.Millisecond })
	h.start()
	h.waitReal("a first session", func(Snapshot) bool { return len(sessionIDs(h)) >= 1 })
	time.Sleep(time.Second) // the window in which starts are counted
	n := len(sessionIDs(h))
	if n > 1+1000/200+1 {
		t.Errorf("%d sessions started in 1s with min_session_interval 200ms", n)
	}
	h.waitReal("hot loop", func(s Snapshot) bool { return s.HotLoop })
	h.stop()
}

// The interval is one timer from the last spawn: exact under fake time, a
// stop ends the wait at once, and a session that runs for a while ends the
// hot loop.
func TestMinSessionIntervalPacesAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.MinSessionInterval = time.Second })
		h.be.plan = func(n int, s *fakeSession) {
			if n < 11 {
				s.finish(success()) // at once
				return
			}
			start := time.Now()
			time.AfterFunc(2*time.Second, func() {
				s.finish(backend.Result{Outcome: backend.OutcomeSuccess, Started: start, Ended: time.Now()})
			})
		}
		h.start()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := h.be.starts(); got != 11 {
			t.Errorf("%d sessions in 10s with min_session_interval 1s, want 11 (t=0..10)", got)
		}
		if !h.r.Snapshot().HotLoop {
			t.Error("no hot loop after 11 sessions that ended at once")
		}
		time.Sleep(3 * time.Second) // session 12 ran for 2s
		synctest.Wait()
		if s := h.r.Snapshot(); s.HotLoop {
			t.Error("still a hot loop after a 2s session")
		}
		h.be.plan = func(n int, s *fakeSession) { s.finish(success()) }
		h.waitFor("waiting for the interval", func(Snapshot) bool { return h.be.starts() == 13 })
		synctest.Wait()
		start := time.Now()
		h.stop()
		if took := time.Since(start); took != 0 {
			t.Errorf("stop waited %v for the interval", took)
		}
	})
}

// The wait before a session is the longer of min_session_interval since
// the last spawn and the provider's reset; a backoff lasts until the reset.
func TestPacingWait(t *testing.T) {
	now := time.Unix(1000, 0)
	var p pacing
	if d, rl := p.wait(now, time.Second); d != 0 || rl {
		t.Fatalf("first session waits %v (rate limited %v)", d, rl)
	}
	p.lastSpawn = now.Add(-300 * time.Millisecond)
	if d, rl := p.wait(now, time.Second); d != 700*time.Millisecond || rl {
		t.Errorf("wait %v (rate limited %v), want 700ms", d, rl)
	}
	if d, _ := p.wait(now, 0); d > 0 {
		t.Errorf("no interval: wait %v", d)
	}
	p.retryAfter = now.Add(5 * time.Second)
	if d, rl := p.wait(now, time.Second); d != 5*time.Second || !rl {
		t.Errorf("rate limited: wait %v (rate limited %v), want 5s", d, rl)
	}
	p.retryAfter = now.Add(100 * time.Millisecond)
	if d, rl := p.wait(now, time.Second); d != 700*time.Millisecond || rl {
		t.Errorf("a reset before the interval: wait %v (rate limited %v), want 700ms", d, rl)
	}
	p.retryAfter = now.Add(5 * time.Second)
	if end, later := p.coolUntil(now.Add(time.Second)); !end.Equal(p.retryAfter) || !later {
		t.Errorf("backoff before the reset ends %v (%v)", end, later)
	}
	if end, later := p.coolUntil(now.Add(10 * time.Second)); !end.Equal(now.Add(10*time.Second)) || later {
		t.Errorf("backoff after the reset ends %v (%v)", end, later)
	}
}

// Three sessions in a row that end within a second make a hot loop, told
// once; a longer one ends it. setDiskFull returns what it was.
func TestPacingHotLoop(t *testing.T) {
	var p pacing
	for i, want := range []bool{false, false, true, false} {
		if got := p.ended(10 * time.Millisecond); got != want {
			t.Errorf("quick session %d: hot loop now %v, want %v", i+1, got, want)
		}
	}
	if !p.hot() {
		t.Fatal("no hot loop after 4 quick sessions")
	}
	if p.ended(2*time.Second) || p.hot() {
		t.Fatal("a 2s session left the hot loop")
	}
	if was := p.setDiskFull("disk full"); was != "" {
		t.Errorf("was %q", was)
	}
	if was := p.setDiskFull(""); was != "disk full" {
		t.Errorf("was %q, want disk full", was)
	}
}
