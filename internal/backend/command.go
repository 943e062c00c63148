package backend

import (
	"context"
	"errors"
	"syscall"

	"github.com/swarmd/swarmd/internal/proc"
)

// CommandConfig configures the command backend.
type CommandConfig struct {
	Name         string // default "command"
	Command      string // the binary: a path, or a name looked up in PATH at each start
	Args         []string
	CancelSignal syscall.Signal // default SIGTERM
	Env          []string       // KEY=VALUE for every session, under Spec.Env
}

// Command runs any argv. Its output is plain text with no success record, so
// exit code 0 is success.
type Command struct {
	sup *proc.Supervisor
	cfg CommandConfig
}

var _ Backend = (*Command)(nil)

// NewCommand returns a command backend. The binary is resolved at each
// Start, not here: a missing one ends that agent's sessions with "binary not
// found" while other agents keep running.
func NewCommand(sup *proc.Supervisor, cfg CommandConfig) (*Command, error) {
	if sup == nil {
		return nil, errors.New("backend: new command backend: nil supervisor")
	}
	if cfg.Command == "" {
		return nil, errors.New("backend: new command backend: empty command")
	}
	if cfg.Name == "" {
		cfg.Name = "command"
	}
	if cfg.CancelSignal == 0 {
		cfg.CancelSignal = syscall.SIGTERM
	}
	cfg.Args = append([]string(nil), cfg.Args...)
	cfg.Env = append([]string(nil), cfg.Env...)
	return &Command{sup: sup, cfg: cfg}, nil
}

// Name is the configured backend name.
func (c *Command) Name() string { return c.cfg.Name }

// Start starts one session of the command.
func (c *Command) Start(ctx context.Context, spec Spec) (Session, error) {
	return startSession(ctx, c.sup, spec, launch{
		path:      c.cfg.Command,
		args:      c.cfg.Args,
		env:       c.cfg.Env,
		cancelSig: c.cfg.CancelSignal,
		tail:      true,
	})
}
