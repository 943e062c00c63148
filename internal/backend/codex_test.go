package backend

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mockllm"
)

func TestCodexArgs(t *testing.T) {
	c, err := NewCodex(newSupervisor(t), AgentCLIConfig{Model: "gpt-5", Args: []string{"--full-auto"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"exec", "--json", "-c", "allow_login_shell=false", "--model", "gpt-5", "--full-auto", "-"}; !slices.Equal(c.cli.args, want) {
		t.Fatalf("args %q, want %q", c.cli.args, want)
	}
	if c.Name() != "codex" || c.cli.command != "codex" || c.cli.cancelSig != syscall.SIGINT {
		t.Fatalf("defaults: %+v", c.cli)
	}
	if _, err := NewCodex(newSupervisor(t), AgentCLIConfig{AllowedTools: []string{"Bash"}}); err == nil {
		t.Fatal("allowed tools accepted")
	}
}

func TestCodexCommits(t *testing.T)   { testCommit(t, codexKind) }
func TestCodexInterrupt(t *testing.T) { testInterrupt(t, codexKind) }

func TestCodexUnauthorizedIsFatal(t *testing.T) {
	script := make([]mockllm.Turn, 10)
	for i := range script {
		script[i] = mockllm.Status(401)
	}
	rig := newCLIRig(t, codexKind, nil, script...)
	sp := rig.spec(t)
	r := waitCLI(t, rig.start(t, sp), sp, cliLimit)
	if r.Outcome != OutcomeError || !strings.Contains(r.Fatal, "401 Unauthorized") {
		t.Fatalf("result %+v\nlog:\n%s", r, logOf(t, sp))
	}
	if d := r.Ended.Sub(firstScripted(t, rig.mock).Time); d > 5*time.Second {
		t.Fatalf("session ended %v after the first 401", d)
	}
}

func TestInsertBeforeStdin(t *testing.T) {
	if got := insertBeforeStdin([]string{"exec", "-"}, []string{"-c", "x"}); !slices.Equal(got, []string{"exec", "-c", "x", "-"}) {
		t.Errorf("before -: %q", got)
	}
	if got := insertBeforeStdin([]string{"-p"}, []string{"-c", "x"}); !slices.Equal(got, []string{"-p", "-c", "x"}) {
		t.Errorf("no -: %q", got)
	}
}

// TestCodexProbeCapsItsRetries: a probe session runs Codex with its
// provider's own retries off, the provider found where Codex finds it (a
// -c model_provider=ID in the args, else CODEX_HOME's config.toml); any
// other session, and a probe of the built-in provider, as configured.
func TestCodexProbeCapsItsRetries(t *testing.T) {
	dir := t.TempDir()
	cli := filepath.Join(dir, "codex")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\ncat >/dev/null\necho \"$*\" >> \"$ARGS_OUT\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "codex-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte("model = \"m\"\nmodel_provider = \"corp\" # ours\n\n[model_providers.corp]\nname = \"corp\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	capped := func(id string) string {
		return "-c model_providers." + id + ".request_max_retries=0 -c model_providers." + id + ".stream_max_retries=0 -"
	}
	for _, c := range []struct {
		name string
		args []string
		env  []string
		want string // the end of the probe's command line
	}{
		{"config.toml", nil, []string{"CODEX_HOME=" + home}, capped("corp")},
		{"args win", []string{"-c", "model_provider=azure"}, []string{"CODEX_HOME=" + home}, capped("azure")},
		{"built-in", nil, []string{"CODEX_HOME=" + filepath.Join(dir, "none")}, "allow_login_shell=false -"},
		{"built-in named", []string{"--config=model_provider=openai"}, nil, "model_provider=openai -"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "args")
			x, err := NewCodex(newSupervisor(t), AgentCLIConfig{Command: cli, Args: c.args, Env: append([]string{"ARGS_OUT=" + out}, c.env...)})
			if err != nil {
				t.Fatal(err)
			}
			sp := spec(t)
			sp.Probe = true
			run(t, x, sp)
			run(t, x, spec(t))
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) != 2 || !strings.HasSuffix(lines[0], c.want) || strings.Contains(lines[1], "max_retries") {
				t.Fatalf("the probe's and the next session's args:\n%s\nwant the probe's to end in %q", b, c.want)
			}
		})
	}
}
