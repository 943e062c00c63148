package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/cli"
)

// counterScript is a session that saves its prompt, records its pid,
// starts a process in a session of its own, and writes a counter every
// 100 ms.
const counterScript = `cat > "$D/$SWARM_SESSION_ID.prompt"
echo $$ > "$D/pid"
setsid sh -c 'while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &
i=0
while :; do i=$((i+1)); echo $i > "$D/counter.tmp"; mv "$D/counter.tmp" "$D/counter"; sleep 0.1; done`

// counter reads the session's counter (0 before it exists).
func counter(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "counter"))
	if os.IsNotExist(err) {
		return 0
	}
	n, cerr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || cerr != nil {
		t.Fatalf("counter: %v %v", err, cerr)
	}
	return n
}

func waitCounter(t *testing.T, dir string, above int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n := counter(t, dir); n > above {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counter stays at %d", counter(t, dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procStates maps each live process of stateDir's trees to its state
// letter in /proc/PID/stat.
func procStates(stateDir string) map[string]byte {
	out := make(map[string]byte)
	for _, p := range treeProcesses(stateDir) {
		pid, _, _ := strings.Cut(p, ":")
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue // gone
		}
		i := strings.LastIndexByte(string(b), ')')
		out[p] = b[i+2]
		if frozenCgroup(pid) {
			out[p] = 'F' // frozen whole by its cgroup (isolation), which /proc shows as a sleep
		}
	}
	return out
}

// frozenCgroup reports whether process pid is in a cgroup v2 the kernel
// reports frozen (cgroup.events: frozen 1).
func frozenCgroup(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			for _, mount := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
				if ev, err := os.ReadFile(filepath.Join(mount, p, "cgroup.events")); err == nil {
					return strings.Contains(string(ev), "frozen 1")
				}
			}
		}
	}
	return false
}

func statusOf(t *testing.T, cfg, name string) cli.StatusRow {
	t.Helper()
	out, stderr, code := runCLI(t, nil, "", "status", "--json", "-c", cfg)
	var rows []cli.StatusRow
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("status: %d %s %s", code, out, stderr)
	}
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("status has no %s: %s", name, out)
	return cli.StatusRow{}
}

// TestPauseNowFreezesAndSurvivesKill9: `pause --now` stops every process of
// the session's tree (the counter stops; every process is in state T) and
// its session timeout with it; `resume` continues the same process. A pause
// survives kill -9 of the daemon: the new daemon starts no session for the
// agent, and urgent mail sent meanwhile waits for the resume.
func TestPauseNowFreezesAndSurvivesKill9(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	repo := gitRepo(t)
	dir := t.TempDir()
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
sandbox: {writable: [%[2]q]}
defaults:
  backend: counter
  grace_period: 1s
  session_timeout: 3s
backends:
  counter:
    type: command
    command: sh
    args: ["-c", %[1]q]
agents:
  - {name: alice, role: "You count.", env: {D: %[2]q}}
`, counterScript, dir))
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	waitCounter(t, dir, 2)
	pid, _ := os.ReadFile(filepath.Join(dir, "pid"))

	out, stderr, code := runCLI(t, nil, "", "pause", "alice", "--now", "--reason", "look at it", "-c", cfg)
	if code != 0 || !strings.Contains(out, "frozen (") {
		t.Fatalf("pause --now: %d %q %q", code, out, stderr)
	}
	states := procStates(stateDir)
	if len(states) < 3 {
		t.Fatalf("the session tree has %d processes: %v", len(states), states)
	}
	for p, st := range states {
		if st != 'T' && st != 'F' && st != 'Z' { // a zombie has ended already
			t.Errorf("process %s is in state %c while paused, want stopped (T) or in a frozen cgroup", p, st)
		}
	}
	st := statusOf(t, cfg, "alice")
	if !st.Paused || !st.Frozen || st.Health != "paused (frozen)" || st.PausedBy != "operator" || st.PauseReason != "look at it" {
		t.Errorf("status while frozen: %+v", st.AgentStatus)
	}
	frozen := counter(t, dir)
	// Longer than the 3s session timeout: it must not fire while frozen.
	time.Sleep(3500 * time.Millisecond)
	if got := counter(t, dir); got != frozen {
		t.Fatalf("the counter moved from %d to %d while frozen", frozen, got)
	}

	out, stderr, code = runCLI(t, nil, "", "resume", "alice", "-c", cfg)
	if code != 0 || !strings.Contains(out, "thawed") {
		t.Fatalf("resume: %d %q %q", code, out, stderr)
	}
	waitCounter(t, dir, frozen)
	if again, _ := os.ReadFile(filepath.Join(dir, "pid")); string(again) != string(pid) {
		t.Fatalf("the session after resume is pid %s, want the frozen one, %s", again, pid)
	}
	if strings.Contains(d.log(), `"event":"SessionExited`) {
		t.Fatalf("the session ended while frozen or at its resume; log:\n%s", d.log())
	}
	for p, st := range procStates(stateDir) {
		if st == 'T' {
			t.Errorf("process %s still stopped after resume", p)
		}
	}

	// Frozen again, then the daemon dies: the pause must outlive it.
	if _, stderr, code := runCLI(t, nil, "", "pause", "alice", "--now", "--reason", "before the crash", "-c", cfg); code != 0 {
		t.Fatalf("second pause: %s", stderr)
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	d.wait(5 * time.Second)
	if err := os.Remove(filepath.Join(dir, "counter")); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t, cfg)
	d2.waitLine("agents registered", func(m map[string]any) bool { return m["msg"] == "swarmd running" })
	waitNoTreeProcesses(t, stateDir, 5*time.Second) // the frozen leftovers were swept
	if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--urgent", "--to", "alice", "--subject", "wake", "-c", cfg, "read this first"); code != 0 {
		t.Fatalf("mail: %s", stderr)
	}
	st = statusOf(t, cfg, "alice")
	if !st.Paused || st.Frozen || st.State != "BuildingPrompt" || st.PauseReason != "before the crash" {
		t.Fatalf("after the restart: %+v", st.AgentStatus)
	}
	time.Sleep(time.Second)
	if strings.Contains(d2.log(), `"to":"Spawning"`) {
		t.Fatalf("a paused agent spawned a session after the restart; log:\n%s", d2.log())
	}

	if _, stderr, code := runCLI(t, nil, "", "resume", "--all", "-c", cfg); code != 0 {
		t.Fatalf("resume --all: %s", stderr)
	}
	started := d2.waitLine("alice Running", transitionTo("alice", "Running"))
	promptFile := filepath.Join(dir, started["session"].(string)+".prompt")
	waitCounter(t, dir, 0) // the script saved its prompt before it counts
	prompt, err := os.ReadFile(promptFile)
	if err != nil || !strings.Contains(string(prompt), "read this first") {
		t.Fatalf("the first prompt after the resume lacks the urgent mail (%v):\n%s", err, prompt)
	}
	out, _, _ = runCLI(t, nil, "", "events", "--agent", "alice", "-c", cfg)
	for _, want := range []string{"--Paused--> Running by operator: look at it (--now: the running session is frozen)",
		"--Resumed--> Running by operator: paused", "--Resumed--> BuildingPrompt by operator"} {
		if !strings.Contains(out, want) {
			t.Errorf("events lack %q:\n%s", want, out)
		}
	}
	if _, stderr, code := runCLI(t, nil, "", "resume", "alice", "-c", cfg); code != 2 || !strings.Contains(stderr, "not paused") {
		t.Errorf("resume of an agent that is not paused: %d %q", code, stderr)
	}
	if out, stderr, code := runCLI(t, nil, "", "resume", "--all", "-c", cfg); code != 0 || strings.TrimSpace(out) != "no agent is paused: nothing to resume" {
		t.Errorf("resume --all with nothing paused: %d %q %q", code, out, stderr)
	}
	if _, stderr, code := runCLI(t, nil, "", "pause", "-c", cfg); code != 2 || !strings.Contains(stderr, "name one agent or give --all") {
		t.Errorf("pause without an agent: %d %q", code, stderr)
	}
	// A daemon stopping with a frozen session thaws it to cancel it: a
	// clean exit, nothing left.
	if _, stderr, code := runCLI(t, nil, "", "pause", "--all", "--now", "-c", cfg); code != 0 {
		t.Fatalf("pause --all --now: %s", stderr)
	}
	_ = d2.cmd.Process.Signal(syscall.SIGTERM)
	if code := d2.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, stateDir, 2*time.Second)
	if strings.Contains(d2.log(), "ignored cancel") {
		t.Errorf("the frozen session was force-stopped, not cancelled; log:\n%s", d2.log())
	}
}
