package proc

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// newObservedSupervisor is a Supervisor whose log lines a test can read.
func newObservedSupervisor(t *testing.T) (*Supervisor, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	s, err := NewSupervisor(t.TempDir(), zap.New(core))
	if err != nil {
		t.Fatalf("NewSupervisor: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, logs
}

// The sweep names the tree a killed orphan belonged to. The marker is read
// into a buffer that the process's stat is read into next; with a small
// environment the marker sits where the stat line lands.
func TestSweepOrphansLogsTreeID(t *testing.T) {
	s, logs := newObservedSupervisor(t)
	earlier := marker{owner: s.owner, instance: "0123456789abcdef", id: "old-session"}
	orphan := spawnDetached(t, withMarker([]string{"PATH=/usr/bin:/bin"}, earlier))
	if n, err := s.SweepOrphans(); err != nil || n != 1 {
		t.Fatalf("SweepOrphans = %d, %v; want 1", n, err)
	}
	waitFor(t, "the orphan to be reaped", orphan.gone)
	entries := logs.FilterMessage("killing marked process").AllUntimed()
	if len(entries) != 1 {
		t.Fatalf("%d log lines for the killed orphan, want 1: %+v", len(entries), entries)
	}
	if got := entries[0].ContextMap()["tree"]; got != "old-session" {
		t.Fatalf("logged tree %q, want old-session", got)
	}
}

// A leftover of an ended tree is killed at every scan until it is gone, but
// logged once. The test's kill leaves it alive, so that several scans see
// it, as they do while a killed process is still exiting.
func TestLeftoverLoggedOnce(t *testing.T) {
	s, logs := newObservedSupervisor(t)
	var mu sync.Mutex
	kills := 0
	s.mu.Lock()
	s.kill = func(int, unix.Signal) error { mu.Lock(); kills++; mu.Unlock(); return nil }
	s.mu.Unlock()

	env := withMarker(os.Environ(), marker{owner: s.owner, instance: s.instance, id: "ended"})
	p := spawnDetached(t, env) // reparented to us: the reaper finds it
	// Under load the scan can come before the process is ours and running
	// sleep (setsid may fork first): wait for both, so that each scan sees it.
	waitFor(t, "the detached process reparented to us", func() bool {
		ppid, err := parentOf(p.pid)
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
		return err == nil && ppid == os.Getpid() && strings.HasPrefix(string(cmd), "sleep")
	})
	for range 3 {
		s.mu.Lock()
		s.scanLocked(nil, true)
		s.mu.Unlock()
	}
	mu.Lock()
	n := kills
	mu.Unlock()
	if n < 3 {
		t.Fatalf("%d kills in 3 scans, want one per scan", n)
	}
	pid := strconv.Itoa(p.pid)
	count := 0
	for _, e := range logs.FilterMessage("killing leftover of an ended tree").AllUntimed() {
		if strconv.FormatInt(e.ContextMap()["pid"].(int64), 10) == pid {
			count++
			if e.ContextMap()["tree"] != "ended" {
				t.Errorf("logged tree %q, want ended", e.ContextMap()["tree"])
			}
		}
	}
	if count != 1 {
		t.Fatalf("leftover %s logged %d times, want once", pid, count)
	}

	s.mu.Lock()
	s.kill = unix.Kill
	s.mu.Unlock()
	waitFor(t, "the leftover to be killed and reaped", p.gone)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, kept := s.leftovers[p.pid]; kept {
		t.Error("a reaped leftover is still remembered")
	}
}
