package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/proc"
)

// sessionMarker is the tree marker of a live process of agent's session:
// what every process the session starts inherits.
func sessionMarker(t *testing.T, stateDir, agent string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range treeProcesses(stateDir) {
			pid := strings.SplitN(p, ":", 2)[0]
			env, err := os.ReadFile(filepath.Join("/proc", pid, "environ"))
			if err != nil {
				continue
			}
			for _, kv := range bytes.Split(env, []byte{0}) {
				v, ok := bytes.CutPrefix(kv, []byte(proc.MarkerEnv+"="))
				if ok && bytes.Contains(v, []byte("\x1f"+agent+"-")) {
					return string(v)
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no session process of %s", agent)
	return ""
}

// TestSessionsActOnlyAsTheirAgent: commands run inside alice's session are
// recognised as alice by the process tree they belong to, whatever they
// claim: they cannot send mail as the operator, read bob's mail, or stop bob
// unless allow_control says so; events name the real actor.
func TestSessionsActOnlyAsTheirAgent(t *testing.T) {
	repo := gitRepo(t)
	base := `
listen: ""
defaults:
  grace_period: 1s
backends:
  sleeper:
    type: scripted
    steps: [{print: [working], sleep: 1h}]
agents:
  - {name: alice, role: x, backend: sleeper%s}
  - {name: bob, role: x, backend: sleeper}
`
	cfg := writeConfig(t, repo, fmt.Sprintf(base, ""))
	stateDir := filepath.Join(repo, ".swarm")
	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	d.waitLine("bob Running", transitionTo("bob", "Running"))
	if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--to", "bob", "-c", cfg, "for bob only"); code != 0 {
		t.Fatal(stderr)
	}
	asAlice := []string{proc.MarkerEnv + "=" + sessionMarker(t, stateDir, "alice"),
		"SWARM_DB_PATH=" + filepath.Join(stateDir, "swarm.db"), "SWARM_AGENTS=alice,bob"}

	_, stderr, code := runCLI(t, append(asAlice, "SWARM_AGENT_ID=operator"), "", "mail", "send", "--to", "bob", "forged")
	if code != 2 || !strings.Contains(stderr, "SWARM_AGENT_ID is operator, but this session is alice's") {
		t.Errorf("send as operator from alice's session: exit %d %q", code, stderr)
	}
	_, stderr, code = runCLI(t, asAlice, "", "mail", "read", "1")
	if code != 2 || !strings.Contains(stderr, "bob's mail") {
		t.Errorf("alice reading bob's mail: exit %d %q", code, stderr)
	}
	out, stderr, code := runCLI(t, asAlice, "", "mail", "send", "--to", "bob", "hi from alice")
	if code != 0 || !strings.Contains(out, "sent #2 to bob") {
		t.Errorf("alice's own mail: exit %d %q %q", code, out, stderr)
	}
	_, stderr, code = runCLI(t, asAlice, "", "stop", "bob", "-c", cfg)
	if code == 0 || !strings.Contains(stderr, "may not stop agent bob") {
		t.Errorf("alice stopping bob: exit %d %q", code, stderr)
	}
	// The operator's pause of alice is not hers to lift; her own is.
	if _, stderr, code := runCLI(t, nil, "", "pause", "alice", "-c", cfg); code != 0 {
		t.Fatal(stderr)
	}
	_, stderr, code = runCLI(t, asAlice, "", "resume", "alice", "-c", cfg)
	if code != 1 || !strings.Contains(stderr, "agent alice was paused by operator: only the operator resumes it") {
		t.Errorf("alice resuming the operator's pause of her: exit %d %q", code, stderr)
	}
	if st := statusOf(t, cfg, "alice"); !st.Paused {
		t.Errorf("alice is no longer paused after her refused resume: %+v", st.AgentStatus)
	}
	if _, stderr, code := runCLI(t, nil, "", "resume", "alice", "-c", cfg); code != 0 {
		t.Fatal(stderr)
	}
	if _, stderr, code := runCLI(t, asAlice, "", "pause", "alice", "-c", cfg); code != 0 {
		t.Fatalf("alice pausing herself: exit %d %q", code, stderr)
	}
	if _, stderr, code := runCLI(t, asAlice, "", "resume", "alice", "-c", cfg); code != 0 {
		t.Errorf("alice resuming her own pause: exit %d %q", code, stderr)
	}

	// With allow_control, alice may; the event names her.
	writeConfig(t, repo, fmt.Sprintf(base, ", allow_control: true"))
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitLine("reloaded", func(m map[string]any) bool { return m["msg"] == "config reloaded" })
	if _, stderr, code := runCLI(t, asAlice, "", "stop", "bob", "-c", cfg); code != 0 {
		t.Fatalf("alice stopping bob with allow_control: exit %d %q", code, stderr)
	}
	d.waitLine("bob Stopped", transitionTo("bob", "Stopped"))
	// The operator, outside any session, is still the operator.
	if _, stderr, code := runCLI(t, nil, "", "stop", "alice", "-c", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d.waitLine("alice Stopped", transitionTo("alice", "Stopped"))
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(10 * time.Second)
	out, _, _ = runCLI(t, nil, "", "events", "-c", cfg)
	if !strings.Contains(out, "--OperatorStop--> Stopped [CancelSession] by agent:alice") {
		t.Errorf("bob's stop not attributed to alice:\n%s", out)
	}
	if !strings.Contains(out, "alice") || !strings.Contains(out, "by operator") {
		t.Errorf("alice's stop not attributed to the operator:\n%s", out)
	}
}

// A hook (and likewise the merge gate) runs code an agent can change (a
// script in its branch): a control request from one of the daemon's own
// trees that is not a session has no authority, not the operator's. The
// operator, outside, still has it.
func TestHooksHaveNoOperatorAuthority(t *testing.T) {
	for _, c := range []struct {
		isolation string
		refused   []string // what the hook's two commands print
	}{
		// Without a sandbox the hook reaches the operator's socket and is
		// known there as one of the daemon's trees.
		{"off", []string{"may not stop agents", "no operator's authority", "may not set budgets"}},
		// In a sandbox it has no socket at all, and the daemon's config
		// reads as empty there.
		{"auto", []string{"at least one agent is required"}},
	} {
		t.Run(c.isolation, func(t *testing.T) {
			if c.isolation == "auto" {
				requireBwrap(t)
			}
			repo := gitRepo(t)
			dir := t.TempDir()
			out := filepath.Join(dir, "hook.err")
			cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
isolation: %[4]s
sandbox: {writable: [%[5]s]}
defaults:
  grace_period: 1s
hooks:
  session_start: ["%[1]s stop bob -c %[2]s 2> %[3]s; %[1]s budget set alice 5000 -c %[2]s 2>> %[3]s || true"]
backends:
  sleeper:
    type: scripted
    steps: [{print: [working], sleep: 1h}]
agents:
  - {name: alice, role: x, backend: sleeper}
  - {name: bob, role: x, backend: sleeper}
`, swarmdBin, filepath.Join(repo, "swarmd.yaml"), out, c.isolation, dir))
			// (the same hook tries to lift alice's budget: refused too)
			d := startDaemon(t, cfg)
			d.waitLine("alice Running", transitionTo("alice", "Running"))
			d.waitLine("bob Running", transitionTo("bob", "Running"))
			b, err := os.ReadFile(out)
			for _, want := range c.refused {
				if err != nil || !strings.Contains(string(b), want) {
					t.Fatalf("the hook's swarmd stop bob and budget set: %v %q, want both refused (%q)", err, b, want)
				}
			}
			if st := statusOf(t, cfg, "bob"); st.State != "Running" {
				t.Fatalf("bob is %s after a hook asked to stop it", st.State)
			}
			// status says what contains the trees (here, a hook that ran in one).
			out, _, code := runCLI(t, nil, "", "status", "-c", cfg)
			if code != 0 || !strings.Contains(out, "\nisolation "+c.isolation+": ") {
				t.Errorf("status does not say what isolation is in force:\n%s", out)
			}
			// and how busy the store's writer was (the health loop's first
			// sample is taken at start).
			if !regexp.MustCompile(`\nstore: the write connection busy \d+% of the last \d+s, [1-9]\d* writes`).MatchString(out) {
				t.Errorf("status does not say how busy the store's writer was:\n%s", out)
			}
			if _, stderr, code := runCLI(t, nil, "", "stop", "bob", "-c", cfg); code != 0 {
				t.Fatalf("the operator stopping bob: exit %d %q", code, stderr)
			}
			d.waitLine("bob Stopped", transitionTo("bob", "Stopped"))
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			d.wait(10 * time.Second)
		})
	}
}

// Without a sandbox but with cgroups in force, a session is known on the
// control socket by the cgroup the kernel says it is in, not by its
// environment: alice's session drops its tree marker (and then takes bob's)
// and asks to stop bob, and is refused as alice both times, never taken for
// the operator or for bob.
func TestACgroupIsTheSessionsIdentity(t *testing.T) {
	repo := gitRepo(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "alice.err")
	bobMarker := filepath.Join(dir, "bob.marker")
	cfgPath := filepath.Join(repo, "swarmd.yaml")
	// alice's session waits for bob's marker (the test writes it once bob
	// runs), then tries both ways and sleeps.
	script := fmt.Sprintf(`while [ ! -s %[5]s ]; do sleep 0.05; done
env -u %[1]s %[2]s stop bob -c %[3]s 2> %[4]s
env %[1]s="$(cat %[5]s)" %[2]s stop bob -c %[3]s 2>> %[4]s
echo done >> %[4]s
sleep 3600`, proc.MarkerEnv, swarmdBin, cfgPath, out, bobMarker)
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
isolation: auto
sandbox: {bwrap: %q}
defaults:
  grace_period: 1s
backends:
  sleeper:
    type: scripted
    steps: [{print: [working], sleep: 1h}]
  tries: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: alice, role: x, backend: tries}
  - {name: bob, role: x, backend: sleeper}
`, filepath.Join(dir, "no-bwrap"), script))
	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	d.waitLine("bob Running", transitionTo("bob", "Running"))
	st, _, _ := runCLI(t, nil, "", "status", "-c", cfg)
	if !strings.Contains(st, "a cgroup per process tree") {
		t.Skipf("no cgroups on this host:\n%s", st)
	}
	if err := os.WriteFile(bobMarker, []byte(sessionMarker(t, filepath.Join(repo, ".swarm"), "bob")), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []byte
	deadline := time.Now().Add(20 * time.Second)
	for !bytes.Contains(got, []byte("done")) {
		if time.Now().After(deadline) {
			t.Fatalf("alice's session did not finish its tries: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
		got, _ = os.ReadFile(out)
	}
	if n := strings.Count(string(got), "agent alice may not stop agent bob"); n != 2 {
		t.Errorf("alice's two tries, without a marker and with bob's: %q; want both refused as alice", got)
	}
	if st := statusOf(t, cfg, "bob"); st.State != "Running" {
		t.Fatalf("bob is %s after alice's session asked to stop it", st.State)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(10 * time.Second)
}
