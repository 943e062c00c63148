package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestForgetRefusesTheRunningDaemon: on a store of its own a daemon holds
// no leases, which is how 'daemons forget' tells a running daemon on a
// shared store; it asks the config's control socket instead, and refuses
// to forget the daemon that answers there. Once it has stopped, forget
// takes it off the list.
func TestForgetRefusesTheRunningDaemon(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
backends:
  sleeper:
    type: scripted
    steps: [{print: [working], sleep: 1h}]
agents:
  - {name: alice, role: x, backend: sleeper}
`)
	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	var ds []struct {
		Daemon string `json:"daemon"`
	}
	out, stderr, code := runCLI(t, nil, "", "daemons", "--json", "-c", cfg)
	if code != 0 || json.Unmarshal([]byte(out), &ds) != nil || len(ds) != 1 {
		t.Fatalf("daemons --json: exit %d %q %q", code, out, stderr)
	}
	name := ds[0].Daemon
	_, stderr, code = runCLI(t, nil, "", "daemons", "forget", name, "-c", cfg)
	if code != 2 || !strings.Contains(stderr, "daemons forget: daemon "+name+" runs") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("forget the running daemon: exit %d %q; want exit 2, one line saying it runs", code, stderr)
	}
	if out, _, _ := runCLI(t, nil, "", "daemons", "-c", cfg); !strings.Contains(out, name) {
		t.Fatalf("the running daemon left the list after a refused forget:\n%s", out)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(10 * time.Second)
	if out, stderr, code := runCLI(t, nil, "", "daemons", "forget", name, "-c", cfg); code != 0 || !strings.Contains(out, "forgot daemon "+name) {
		t.Fatalf("forget the stopped daemon: exit %d %q %q", code, out, stderr)
	}
}
