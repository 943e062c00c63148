package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// storeWaitLine is the one line a start logs when it begins to wait for
// the store.
func storeWaitLine(m map[string]any) bool {
	return strings.HasPrefix(fmt.Sprint(m["msg"]), "the store is unreachable or busy: the start waits for it")
}

// TestRunWaitsForTheStoreAtStart: `swarmd run` started while its
// PostgreSQL server is down does not exit: it says once that it waits for
// the store, tells systemd (a status, and more time to start), and a stop
// signal meanwhile ends it at once with status 0. Started again while the
// server is still down, it runs its agent by itself once the server is
// started, then says it is ready.
func TestRunWaitsForTheStoreAtStart(t *testing.T) {
	srv := pgtest.Require(t)
	if err := srv.CreateDB("startwait"); err != nil {
		t.Fatal(err)
	}
	url := srv.URL("startwait")
	out := t.TempDir()
	cfg := fenceConfig(t, fenceCfg{Store: url, Lease: "3s", Out: out, Who: "a", Script: sleeperScript})
	if err := srv.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	down := true
	defer func() {
		if down {
			_ = srv.Serve() // for its Close
		}
	}()

	// Stopped while it waits: at once, status 0, nothing run.
	d := startDaemon(t, cfg)
	m := d.waitLine("the start waiting for the store", storeWaitLine)
	if m["step"] != "open" || m["store"] != store.Redact(url) || !strings.Contains(fmt.Sprint(m["error"]), "connect") {
		t.Errorf("the wait's line = %v, want it to name the step, the store and why", m)
	}
	stopped := time.Now()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("stopped while waiting for the store: exit %d, want 0; log:\n%s", code, d.log())
	}
	if took := time.Since(stopped); took > 5*time.Second {
		t.Errorf("the stop took %s while the start waited for the store, want at once", took.Round(time.Millisecond))
	}
	if _, err := os.Stat(filepath.Join(out, "a")); err == nil {
		t.Fatal("a session ran, the store down")
	}

	// Left to wait: it goes on by itself when the server is back.
	notifyPath := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	notes := make(chan string, 64)
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			select {
			case notes <- string(buf[:n]):
			default: // the test reads what it needs; the rest is dropped
			}
		}
	}()
	defer func() { conn.Close(); <-read }()
	waitNote := func(want string) string {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case n := <-notes:
				if strings.Contains(n, want) {
					return n
				}
			case <-deadline:
				t.Fatalf("no %q notification", want)
			}
		}
	}
	d = startDaemonEnv(t, []string{"NOTIFY_SOCKET=" + notifyPath}, cfg)
	d.waitNext("the start waiting for the store", storeWaitLine)
	n := waitNote("EXTEND_TIMEOUT_USEC=")
	if !strings.Contains(n, "STATUS=waiting for the store to open: ") || !strings.Contains(n, "EXTEND_TIMEOUT_USEC=180000000") {
		t.Errorf("notification while waiting = %q, want a status saying why and three more minutes", n)
	}
	// Tried again, and still waiting (waitNext fails if it exited).
	d.waitNext("another try at the store", func(m map[string]any) bool { return m["msg"] == "the store still does not answer" })
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	down = false
	d.waitNext("the start going on", func(m map[string]any) bool { return m["msg"] == "the store answers: the start goes on" })
	waitNote("READY=1")
	waitUntil(t, "x's session", func() bool {
		b, err := os.ReadFile(filepath.Join(out, "a"))
		return err == nil && strings.Count(string(b), "started") == 1
	})
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after the stop, want 0; log:\n%s", code, d.log())
	}
}

// TestRunFailsAtOnceOnAStoreThatRefuses: a store that refuses the daemon
// for good (here no such database) is not waited for: `swarmd run` exits
// at once with status 1 and one line naming the store and what is wrong.
func TestRunFailsAtOnceOnAStoreThatRefuses(t *testing.T) {
	srv := pgtest.Require(t)
	url := srv.URL("nosuchdb")
	cfg := fenceConfig(t, fenceCfg{Store: url, Lease: "3s", Out: t.TempDir(), Who: "a", Script: sleeperScript})
	began := time.Now()
	d := startDaemon(t, cfg)
	if code := d.wait(15 * time.Second); code != 1 {
		t.Fatalf("exit %d, want 1; log:\n%s", code, d.log())
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("it took %s to fail, want at once", took.Round(time.Millisecond))
	}
	log := strings.TrimSpace(d.log())
	last := log[strings.LastIndexByte(log, '\n')+1:]
	if !strings.HasPrefix(last, "swarmd: start: store: open "+store.Redact(url)+": ") || !strings.Contains(last, `database "nosuchdb" does not exist`) {
		t.Errorf("last line = %q, want the one-line error naming the store and what is wrong", last)
	}
	if strings.Contains(log, "the start waits for it") {
		t.Errorf("the start waited on a store that refuses:\n%s", log)
	}
}
