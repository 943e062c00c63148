package proc

import (
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Trees whose ends ask for a walk while one is under way get one walk
// between them, not one each: a daemon's stop ends hundreds at once.
func TestEndingTreesShareAWalk(t *testing.T) {
	s := newSupervisor(t)
	const n = 6
	s.mu.Lock() // a walk under way: every request waits behind it
	before := s.walks.Load()
	var wg sync.WaitGroup
	answers := make([]walkAgain, n)
	for i := range n {
		// Trees whose leaders are long gone: nothing of them is left.
		tr := &Tree{id: "shared" + strconv.Itoa(i), pid: 1 << 30}
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s.walkFor(tr, newKillState(), false)
		}()
	}
	waitFor(t, "every end to ask for a walk", func() bool {
		s.pendMu.Lock()
		defer s.pendMu.Unlock()
		return len(s.pending) == n
	})
	s.mu.Unlock()
	wg.Wait()
	if got := s.walks.Load() - before; got != 1 {
		t.Errorf("walks = %d for %d ends asking together, want 1", got, n)
	}
	for i, a := range answers {
		if a.total() != 0 {
			t.Errorf("end %d: walk again for %+v, want nothing left", i, a)
		}
	}
}

// A killed process's exit ends the wait for it at once, whatever the
// backoff's time: the daemon's timer slack made short sleeps 5 ms long.
func TestWaitForKilledEndsAtItsExit(t *testing.T) {
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	pid := cmd.Process.Pid
	st, _, err := readStat(pid, nil)
	if err != nil {
		t.Fatalf("read stat of %d: %v", pid, err)
	}
	b := &backoff{d: time.Hour}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.waitExit(map[int]uint64{pid: st.start})
	}()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("the wait outlived the killed process by %s", waitLimit)
	}
	_ = cmd.Wait()
	b.waitExit(map[int]uint64{pid: st.start}) // reaped: gone, no wait
}
