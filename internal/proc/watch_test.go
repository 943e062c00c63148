package proc

import (
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

// watchingNow reports whether SIGCHLD is delivered to s's reaper.
func watchingNow(s *Supervisor) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watching
}

// The reaper stops asking for SIGCHLD once a whole interval found no
// orphan (a leader's exit is seen on its pidfd), asks again as soon as a
// scan finds one, and the orphan is reaped when it dies either way.
func TestReaperWatchesSIGCHLDWhileThereAreOrphans(t *testing.T) {
	s, err := startSupervisor(t.TempDir(), zaptest.NewLogger(t), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if !watchingNow(s) {
		t.Fatal("a new supervisor does not watch SIGCHLD")
	}
	waitDone(t, startSh(t, s, "plain", "exit 0", nil))
	waitFor(t, "the reaper to stop watching SIGCHLD after a quiet interval", func() bool { return !watchingNow(s) })

	// An escaped, unmarked process outlives its tree: the end's walk finds
	// it among our children.
	_, p := escapedTree(t, s, "escapes")
	if !watchingNow(s) {
		t.Fatal("an orphan is ours, and the reaper does not watch SIGCHLD")
	}
	if err := unix.Kill(p.pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the orphan to be reaped", p.gone)
	waitFor(t, "the reaper to stop watching again", func() bool { return !watchingNow(s) })
}

// With a cgroup, a tree's end waits for the cgroup to empty, not for a
// walk of our children; while SIGCHLD is not watched, the end reaps the
// tree's processes that were reparented to us itself: none is left a
// zombie until the safety net's next scan.
func TestCgroupTreeEndReapsWithoutSIGCHLD(t *testing.T) {
	s, _ := cgroupSupervisor(t)
	s.mu.Lock()
	s.watchLocked(false) // as after a quiet interval (5 s away here)
	s.mu.Unlock()
	// The leader exits first, so its setsid child is reparented to us,
	// and the cgroup's kill makes it a zombie.
	waitDone(t, startSh(t, s, "orphaning", `/usr/bin/setsid /usr/bin/sleep 3600 & exit 0`, nil))
	if dead := deadChildren(t); len(dead) > 0 {
		t.Errorf("zombie children after the tree's end: %v", dead)
	}
	if !watchingNow(s) {
		t.Error("the end reaped an orphan, and the reaper does not watch SIGCHLD")
	}
}
