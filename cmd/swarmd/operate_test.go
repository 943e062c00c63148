package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOperatorCommandsAgainstRealDaemon(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  backend: worker
  grace_period: 1s
backends:
  worker:
    type: scripted
    steps: [{print: [busy], sleep: 1h}]
  broken:               # fails every session: exit status 1
    type: command
    command: "false"
agents:
  - {name: alice, role: works}
  - {name: bob, role: broken, backend: broken, max_consecutive_errors: 1}
`)
	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	d.waitLine("bob Stopped", transitionTo("bob", "Stopped"))

	sock := filepath.Join(repo, ".swarm", "swarmd.sock")
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("control socket %v mode %v", err, fi.Mode())
	}

	out, stderr, code := runCLI(t, nil, "", "status", "-c", cfg)
	if code != 0 {
		t.Fatalf("status: %d %s", code, stderr)
	}
	for _, want := range []string{"AGENT", "alice", "Running", "swarm/alice/work", "bob", "Stopped", "1 consecutive errors (max 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = runCLI(t, nil, "", "status", "--json", "-c", cfg)
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("status --json: %v %s", err, out)
	}

	if _, stderr, code := runCLI(t, nil, "", "stop", "dave", "-c", cfg); code != 2 || !strings.Contains(stderr, "dave") {
		t.Errorf("stop unknown: %d %q", code, stderr)
	}
	if _, stderr, code := runCLI(t, nil, "", "start", "alice", "-c", cfg); code != 2 || !strings.Contains(stderr, "not Stopped") {
		t.Errorf("start running agent: %d %q", code, stderr)
	}
	if _, stderr, code := runCLI(t, nil, "", "stop", "alice", "-c", cfg); code != 0 {
		t.Fatalf("stop alice: %d %s", code, stderr)
	}
	d.waitLine("alice stopped by operator", func(m map[string]any) bool {
		return transitionTo("alice", "Stopped")(m) && m["actor"] == "operator"
	})
	// The daemon stays up with every agent stopped; start brings alice back.
	if _, stderr, code := runCLI(t, nil, "", "start", "alice", "-c", cfg); code != 0 {
		t.Fatalf("start alice: %d %s", code, stderr)
	}
	d.waitNext("alice Running again", transitionTo("alice", "Running"))
	d.waitNext("alice Running again", transitionTo("alice", "Running"))

	// The event log has the operator's decisions.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, code = runCLI(t, nil, "", "events", "--agent", "alice", "-c", cfg)
		if code == 0 && strings.Contains(out, "OperatorStart") && strings.Contains(out, "--OperatorStop--> Stopped [CancelSession] by operator") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Logs of the live session: its output comes a moment after it is
	// Running (in a sandbox, once bwrap has set it up).
	deadline = time.Now().Add(10 * time.Second)
	for {
		out, _, code = runCLI(t, nil, "", "logs", "alice", "-c", cfg)
		if code == 0 && strings.Contains(out, "busy") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs: %d %q", code, out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// No daemon: a clear error, exit 2.
	if _, stderr, code := runCLI(t, nil, "", "status", "-c", cfg); code != 2 || !strings.Contains(stderr, "no swarmd is running") {
		t.Errorf("status without daemon: %d %q", code, stderr)
	}
	// The logs still read with no daemon (left for the next start to
	// archive).
	out, _, code = runCLI(t, nil, "", "logs", "alice", "--session", "1", "-c", cfg)
	if code != 0 || !strings.Contains(out, "busy") {
		t.Errorf("logs after the stop: %d %q", code, out)
	}
}

// TestKill9Recovery: a daemon killed with SIGKILL in the middle of sessions
// whose backends started setsid grandchildren; the next daemon ends those
// processes before anything spawns, closes the sessions as orphaned, keeps
// pending mail pending, continues session_seq and keeps a fatal stop.
func TestKill9Recovery(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  backend: worker
backends:
  worker:
    type: scripted
    steps: [{print: [busy], setsid_child: true, sleep: 1h}]
  broken:               # fails every session: exit status 1
    type: command
    command: "false"
agents:
  - {name: alice, role: works}
  - {name: bob, role: works}
  - {name: carol, role: broken, backend: broken, max_consecutive_errors: 1}
`)
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	first := d.waitLine("alice Running", transitionTo("alice", "Running"))
	d.waitLine("bob Running", transitionTo("bob", "Running"))
	d.waitLine("carol Stopped", transitionTo("carol", "Stopped"))
	oldSession := first["session"].(string)
	// Pending mail for bob, sent while his session runs.
	if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--to", "bob", "-c", cfg, "still pending"); code != 0 {
		t.Fatalf("mail: %s", stderr)
	}
	waitTreeProcesses(t, stateDir, 4)
	time.Sleep(100 * time.Millisecond) // the journal commits in 20 ms batches: a kill loses at most one
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	d.wait(5 * time.Second)
	if len(treeProcesses(stateDir)) == 0 {
		t.Fatal("SIGKILL of the daemon ended its sessions by itself; the test proves nothing")
	}

	d2 := startDaemon(t, cfg)
	// Its trees' processes end by their cgroups, where cgroups are in
	// force, or by their markers.
	d2.waitLine("sweep", func(m map[string]any) bool {
		msg := m["msg"].(string)
		return strings.Contains(msg, "left by an earlier daemon") || strings.Contains(msg, "trees an earlier daemon left")
	})
	next := d2.waitLine("alice Running", transitionTo("alice", "Running"))
	for _, p := range treeProcesses(stateDir) {
		if strings.Contains(p, oldSession) {
			t.Errorf("process of the killed daemon's session alive: %s", p)
		}
	}
	seq, _ := strconv.Atoi(strings.Split(next["session"].(string), "-")[1])
	if seq < 2 {
		t.Errorf("alice's session after restart %s: seq did not continue", next["session"])
	}
	d2.waitLine("orphaned", func(m map[string]any) bool {
		return strings.Contains(m["msg"].(string), "orphaned") && m["session"] == oldSession
	})
	if strings.Contains(d2.log(), `"agent":"carol","from":"Initializing"`) {
		t.Error("carol, stopped by her error threshold, ran again after the restart")
	}
	// bob's mail reached his first prompt after the restart, not lost.
	d2.waitLine("bob Running", transitionTo("bob", "Running"))
	prompt, err := os.ReadFile(filepath.Join(stateDir, "logs", "bob", strconv.Itoa(seqOf(t, d2, "bob"))+".prompt.md"))
	if err != nil || !strings.Contains(string(prompt), "still pending") {
		t.Errorf("bob's prompt after restart lacks the pending mail: %v\n%s", err, prompt)
	}
	_ = d2.cmd.Process.Signal(syscall.SIGTERM)
	if code := d2.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, stateDir, time.Second)
	// The killed daemon's trees left their cgroups; the restart removed
	// them, so the clean stop leaves no cgroup of this state dir.
	if dir, ok := treesCgroupDir(d2.log()); ok {
		if !strings.Contains(d2.log(), "removed the cgroups of trees an earlier daemon left") {
			t.Error("the restart did not say it removed the killed daemon's trees' cgroups")
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the trees' cgroup directory %s after a clean stop: %v; want it gone", dir, err)
		}
	}
	// The event log tells what the recovery did.
	out, _, _ := runCLI(t, nil, "", "events", "--agent", "alice", "-c", cfg)
	if !strings.Contains(out, "--Recovery--> Initializing by daemon: session "+oldSession+" orphaned") {
		t.Errorf("events lack the recovery of %s:\n%s", oldSession, out)
	}
}

// seqOf is the seq of the agent's latest SessionStarted in the log.
func seqOf(t *testing.T, d *daemonProc, agent string) int {
	t.Helper()
	m := d.waitLine(agent+" started", func(m map[string]any) bool {
		return m["msg"] == "transition" && m["agent"] == agent && m["to"] == "Running"
	})
	n, _ := strconv.Atoi(strings.Split(m["session"].(string), "-")[1])
	return n
}
