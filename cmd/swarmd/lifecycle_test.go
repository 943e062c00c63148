package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/cli"
)

const restoreBase = `
listen: ""
defaults:
  backend: stubborn
  grace_period: 3s
backends:
  stubborn:              # ignores the cancel: stops only at the force stop, 3s later
    type: scripted
    steps: [{print: [busy], ignore_signals: true, sleep: 1h}]
agents:
  - {name: bob, role: works}
`

// TestSIGHUPRestoresAnAgentStillStopping: a reload removes alice, whose
// session takes its whole grace period to stop; a second reload puts her
// back before it ends. She is not lost: once stopped she starts again, her
// seq continuing, and status lists her.
func TestSIGHUPRestoresAnAgentStillStopping(t *testing.T) {
	repo := gitRepo(t)
	withAlice := restoreBase + "  - {name: alice, role: works}\n"
	cfg := writeConfig(t, repo, withAlice)
	d := startDaemon(t, cfg)
	first := d.waitLine("alice Running", transitionTo("alice", "Running"))
	// The script ignores SIGTERM from its first line and then prints busy:
	// only once busy is in her log does a cancel meet a stubborn session
	// (a cancel in the session's first microseconds ends it at once).
	waitForFile(t, filepath.Join(repo, ".swarm", "logs", "alice", "1.log"), "busy")

	reloaded := func(m map[string]any) bool { return m["msg"] == "config reloaded" }
	writeConfig(t, repo, restoreBase)
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	if m := d.waitNext("alice removed", reloaded); fmt.Sprint(m["removed"]) != "[alice]" {
		t.Fatalf("first reload: %v", m)
	}
	writeConfig(t, repo, withAlice)
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitNext("alice put back", reloaded)
	// The second reload came while alice's first session was still
	// stopping (so the test shows what it claims).
	d.waitNext("alice's first session ended", func(m map[string]any) bool {
		return m["msg"] == "session ended" && m["session"] == first["session"]
	})
	next := d.waitNext("alice Running again", transitionTo("alice", "Running"))
	if !strings.HasPrefix(next["session"].(string), "alice-2-") {
		t.Errorf("alice's session after the restore is %s, want seq 2", next["session"])
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, _ := runCLI(t, nil, "", "status", "-c", cfg)
		if strings.Contains(grepLines(out, "alice"), "Running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not list alice Running:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = d.cmd.Process.Signal(syscall.SIGINT) // the stubborn sessions end at the second signal
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestSessionSeqContinuesWithoutGaps: neither `swarmd start` nor a daemon
// restart skips a seq: the next session continues from the last one that
// existed, whatever the runner's counter said when it stopped.
// twoQuickSessions: alice runs two sessions of `true`, then stops.
const twoQuickSessions = `
listen: ""
defaults:
  backend: quick
  min_session_interval: 0s
  max_sessions: 2
backends:
  quick:
    type: command
    command: "true"
agents:
  - {name: alice, role: works}
`

// stoppedAtMaxSessions matches agent's move to Stopped at max_sessions.
func stoppedAtMaxSessions(agent string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		return transitionTo(agent, "Stopped")(m) && strings.HasPrefix(fmt.Sprint(m["reason"]), "max_sessions")
	}
}

func TestSessionSeqContinuesWithoutGaps(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, twoQuickSessions)
	stopped := stoppedAtMaxSessions("alice")
	d := startDaemon(t, cfg)
	d.waitNext("alice's first two sessions", stopped)
	if _, stderr, code := runCLI(t, nil, "", "start", "alice", "-c", cfg); code != 0 {
		t.Fatalf("start alice: %s", stderr)
	}
	d.waitNext("two more", stopped)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	d = startDaemon(t, cfg)
	d.waitNext("two after the restart", stopped)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}

	out, stderr, code := runCLI(t, nil, "", "sessions", "alice", "--json", "-n", "0", "-c", cfg)
	if code != 0 {
		t.Fatalf("sessions: %s", stderr)
	}
	var seqs []uint32
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var s cli.SessionJSON
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s.Seq)
	}
	if want := []uint32{1, 2, 3, 4, 5, 6}; !slices.Equal(seqs, want) {
		t.Errorf("session seqs %v, want %v", seqs, want)
	}
}

// TestLostLogPipeEndsNothing: a daemon whose log pipe closes (a terminal's
// tee, a log collector going away) goes on running its agents, every
// session logged into the closed pipe, and still stops cleanly when asked:
// a write to the broken pipe fails, where SIGPIPE used to kill the daemon
// with its sessions running.
func TestLostLogPipeEndsNothing(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, twoQuickSessions)
	d := startDaemon(t, cfg)
	d.waitNext("alice's first two sessions", stoppedAtMaxSessions("alice"))
	_ = d.stderr.Close()
	if _, stderr, code := runCLI(t, nil, "", "start", "alice", "-c", cfg); code != 0 {
		t.Fatalf("start alice: %s", stderr)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		select {
		case <-d.done:
			t.Fatalf("the daemon ended once its log pipe closed: %v", d.err)
		default:
		}
		out, stderr, code := runCLI(t, nil, "", "sessions", "alice", "--json", "-n", "0", "-c", cfg)
		if code != 0 {
			t.Fatalf("sessions: %s", stderr)
		}
		ended := 0
		for dec := json.NewDecoder(strings.NewReader(out)); dec.More(); {
			var s cli.SessionJSON
			if err := dec.Decode(&s); err != nil {
				t.Fatal(err)
			}
			if s.Outcome != "" {
				ended++
			}
		}
		if ended == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions ended after the pipe closed, want 4 in all:\n%s", ended, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
}

// TestOperatorCommandsTellItStraight: a Stopped agent shows no session age
// once its session has ended; stopping an unknown agent says so once,
// naming it; and status against a daemon that takes the connection but
// never answers fails within seconds instead of hanging.
func TestOperatorCommandsTellItStraight(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
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
agents:
  - {name: alice, role: works}
  - {name: bob, role: works}
`)
	d := startDaemon(t, cfg)
	running := d.waitLine("alice Running", transitionTo("alice", "Running"))
	if _, stderr, code := runCLI(t, nil, "", "stop", "alice", "-c", cfg); code != 0 {
		t.Fatalf("stop alice: %s", stderr)
	}
	d.waitLine("alice's session ended", func(m map[string]any) bool {
		return m["msg"] == "session ended" && m["session"] == running["session"]
	})
	out, _, _ := runCLI(t, nil, "", "status", "--json", "-c", cfg)
	var rows []cli.StatusRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if a := rows[0]; a.Name != "alice" || a.State != "Stopped" || !a.SessionStarted.IsZero() {
		t.Errorf("stopped alice: %+v, want no session start", a.AgentStatus)
	}
	out, _, _ = runCLI(t, nil, "", "status", "-c", cfg)
	if f := strings.Fields(grepLines(out, "alice")); len(f) < 4 || f[1] != "Stopped" || f[3] != "-" {
		t.Errorf("status shows a session age for stopped alice:\n%s", out)
	}

	_, stderr, code := runCLI(t, nil, "", "stop", "nobody", "-c", cfg)
	if code != 2 || stderr != "swarmd: unknown agent nobody (agents: alice, bob)\n" {
		t.Errorf("stop nobody: exit %d, %q", code, stderr)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}

	// A wedged daemon: the socket takes connections, nothing answers.
	ln, err := net.Listen("unix", filepath.Join(repo, ".swarm", "swarmd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	status := exec.CommandContext(ctx, swarmdBin, "status", "-c", cfg)
	b, err := status.CombinedOutput()
	if took := time.Since(start); err == nil || took > 10*time.Second || !strings.Contains(string(b), "swarmd did not answer within 5s") {
		t.Errorf("status on a wedged daemon: %v after %v, %q", err, took, b)
	}
}

// waitForFile polls path until it exists and contains want, for a real
// process that writes it, and returns its text; it fails after 30 s.
func waitForFile(t *testing.T, path, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), want) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not contain %q after 30 s", path, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
