package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSessionMailHeldToMaxBody: `swarmd mail send` inside a session reads no
// config (only SWARM_DB_PATH), yet the daemon's mailbox.max_body holds for
// it: a longer body is refused with one line naming the limit, and nothing
// is stored.
func TestSessionMailHeldToMaxBody(t *testing.T) {
	repo := gitRepo(t)
	out := t.TempDir()
	cfg := writeConfig(t, repo, `
listen: ""
sandbox: {writable: [`+out+`]}
mailbox:
  max_body: 100
defaults:
  backend: sender
  max_sessions: 1
backends:
  sender:
    type: command
    command: /bin/sh
    args: [-c, '"$SWARMD_BIN" mail send --to operator "$(printf %0200d 0)" 2>"$OUT/err"; echo $? >"$OUT/code.tmp"; mv "$OUT/code.tmp" "$OUT/code"']
agents:
  - {name: alice, role: sends, env: {OUT: `+out+`}}
`)
	d := startDaemon(t, cfg)
	code := waitFileText(t, filepath.Join(out, "code"))
	stderr, _ := os.ReadFile(filepath.Join(out, "err"))
	lines := strings.Split(strings.TrimRight(string(stderr), "\n"), "\n")
	if strings.TrimSpace(code) == "0" || len(lines) != 1 || !strings.Contains(lines[0], "200 bytes, over the 100-byte limit (mailbox.max_body)") {
		t.Fatalf("a 200-byte body from a session: exit %s, stderr:\n%s\nwant refused in one line at the 100-byte limit", code, stderr)
	}
	if inbox, _, _ := runCLI(t, nil, "", "mail", "inbox", "-c", cfg); !strings.Contains(inbox, "no mail") {
		t.Errorf("the refused message was stored:\n%s", inbox)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// waitFileText polls until path exists (written by a process under test,
// renamed into place whole) and returns its text.
func waitFileText(t *testing.T, path string) string {
	t.Helper()
	return waitForFile(t, path, "")
}

// TestDaemonCPUs: limits.daemon_cpus is how many threads run the daemon's
// Go code, as the Go runtime's own metric reports it; a reload applies a
// new value; a GOMAXPROCS in the daemon's environment wins over the config;
// and sessions do not inherit the daemon's value.
func TestDaemonCPUs(t *testing.T) {
	out := t.TempDir()
	base := `
sandbox: {writable: [` + out + `]}
defaults: {backend: env, grace_period: 1s}
backends:
  env: {type: command, command: /bin/sh, args: [-c, 'echo "[$GOMAXPROCS]" > "$OUT/procs.tmp"; mv "$OUT/procs.tmp" "$OUT/procs"; sleep 3600']}
agents:
  - {name: alice, role: r, env: {OUT: ` + out + `}}
`
	procs := func(t *testing.T, addr, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := ""
			for _, l := range strings.Split(scrape(t, "http://"+addr+"/metrics"), "\n") {
				if v, ok := strings.CutPrefix(l, "go_sched_gomaxprocs_threads "); ok {
					got = v
				}
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("go_sched_gomaxprocs_threads = %q, want %s", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop := func(t *testing.T, d *daemonProc) {
		t.Helper()
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		if code := d.wait(20 * time.Second); code != 0 {
			t.Fatalf("exit %d", code)
		}
	}

	// start runs a daemon with limits.daemon_cpus n and env, its agent
	// Running; it returns the daemon, its listener and its repository.
	start := func(t *testing.T, env []string, n string) (*daemonProc, string, string) {
		t.Helper()
		repo, addr := gitRepo(t), freePort(t)
		d := startDaemonEnv(t, env, writeConfig(t, repo, "listen: "+addr+"\nlimits: {daemon_cpus: "+n+"}"+base))
		d.waitLine("alice Running", transitionTo("alice", "Running"))
		return d, addr, repo
	}

	t.Run("config, then a reload", func(t *testing.T) {
		d, addr, repo := start(t, []string{"GOMAXPROCS="}, "1")
		procs(t, addr, "1")
		writeConfig(t, repo, "listen: "+addr+"\nlimits: {daemon_cpus: 3}"+base)
		_ = d.cmd.Process.Signal(syscall.SIGHUP)
		d.waitLine("reloaded", func(m map[string]any) bool { return m["msg"] == "config reloaded" })
		procs(t, addr, "3")
		if got := strings.TrimSpace(waitFileText(t, filepath.Join(out, "procs"))); got != "[]" {
			t.Errorf("the session's GOMAXPROCS = %s, want [] (unset)", got)
		}
		stop(t, d)
	})

	t.Run("0 gives Go's default back", func(t *testing.T) {
		d, addr, repo := start(t, []string{"GOMAXPROCS="}, "0")
		def := ""
		for _, l := range strings.Split(scrape(t, "http://"+addr+"/metrics"), "\n") {
			if v, ok := strings.CutPrefix(l, "go_sched_gomaxprocs_threads "); ok {
				def = v
			}
		}
		if def == "" || def == "3" {
			t.Skipf("Go's default here is %q: it cannot tell a reload to 3 from none", def)
		}
		for _, n := range []string{"3", "0"} {
			writeConfig(t, repo, "listen: "+addr+"\nlimits: {daemon_cpus: "+n+"}"+base)
			_ = d.cmd.Process.Signal(syscall.SIGHUP)
			d.waitNext("reloaded", func(m map[string]any) bool { return m["msg"] == "config reloaded" })
			want := map[string]string{"3": "3", "0": def}[n]
			procs(t, addr, want)
		}
		stop(t, d)
	})

	t.Run("GOMAXPROCS wins", func(t *testing.T) {
		d, addr, _ := start(t, []string{"GOMAXPROCS=2"}, "1")
		procs(t, addr, "2")
		stop(t, d)
	})
}
