package backend

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/swarmd/swarmd/internal/proc"
)

// Codex runs OpenAI Codex CLI: `codex exec --json [--model M] [args] -`, the
// "-" making it read the prompt from stdin. Success is a
// turn.completed without a turn.failed; "401 Unauthorized" ends the
// session at once.
//
// Codex reads its settings from $CODEX_HOME (default ~/.codex): config.toml
// names the model provider and its base_url, and auth.json or the
// provider's env_key variable holds the key. Set CODEX_HOME (and the key
// variable) in the backend's or the agent's env. Codex's sandbox and
// approvals are its own: pass --dangerously-bypass-approvals-and-sandbox or
// --full-auto in Args; exec never asks for approval. Codex has no per-tool
// switch, so an agent's tools policy (Spec.Tools) is enforced from the
// stream only.
type Codex struct{ cli agentCLI }

var _ Backend = (*Codex)(nil)

// NewCodex returns a codex backend. The binary is resolved at each Start.
func NewCodex(sup *proc.Supervisor, cfg AgentCLIConfig) (*Codex, error) {
	if len(cfg.AllowedTools) > 0 {
		return nil, errors.New("backend: new codex backend: allowed tools are a claude option")
	}
	cli, err := newAgentCLI(sup, "codex", cfg, syscall.SIGINT)
	if err != nil {
		return nil, err
	}
	// Codex runs its shell tool as a login shell by default (bash -lc),
	// which rebuilds PATH from /etc/profile: the directory swarmd put first
	// in the session's PATH is gone, and the agent cannot run `swarmd` by
	// name. A plain shell keeps the session's environment; Args come after,
	// so an operator's own -c allow_login_shell=true wins.
	args := []string{"exec", "--json", "-c", "allow_login_shell=false"}
	if cfg.Model != "" {
		args = append(args, "--model", cfg.Model)
	}
	// No cap on Codex's own retries in a probe (Spec.Probe): they are
	// settings of a model provider (model_providers.ID.request_max_retries),
	// which the command line may not set for the built-in one, and Codex
	// ignores them at the top level.
	cli.args = append(append(args, cfg.Args...), "-")
	cli.env = append([]string(nil), cfg.Env...)
	now := cfg.Now
	cli.parser = func() Reporter { return newCodexParser(now) }
	return &Codex{cli: cli}, nil
}

// Name is the configured backend name.
func (c *Codex) Name() string { return c.cli.name }

// Start starts one Codex session.
func (c *Codex) Start(ctx context.Context, spec Spec) (Session, error) {
	s, err := c.cli.start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", c.cli.name, err)
	}
	return s, nil
}
