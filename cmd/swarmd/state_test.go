package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/daemon"
)

// TestDeletedDatabaseStopsTheDaemonsWork: swarm.db deleted under a running
// daemon is noticed within seconds and said loudly (log, /readyz, status);
// no session starts afterwards and nothing recreates or writes the file.
func TestDeletedDatabaseStopsTheDaemonsWork(t *testing.T) {
	repo := gitRepo(t)
	addr := freePort(t)
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: %q
defaults:
  grace_period: 1s
backends:
  quick:
    type: scripted
    steps: [{print: [working], sleep: 300ms}]
agents:
  - {name: alice, role: x, backend: quick}
  - {name: bob, role: x, backend: quick}
`, addr))
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := readyz(); code != 200 {
		t.Fatalf("/readyz before = %d %s", code, body)
	}
	db := filepath.Join(stateDir, "swarm.db")
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	deleted := time.Now()
	d.waitLine("unhealthy log line", func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "DAEMON UNHEALTHY") && strings.Contains(fmt.Sprint(m["fault"]), "deleted")
	})
	if took := time.Since(deleted); took > 2*daemon.HealthInterval {
		t.Errorf("noticed after %v", took)
	}
	if code, body := readyz(); code != 503 || !strings.Contains(body, "deleted") {
		t.Errorf("/readyz after = %d %q", code, body)
	}
	out, _, _ := runCLI(t, nil, "", "status", "-c", cfg)
	if !strings.Contains(out, "DAEMON UNHEALTHY") {
		t.Errorf("status does not say so:\n%s", out)
	}
	// Both agents stop at their next prompt instead of starting sessions.
	for _, a := range []string{"alice", "bob"} {
		m := d.waitLine(a+" Stopped", transitionTo(a, "Stopped"))
		if !strings.Contains(fmt.Sprint(m["reason"]), "deleted") {
			t.Errorf("%s stopped for %q", a, m["reason"])
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("swarm.db is back at its path (%v): something wrote a new file", err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(20 * time.Second)
	waitNoTreeProcesses(t, stateDir, 2*time.Second)
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("swarm.db recreated at shutdown (%v)", err)
	}
	if fi, err := os.Stat(stateDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
}
