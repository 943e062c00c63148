package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mockllm"
)

// codexConfig is a CODEX_HOME whose config.toml sends Codex to the mock, with
// one retry of a failed request.
func codexConfig(t *testing.T, url string) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "codex")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := `model = "mock-model"
model_provider = "mock"

[model_providers.mock]
name = "mock"
base_url = "` + url + `/v1"
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 1
stream_max_retries = 1
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// TestCodexFindsSwarmdByName: Codex's shell tool would run as a login
// shell, which resets PATH (/etc/profile) and loses the directory the daemon
// put first in the session's PATH; swarmd runs Codex with a plain shell, so
// a bare `swarmd` is found, and the mail it sends arrives as the agent's.
func TestCodexFindsSwarmdByName(t *testing.T) {
	bin := realCLI(t, "codex")
	mock := mockllm.New()
	defer mock.Close()
	// The shell prints the probe computed, so that the command's own text
	// (which the next request also carries) does not hold it.
	const probe = "swarmd-on-path-42"
	mock.Script("You are agent `alice`",
		mockllm.Shell(`command -v swarmd >/dev/null && echo swarmd-on-path-$((6*7)); swarmd mail send --to operator --subject codex 'mail from codex by name'`),
		mockllm.Text("sent"))

	repo := gitRepo(t)
	home := t.TempDir()
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
defaults:
  backend: codex
backends:
  codex:
    type: codex
    command: %s
    args: [--dangerously-bypass-approvals-and-sandbox]
    env:
      CODEX_HOME: %s
      MOCK_API_KEY: test-key
      HOME: %s
      TMPDIR: %s
agents:
  - {name: alice, role: "You report.", max_sessions: 1}
`, bin, codexConfig(t, mock.URL()), home, home))
	d := startDaemon(t, cfg)
	d.waitLine("alice's session succeeded", func(m map[string]any) bool {
		return m["msg"] == "transition" && m["agent"] == "alice" && m["event"] == "SessionExited(Success)"
	})
	// The tool's output went back to the model: the shell found swarmd on
	// its PATH by name.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := mock.WaitRequest(ctx, func(r mockllm.Request) bool { return r.BodyContains(probe) }); err != nil {
		t.Fatalf("the shell did not find swarmd on its PATH (or the tool output never reached the model): %v\nlog:\n%s", err, d.log())
	}
	out, stderr, code := runCLI(t, nil, "", "mail", "inbox", "-c", cfg)
	if code != 0 || !strings.Contains(out, "alice") || !strings.Contains(out, "codex") {
		t.Fatalf("operator's inbox (exit %d) lacks alice's mail:\n%s%s", code, out, stderr)
	}
	out, stderr, code = runCLI(t, nil, "", "mail", "read", "1", "-c", cfg)
	if code != 0 || !strings.Contains(out, "mail from codex by name") {
		t.Fatalf("mail read 1 (exit %d):\n%s%s", code, out, stderr)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, filepath.Join(repo, ".swarm"), 2*time.Second)
}
