package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
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
		stopClean(t, d)
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
		stopClean(t, d)
	})

	t.Run("GOMAXPROCS wins", func(t *testing.T) {
		d, addr, _ := start(t, []string{"GOMAXPROCS=2"}, "1")
		procs(t, addr, "2")
		stopClean(t, d)
	})
}

// limits.daemon_timer_slack: every thread of the daemon runs with it (the
// daemon executed itself again with it, so the runtime's first threads
// have it too), while a session keeps the slack the daemon was started
// with and never sees how it was carried across. 0s leaves the daemon's
// threads with the slack it was started with, without executing again.
func TestDaemonTimerSlack(t *testing.T) {
	own := readInt(t, "/proc/self/timerslack_ns")
	out := t.TempDir()
	for _, tc := range []struct {
		key  string
		want int
	}{{"3ms", 3_000_000}, {"0s", own}} {
		t.Run(tc.key, func(t *testing.T) {
			file := filepath.Join(out, "slack-"+tc.key)
			repo := gitRepo(t)
			d := startDaemon(t, writeConfig(t, repo, `
listen: ""
limits: {daemon_timer_slack: `+tc.key+`}
sandbox: {writable: [`+out+`]}
defaults: {backend: slack, grace_period: 1s}
backends:
  slack: {type: command, command: /bin/sh, args: [-c, 'read -r s </proc/self/timerslack_ns; echo "$s ${`+envStartSlack+`-unset}" > "$OUT.tmp"; mv "$OUT.tmp" "$OUT"; sleep 3600']}
agents:
  - {name: alice, role: r, env: {OUT: `+file+`}}
`))
			d.waitLine("alice Running", transitionTo("alice", "Running"))
			pid := d.cmd.Process.Pid
			tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			if err != nil {
				t.Fatal(err)
			}
			// Every thread has the key's slack: the session's was set on the
			// forking thread for the fork alone.
			at := map[int]int{}
			for _, e := range tids {
				if b, err := os.ReadFile("/proc/" + e.Name() + "/timerslack_ns"); err == nil { // else the thread ended
					n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
					at[n]++
				}
			}
			threads := 0
			for _, n := range at {
				threads += n
			}
			want := map[int]int{tc.want: threads}
			if !maps.Equal(at, want) {
				t.Errorf("the daemon's threads by timer slack: %v, want %v", at, want)
			}
			if got, want := strings.TrimSpace(waitFileText(t, file)), fmt.Sprintf("%d unset", own); got != want {
				t.Errorf("the session saw %q (its slack, and %s), want %q", got, envStartSlack, want)
			}
			stopClean(t, d)
		})
	}
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(mustRead(t, path)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// stopClean stops d with SIGTERM and wants exit 0.
func stopClean(t *testing.T, d *daemonProc) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
