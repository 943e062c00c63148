package proc

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// markedProcs lists the live (not zombie) processes that carry tree id's
// marker, found by a scan of all of /proc: independent of the walk under test.
func markedProcs(t testing.TB, id string) map[int]procStat {
	t.Helper()
	pids, err := allPids()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int]procStat)
	for _, pid := range pids {
		m := markerOf(pid)
		if !strings.HasSuffix(m, markerSep+id) {
			continue
		}
		st, _, err := readStat(pid, nil)
		if err != nil || st.dead() {
			continue
		}
		out[pid] = st
	}
	return out
}

func readCounter(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The loop rewrites the file: an empty read is a write in progress.
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds no number within %s: %q", path, waitLimit, b)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFreezeStopsWholeTree freezes a tree whose leader writes a counter
// every 100 ms and which has processes in sessions of their own and an
// orphan reparented to the daemon: every one of them stops, the counter
// stops, and after Thaw the same leader counts on.
func TestFreezeStopsWholeTree(t *testing.T) {
	s := newSupervisor(t)
	counter := filepath.Join(t.TempDir(), "counter")
	out := newLineSink()
	script := escapeScript +
		// An orphan: its parent exits at once, so it is reparented to us.
		`sh -c 'setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $!' ` + "\n" +
		`i=0; while :; do i=$((i+1)); echo $i >` + counter + `.tmp; mv ` + counter + `.tmp ` + counter + `; sleep 0.1; done`
	tr := startSh(t, s, "freeze", script, out)
	ps := []process{newSession(t, out.next(t)), newSession(t, out.next(t)), newSession(t, out.next(t))}
	// The three print in any order; one of them has lost its parent.
	waitFor(t, "the orphan to be reparented to us", func() bool {
		for _, p := range ps {
			if ppid, err := parentOf(p.pid); err == nil && ppid == os.Getpid() {
				return true
			}
		}
		return false
	})
	waitFor(t, "the counter to reach 2", func() bool {
		_, err := os.Stat(counter)
		return err == nil && readCounter(t, counter) >= 2
	})

	n, err := tr.Freeze()
	if err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	marked := markedProcs(t, "freeze")
	if n < len(marked) || len(marked) < 5 {
		t.Fatalf("Freeze stopped %d processes; %d carry the marker", n, len(marked))
	}
	// Stopped, or in an uninterruptible sleep with the SIGSTOP pending: it
	// stops as it leaves the sleep, running no code of its own first (what
	// Freeze waits for).
	stopped := func(pid int, st procStat) bool { return st.state == 'T' || st.state == 'D' && stopPending(pid) }
	for pid, st := range marked {
		if !stopped(pid, st) {
			t.Errorf("pid %d is in state %c while the tree is frozen, want T", pid, st.state)
		}
	}
	for _, p := range ps {
		if st := p.stat(t); !stopped(p.pid, st) {
			t.Errorf("escaped pid %d is in state %c, want T", p.pid, st.state)
		}
	}
	frozen := readCounter(t, counter)
	// Three counting periods with no change: the leader is stopped.
	time.Sleep(350 * time.Millisecond)
	if got := readCounter(t, counter); got != frozen {
		t.Fatalf("the counter moved from %d to %d while the tree was frozen", frozen, got)
	}

	if n, err := tr.Thaw(); err != nil || n < len(marked) {
		t.Fatalf("Thaw = %d, %v; want at least %d", n, err, len(marked))
	}
	waitFor(t, "the counter to move on after Thaw", func() bool { return readCounter(t, counter) > frozen })
	for pid := range markedProcs(t, "freeze") {
		if st, _, err := readStat(pid, nil); err == nil && st.state == 'T' {
			t.Errorf("pid %d is still stopped after Thaw", pid)
		}
	}
	select {
	case <-tr.Done():
		t.Fatal("the tree ended: Thaw must continue the same leader")
	default:
	}
}

// TestFreezeCatchesForks freezes a tree that forks all the time: no process
// of it, including those forked while the walk ran, is left running.
func TestFreezeCatchesForks(t *testing.T) {
	s := newSupervisor(t)
	// Children live long enough (0.3 s) that a scan of /proc on a loaded
	// machine still finds several at once; a new one is forked every 10 ms.
	tr := startSh(t, s, "forks", `while :; do sh -c 'sleep 0.3' & sleep 0.01; done`, nil)
	waitFor(t, "several processes", func() bool { return len(markedProcs(t, "forks")) >= 4 })
	for range 5 {
		if _, err := tr.Freeze(); err != nil {
			t.Fatalf("Freeze: %v", err)
		}
		for pid, st := range markedProcs(t, "forks") {
			// A vfork parent waits in D for its frozen child, SIGSTOP pending.
			if st.state != 'T' && (st.state != 'D' || !stopPending(pid)) {
				t.Fatalf("pid %d is in state %c while the tree is frozen, want T", pid, st.state)
			}
		}
		if _, err := tr.Thaw(); err != nil {
			t.Fatalf("Thaw: %v", err)
		}
	}
}

func TestFreezeAfterEnd(t *testing.T) {
	s := newSupervisor(t)
	tr := startSh(t, s, "ended", "exit 0", nil)
	waitDone(t, tr)
	if _, err := tr.Freeze(); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Freeze after the end = %v, want ErrProcessDone", err)
	}
	if _, err := tr.Thaw(); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Thaw after the end = %v, want ErrProcessDone", err)
	}
}

// TestKillFrozenTree: a frozen tree still ends on Kill (SIGKILL needs no
// thaw), and nothing of it is left.
func TestKillFrozenTree(t *testing.T) {
	s := newSupervisor(t)
	tr, _, ps := startEscapers(t, s, "killfrozen", "exec sleep 3600")
	if _, err := tr.Freeze(); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if err := tr.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	waitDone(t, tr)
	assertGone(t, ps)
}

func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	return strconv.Atoi(f[1])
}

// BenchmarkFreeze50 is `pause --now` at the process level: a 50-process
// tree (the leader and 49 children) from Freeze until every process is
// stopped, then Thaw. It reports the p50 and p99 of Freeze.
func BenchmarkFreeze50(b *testing.B) {
	s, err := NewSupervisor(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tr, err := s.Start(Spec{Path: "/bin/sh", Args: []string{"-c", `for i in $(seq 49); do sleep 3600 & done; wait`},
		Env: os.Environ(), ID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tr.Kill(); <-tr.Done() }()
	deadline := time.Now().Add(10 * time.Second)
	for len(markedProcs(b, "bench")) < 50 {
		if time.Now().After(deadline) {
			b.Fatalf("tree has %d processes, want 50", len(markedProcs(b, "bench")))
		}
		time.Sleep(5 * time.Millisecond)
	}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		n, err := tr.Freeze()
		d := time.Since(t0)
		if err != nil || n != 50 {
			b.Fatalf("Freeze = %d, %v; want 50", n, err)
		}
		ds = append(ds, d)
		if _, err := tr.Thaw(); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-µs")
}
