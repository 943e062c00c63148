package proc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	b := &backoff{d: time.Hour}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.waitExit(pid)
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
}

// A process in one tree's group that carries another tree's marker belongs
// to both: when the two ends share a walk, each kills it and waits for it,
// as its own walk would have. Counted for the group's tree alone, the
// other tree could end while the process (and what it started in a
// session of its own) lives on.
func TestSharedWalkGivesAProcessToEveryTreeItBelongsTo(t *testing.T) {
	s := newSupervisor(t)
	// A walk reads /proc's lists of children, which may miss a child while
	// others come and go (a loaded machine): a walk that saw the process at
	// all is what is checked, so one that missed it is made again.
	for attempt := 1; ; attempt++ {
		pid, ka, kb := walkAProcessOfTwoTrees(t, s, attempt)
		_, a := ka.killed[pid]
		_, b := kb.killed[pid]
		if !a && !b && attempt < 5 {
			t.Logf("attempt %d: the walk did not list pid %d; again", attempt, pid)
			continue
		}
		if !a {
			t.Errorf("the marker's tree does not wait for pid %d (killed: %v)", pid, ka.killed)
		}
		if !b {
			t.Errorf("the group's tree does not wait for pid %d (killed: %v)", pid, kb.killed)
		}
		return
	}
}

// walkAProcessOfTwoTrees starts a process in one tree's group with the
// other tree's marker, and walks for both trees' ends in one walk.
func walkAProcessOfTwoTrees(t *testing.T, s *Supervisor, n int) (pid int, ka, kb *killState) {
	t.Helper()
	group := exec.Command("sleep", "3600")
	group.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := group.Start(); err != nil {
		t.Fatalf("start the group's leader: %v", err)
	}
	t.Cleanup(func() { _ = group.Process.Kill(); _ = group.Wait() })
	a := &Tree{id: "marked" + strconv.Itoa(n), pid: 1 << 30}
	b := &Tree{id: "grouped" + strconv.Itoa(n), pid: group.Process.Pid}
	p := exec.Command("sleep", "3600")
	p.Env = withMarker(os.Environ(), marker{owner: s.owner, instance: s.instance, id: a.id})
	p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: b.pid}
	if err := p.Start(); err != nil {
		t.Fatalf("start the process in b's group with a's marker: %v", err)
	}
	t.Cleanup(func() { _ = p.Process.Kill(); _ = p.Wait() })
	waitFor(t, "its marker to be readable", func() bool { return markerOf(p.Process.Pid) != "" })

	ka, kb = newKillState(), newKillState()
	s.mu.Lock() // both ends wait for the same walk
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.walkFor(a, ka, true) }() // every thread's children: exec.Command forks from any
	go func() { defer wg.Done(); s.walkFor(b, kb, true) }()
	waitFor(t, "both ends to ask for a walk", func() bool {
		s.pendMu.Lock()
		defer s.pendMu.Unlock()
		return len(s.pending) == 2
	})
	s.mu.Unlock()
	wg.Wait()
	return p.Process.Pid, ka, kb
}

// A process whose main thread has exited while its other threads run on
// reads as a zombie, and its environ cannot be read through its main
// thread; it is alive, and its marker names its tree. The tree's end kills
// it, though it left the tree's group and session.
func TestTreeEndKillsAProcessWhoseMainThreadExited(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := newSupervisor(t)
	out := newLineSink()
	tr := startSh(t, s, "mainthread", mainThreadExitsEnv+"=1 "+shellQuote(self)+" & exec sleep 3600", out)
	pid, err := strconv.Atoi(strings.TrimSpace(out.next(t)))
	if err != nil {
		t.Fatalf("its pid: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	waitFor(t, "its main thread to exit with others alive", func() bool {
		st, _, err := readStat(pid, nil)
		return err == nil && st.state == 'Z' && st.threads > 1
	})
	if m := markerOf(pid); !strings.HasSuffix(m, markerSep+tr.id) {
		t.Fatalf("marker of pid %d = %q, want one for tree %s (read through its other threads)", pid, m, tr.id)
	}
	if err := tr.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	waitDone(t, tr)
	if st, _, err := readStat(pid, nil); err == nil {
		t.Errorf("pid %d outlived its tree (state %c, %d threads)", pid, st.state, st.threads)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// A process of a tree whose end is under way, killed by another walk (the
// reaper's, on a SIGCHLD), is the ending tree's to wait for: its end learns
// the process's session, and kills what in it cleared its marker.
func TestReaperGivesWhatItKillsToTheEndingTree(t *testing.T) {
	s := newSupervisor(t)
	tr := &Tree{id: "ending", pid: 1 << 30, kill: newKillState()}
	tr.exited.Store(true)
	p := exec.Command("sleep", "3600")
	p.Env = withMarker(os.Environ(), marker{owner: s.owner, instance: s.instance, id: tr.id})
	p.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := p.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = p.Process.Kill(); _ = p.Wait() })
	waitFor(t, "its marker to be readable", func() bool { return markerOf(p.Process.Pid) != "" })
	s.mu.Lock()
	s.trees[tr.id] = tr
	s.scanLocked(nil, true) // the reaper's walk: every thread's children
	delete(s.trees, tr.id)
	k := tr.kill
	s.mu.Unlock()
	if _, ok := k.killed[p.Process.Pid]; !ok {
		t.Errorf("the ending tree does not wait for pid %d, which the reaper killed", p.Process.Pid)
	}
	if !k.sessions[p.Process.Pid] { // a session leader: its sid is its pid
		t.Errorf("the ending tree did not learn session %d", p.Process.Pid)
	}
	waitFor(t, "the killed process to die", func() bool {
		st, _, err := readStat(p.Process.Pid, nil)
		return err != nil || st.dead() // reaped by the reaper, or a zombie for Wait
	})
}
