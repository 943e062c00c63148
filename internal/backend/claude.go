package backend

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"

	"github.com/swarmd/swarmd/internal/proc"
)

// Claude runs Claude Code: `claude -p --output-format stream-json --verbose`
// with the prompt on stdin. Success is its result record with
// is_error false; an authentication error ends the session at once.
//
// Sessions get CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1, so that the CLI exits
// right after its result line instead of waiting for background tasks, and
// IS_SANDBOX=1 when the args hold --dangerously-skip-permissions and swarmd
// runs as root (the CLI refuses that flag as root otherwise). The API key
// and endpoint (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ...) come from the
// daemon's or the configured env. Retries of failed API calls are the
// CLI's; CLAUDE_CODE_MAX_RETRIES in the env caps them. An agent's tools
// policy (Spec.Tools) becomes --allowedTools and --disallowedTools.
type Claude struct{ cli agentCLI }

var _ Backend = (*Claude)(nil)

// NewClaude returns a claude backend. The binary is resolved at each Start.
func NewClaude(sup *proc.Supervisor, cfg AgentCLIConfig) (*Claude, error) {
	cli, err := newAgentCLI(sup, "claude", cfg, syscall.SIGINT)
	if err != nil {
		return nil, err
	}
	cli.args = claudeArgs(cfg)
	// Claude Code stops at max_turns itself: swarmd's count of the stream
	// only backs it up, since code in the session can write that stream
	// (a byte glued to a tool result kept a turn from ever closing).
	cli.turnsFlag = "--max-turns"
	cli.env = []string{"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1"}
	if os.Geteuid() == 0 && slices.Contains(cfg.Args, "--dangerously-skip-permissions") {
		cli.env = append(cli.env, "IS_SANDBOX=1")
	}
	cli.env = append(cli.env, cfg.Env...)
	// A probe's requests are its own retries: none of Claude Code's.
	cli.probeEnv = []string{"CLAUDE_CODE_MAX_RETRIES=0"}
	now := cfg.Now
	cli.parser = func() Reporter { return newClaudeParser(now) }
	cli.toolArgs = func(p ToolPolicy, _, _ string) ([]string, string, error) { return claudeToolArgs(p), "", nil }
	return &Claude{cli: cli}, nil
}

func claudeArgs(cfg AgentCLIConfig) []string {
	args := []string{"-p", "--output-format", "stream-json", "--verbose"}
	if cfg.Model != "" {
		args = append(args, "--model", cfg.Model)
	}
	for _, t := range cfg.AllowedTools {
		args = append(args, "--allowedTools", t)
	}
	return append(args, cfg.Args...)
}

// Name is the configured backend name.
func (c *Claude) Name() string { return c.cli.name }

// Start starts one Claude Code session.
func (c *Claude) Start(ctx context.Context, spec Spec) (Session, error) {
	s, err := c.cli.start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", c.cli.name, err)
	}
	return s, nil
}
