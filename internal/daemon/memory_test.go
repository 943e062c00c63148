package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/swarmd/swarmd/internal/runner"
)

// The trim waits for a quiet second after the last transition, and runs once.
func TestTrimWhenSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &Daemon{}
		var trims atomic.Int32 // the race detector does not count synctest.Wait as an edge
		s := d.trimWhenSettled(time.Second, func(context.Context) { trims.Add(1) })
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		for range 5 { // a ramp: a transition every 600 ms
			time.Sleep(600 * time.Millisecond)
			d.run.ramp.OnTransition(runner.Transition{})
			synctest.Wait()
			if trims.Load() != 0 {
				t.Fatal("trimmed during the ramp")
			}
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := trims.Load(); n != 1 {
			t.Fatalf("%d trims a second after the last transition, want 1", n)
		}
		d.run.ramp.OnTransition(runner.Transition{})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := trims.Load(); n != 1 {
			t.Fatalf("%d trims, want 1: the trim runs once", n)
		}
	})
}

// Stopping before the start settled ends the goroutine without a trim.
func TestTrimWhenSettledStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &Daemon{}
		s := d.trimWhenSettled(time.Second, func(context.Context) { t.Error("trimmed after stop") })
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		s.Stop()
		time.Sleep(time.Second)
	})
}

// Dropping the executable's pages lowers the resident file pages, and the
// process runs on (the pages come back from the page cache).
func TestDropExecutablePages(t *testing.T) {
	before := rssFileKiB(t)
	n, err := dropExecutablePages()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	if n <= 0 || after >= before {
		t.Fatalf("dropped %d KiB; RssFile %d -> %d KiB", n, before, after)
	}
	if _, err := dropExecutablePages(); err != nil { // again, on the pages that came back
		t.Fatal(err)
	}
}

func rssFileKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.Fields(v)[0])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

func TestSmapsParsing(t *testing.T) {
	exe := "/usr/bin/swarmd"
	cases := []struct {
		line   string
		header bool
		ok     bool
	}{
		{"00400000-01179000 r-xp 00000000 fd:01 123 /usr/bin/swarmd", true, true},
		{"01179000-01fa5000 r--p 00d79000 fd:01 123 /usr/bin/swarmd", true, true},
		{"01fa5000-020d9000 rw-p 01ba5000 fd:01 123 /usr/bin/swarmd", true, false},
		{"7f30279a7000-7f3027afd000 r-xp 00028000 fd:01 9 /usr/lib/x86_64-linux-gnu/libc.so.6", true, false},
		{"25cb05400000-25cb07000000 rw-p 00000000 00:00 0", true, false},
		{"Rss:                 868 kB", false, false},
		{"VmFlags: rd ex mr mw me sd", false, false},
	}
	for _, c := range cases {
		m, header := smapsHeader([]byte(c.line), exe)
		if header != c.header || m.ok != c.ok {
			t.Errorf("%q: header %v ok %v, want %v %v", c.line, header, m.ok, c.header, c.ok)
		}
	}
	if m, _ := smapsHeader([]byte(cases[0].line), exe); m.lo != 0x400000 || m.hi != 0x1179000 {
		t.Errorf("range %#x-%#x", m.lo, m.hi)
	}
	if v, ok := smapsKiB([]byte("Rss:                 868 kB"), "Rss:"); !ok || v != 868 {
		t.Errorf("Rss = %d, %v", v, ok)
	}
	if _, ok := smapsKiB([]byte("Anonymous:             0 kB"), "Rss:"); ok {
		t.Error("Anonymous read as Rss")
	}
}

// TestArchiveDirsPreparedOnceSettled: once the start has settled every
// agent's log archive directory exists, so that the stop does not make
// them all at once.
func TestArchiveDirsPreparedOnceSettled(t *testing.T) {
	r := start(t, repo(t, agentsYAML("alice", "bob")))
	r.waitRunning(t, "alice", "bob")
	for _, name := range []string{"alice", "bob"} {
		waitFor(t, name+"'s archive directory", func() bool {
			fi, err := os.Stat(r.kit.logs.ArchiveDir(name))
			return err == nil && fi.IsDir()
		})
	}
}

// TestNextStartArchivesPreviousRunsLogs: a daemon's stop leaves its agents'
// logs live (swarmd logs reads them there); the next start archives them
// once it has settled, and leaves the session it runs now alone.
func TestNextStartArchivesPreviousRunsLogs(t *testing.T) {
	cfg := repo(t, agentsYAML("alice"))
	r := start(t, cfg)
	r.waitRunning(t, "alice")
	store := r.kit.logs
	r.stop(t)
	if archives, _ := filepath.Glob(filepath.Join(store.ArchiveDir("alice"), "*.tar.gz")); len(archives) != 0 {
		t.Fatalf("archives after the stop: %v, want none", archives)
	}
	if refs, err := store.Sessions("alice"); err != nil || len(refs) != 1 || !refs[0].Live {
		t.Fatalf("sessions after the stop = %+v, %v; want session 1, live", refs, err)
	}

	r = start(t, cfg)
	r.waitRunning(t, "alice")
	waitFor(t, "session 1 archived", func() bool {
		refs, err := r.kit.logs.Sessions("alice")
		return err == nil && len(refs) == 2 && !refs[0].Live && refs[0].Seq == 1
	})
	refs, _ := r.kit.logs.Sessions("alice")
	if !refs[1].Live || refs[1].Seq != 2 {
		t.Errorf("session %d live %v, want the running session 2 left live", refs[1].Seq, refs[1].Live)
	}
	if _, err := os.Stat(r.kit.logs.PromptPath("alice", 2)); err != nil {
		t.Errorf("the running session's prompt: %v", err)
	}
	if _, err := os.Stat(r.kit.logs.PromptPath("alice", 1)); !os.IsNotExist(err) {
		t.Errorf("session 1's prompt not archived: %v", err)
	}
}
