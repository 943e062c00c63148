package backend

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/swarmd/swarmd/internal/mockllm"
)

func TestGeminiArgsAndEnv(t *testing.T) {
	g, err := NewGemini(newSupervisor(t), AgentCLIConfig{Model: "gemini-2.5-pro", Args: []string{"--yolo"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"-p", "", "--output-format", "stream-json", "--model", "gemini-2.5-pro", "--yolo"}; !slices.Equal(g.cli.args, want) {
		t.Fatalf("args %q, want %q", g.cli.args, want)
	}
	if g.Name() != "gemini" || g.cli.cancelSig != syscall.SIGTERM || !slices.Contains(g.cli.env, "GEMINI_CLI_NO_RELAUNCH=true") {
		t.Fatalf("defaults: %+v", g.cli)
	}
	if _, err := NewGemini(newSupervisor(t), AgentCLIConfig{AllowedTools: []string{"x"}}); err == nil {
		t.Fatal("allowed tools accepted")
	}
}

func TestGeminiCommits(t *testing.T)   { testCommit(t, geminiKind) }
func TestGeminiInterrupt(t *testing.T) { testInterrupt(t, geminiKind) }

// TestGeminiUnauthorizedIsFatal: Gemini CLI says it only in its exit code.
func TestGeminiUnauthorizedIsFatal(t *testing.T) {
	rig := newCLIRig(t, geminiKind, nil, mockllm.Status(401), mockllm.Status(401), mockllm.Status(401))
	sp := rig.spec(t)
	r := waitCLI(t, rig.start(t, sp), sp, cliLimit)
	if r.Outcome != OutcomeError || r.ExitCode != 145 || !strings.Contains(r.Fatal, "401") {
		t.Fatalf("result %+v\nlog:\n%s", r, logOf(t, sp))
	}
}

func TestGeminiExitCodeIsFatal(t *testing.T) {
	g, _ := NewGemini(newSupervisor(t), AgentCLIConfig{Command: fakeCLI(t, `echo '{"type":"init"}'
echo 'not json: an API error'
exit 147
`)})
	r := run(t, g, spec(t))
	if r.Outcome != OutcomeError || r.ExitCode != 147 || !strings.Contains(r.Fatal, "403") {
		t.Fatalf("result %+v", r)
	}
}

// TestGeminiEmptyResponseReason: Gemini CLI reports an empty model response
// only in an error line before a result without an error object; the
// session's reason keeps it.
func TestGeminiEmptyResponseReason(t *testing.T) {
	rig := newCLIRig(t, geminiKind, nil, mockllm.Text(""))
	sp := rig.spec(t)
	r := waitCLI(t, rig.start(t, sp), sp, cliLimit)
	if r.Outcome != OutcomeError || !strings.Contains(r.Reason, "The model returned an empty response") {
		t.Fatalf("result %+v\nlog:\n%s", r, logOf(t, sp))
	}
}
