package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// envOf waits for an `env` dump a session or hook wrote and returns its
// variables, failing on a key that appears twice.
func envOf(t *testing.T, path string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			vars := map[string]string{}
			for _, kv := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				k, v, _ := strings.Cut(kv, "=")
				if _, dup := vars[k]; dup {
					t.Errorf("%s: %s appears twice", path, k)
				}
				vars[k] = v
			}
			return vars
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never written", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A PATH set in an agent's env or a backend's env reaches its sessions with
// swarmd's directory first; hooks get the merged environment, each key once.
// A backend that exits at once is paced by min_session_interval and shown
// as a hot loop.
func TestConfiguredPathAndHotLoop(t *testing.T) {
	repo := gitRepo(t)
	out := t.TempDir()
	dump := func(name string) string {
		return fmt.Sprintf(`env > "%s/%s.tmp"; mv "%s/%s.tmp" "%s/%s.env"`, out, name, out, name, out, name)
	}
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
sandbox: {writable: [`+out+`]}
defaults:
  grace_period: 1s
hooks:
  session_start: ['%s']
backends:
  dump:
    type: command
    command: /bin/sh
    args: [-c, '%s; sleep 3600']
  dump-path:
    type: command
    command: /bin/sh
    args: [-c, '%s; sleep 3600']
    env: {PATH: "/backend/bin:/usr/bin:/bin"}
  quick:
    type: command
    command: /bin/true
agents:
  - {name: alice, role: x, backend: dump, env: {PATH: "/agent/bin:/usr/bin:/bin"}}
  - {name: bob, role: x, backend: dump-path}
  - {name: carol, role: x, backend: quick, min_session_interval: 100ms}
`, dump("hook-$SWARM_AGENT_ID"), dump("alice"), dump("bob")))
	started := time.Now()
	d := startDaemon(t, cfg)
	self := filepath.Dir(swarmdBin)
	for file, want := range map[string]string{
		"alice":      self + ":/agent/bin:/usr/bin:/bin",
		"hook-alice": self + ":/agent/bin:/usr/bin:/bin",
		"bob":        self + ":/backend/bin:/usr/bin:/bin",
		"hook-bob":   self + ":" + os.Getenv("PATH"), // hooks do not run the backend
	} {
		if got := envOf(t, filepath.Join(out, file+".env"))["PATH"]; got != want {
			t.Errorf("%s: PATH=%s, want %s", file, got, want)
		}
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		status, _, _ := runCLI(t, nil, "", "status", "-c", cfg)
		if line := grepLines(status, "carol"); strings.Contains(line, "hot loop") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed carol's hot loop:\n%s", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
	// At most one session start per 100ms, not hundreds a second.
	elapsed := time.Since(started)
	n := 0
	d.mu.Lock()
	for _, l := range d.lines {
		if ev, _ := l["event"].(string); l["msg"] == "transition" && l["agent"] == "carol" && strings.HasPrefix(ev, "SessionStarted") {
			n++
		}
	}
	d.mu.Unlock()
	if max := int(elapsed/(100*time.Millisecond)) + 2; n == 0 || n > max {
		t.Errorf("carol started %d sessions in %v with min_session_interval 100ms", n, elapsed)
	}
}
