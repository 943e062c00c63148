package backend

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/swarmd/swarmd/internal/proc"
)

// Gemini runs Gemini CLI: `gemini -p "" --output-format stream-json`; -p
// needs a value and appends it to stdin, so the prompt is all on stdin.
// Success is its result record with status "success". It exits
// with the HTTP status mod 256 on an API error: 145 and 147 (401, 403) and
// 41 (no authentication set up) are fatal. Its default cancel signal is
// SIGTERM.
//
// Sessions get GEMINI_CLI_NO_RELAUNCH=true (the CLI would otherwise start a
// second node process to raise its heap limit, doubling its start time)
// and GEMINI_CLI_TRUST_WORKSPACE=true (headless, it refuses to run in a
// folder not trusted interactively; the agent's worktree is swarmd's).
// Authentication: GEMINI_API_KEY (and GOOGLE_GEMINI_BASE_URL for another
// endpoint) in the env, and $HOME/.gemini/settings.json selecting the API
// key ({"security":{"auth":{"selectedType":"gemini-api-key"}}}). Pass
// --yolo (or --approval-mode) in Args to let it run tools unattended. An
// agent's tools policy (Spec.Tools) becomes a policy file of the session's
// own, passed with --policy: its rules outrank --yolo.
type Gemini struct{ cli agentCLI }

var _ Backend = (*Gemini)(nil)

// NewGemini returns a gemini backend. The binary is resolved at each Start.
func NewGemini(sup *proc.Supervisor, cfg AgentCLIConfig) (*Gemini, error) {
	if len(cfg.AllowedTools) > 0 {
		return nil, errors.New("backend: new gemini backend: allowed tools are a claude option")
	}
	cli, err := newAgentCLI(sup, "gemini", cfg, syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	args := []string{"-p", "", "--output-format", "stream-json"}
	if cfg.Model != "" {
		args = append(args, "--model", cfg.Model)
	}
	cli.args = append(args, cfg.Args...)
	cli.env = append([]string{"GEMINI_CLI_NO_RELAUNCH=true", "GEMINI_CLI_TRUST_WORKSPACE=true"}, cfg.Env...)
	now := cfg.Now
	cli.parser = func() Reporter { return newGeminiParser(now) }
	cli.toolArgs = writeGeminiPolicy
	return &Gemini{cli: cli}, nil
}

// Name is the configured backend name.
func (g *Gemini) Name() string { return g.cli.name }

// Start starts one Gemini CLI session.
func (g *Gemini) Start(ctx context.Context, spec Spec) (Session, error) {
	s, err := g.cli.start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", g.cli.name, err)
	}
	return s, nil
}
