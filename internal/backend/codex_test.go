package backend

import (
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
