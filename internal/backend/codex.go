package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	cli.args = append(append(args, cfg.Args...), "-")
	cli.env = append([]string(nil), cfg.Env...)
	cli.probeArgsFor = codexProbeArgs(cli.args)
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

// codexProbeArgs caps Codex's own retries in a probe session (Spec.Probe):
// they are settings of the model provider in use
// (model_providers.ID.request_max_retries, stream_max_retries), which a
// -c on the command line sets over the provider's table in config.toml.
// The provider is the one args name (-c model_provider=ID), else the one
// CODEX_HOME/config.toml names (the session's environment says where
// CODEX_HOME is: env is it, later entries winning). The built-in provider
// (openai) cannot be changed that way: its probes keep Codex's retries.
func codexProbeArgs(args []string) func(env []string) []string {
	return func(env []string) []string {
		id := codexProviderArg(args)
		if id == "" {
			home := ""
			for _, kv := range env {
				if v, ok := strings.CutPrefix(kv, "CODEX_HOME="); ok {
					home = v
				}
			}
			if home == "" {
				for _, kv := range env {
					if v, ok := strings.CutPrefix(kv, "HOME="); ok {
						home = filepath.Join(v, ".codex")
					}
				}
			}
			if home != "" {
				id = codexProviderInConfig(filepath.Join(home, "config.toml"))
			}
		}
		if id == "" || id == "openai" {
			return nil
		}
		return []string{"-c", "model_providers." + id + ".request_max_retries=0", "-c", "model_providers." + id + ".stream_max_retries=0"}
	}
}

// codexProviderArg is the provider a -c (--config) model_provider=ID in
// args names, the last one winning; "" when none does.
func codexProviderArg(args []string) string {
	id := ""
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--config=")
		if !ok && (a == "-c" || a == "--config") && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if k, val, found := strings.Cut(v, "="); ok && found && strings.TrimSpace(k) == "model_provider" {
			id = strings.Trim(strings.TrimSpace(val), `"'`)
		}
	}
	return id
}

// codexProviderInConfig is the top-level model_provider of a Codex
// config.toml ("" when it names none, or cannot be read): the lines
// before the first [table].
func codexProviderInConfig(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			return ""
		}
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "model_provider" {
			v, _, _ = strings.Cut(v, "#")
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}
