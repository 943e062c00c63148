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
