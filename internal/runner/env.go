package runner

import (
	"os"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/environ"
)

// Sessions and hooks get one environment, built here: sessionEnv is what
// swarmd adds (the configured env and the SWARM_* variables), and both lay
// it over the daemon's environment the same way, with the default env under
// it and swarmd's directory first in PATH. The only difference is the
// backend's own env, which a session's backend puts between the default env
// and sessionEnv (backend.Spec), and a hook does not have.

// sessionEnv is what a session adds to the daemon's environment: the
// configured env and the SWARM_* variables.
func (r *Runner) sessionEnv() []string {
	env := make([]string, 0, len(r.cfg.Env)+3)
	env = append(env, r.cfg.Env...)
	env = append(env, "SWARM_AGENT_ID="+r.cfg.Name, "SWARM_SESSION_ID="+r.seq.id)
	if r.tree.wt.Path != "" {
		// Where `swarmd task done` reads the commit it freezes.
		env = append(env, "SWARM_WORKTREE="+r.tree.wt.Path)
	}
	return env
}

// setSpecEnv gives a session's spec its environment's layers; the backend
// merges them (with its own env) as env does for a hook.
func (r *Runner) setSpecEnv(spec *backend.Spec) {
	spec.Env, spec.Defaults, spec.PathPrepend = r.sessionEnv(), r.cfg.DefaultEnv, r.cfg.PathPrepend
}

// env is the whole environment of a hook: the daemon's, the default env,
// the configured env and the SWARM_* variables, each key once, swarmd's
// directory first in PATH (as in a session, whose backend adds its own env
// between the default and the configured one).
func (r *Runner) env() []string {
	return environ.Build(r.cfg.PathPrepend, os.Environ(), r.cfg.DefaultEnv, r.sessionEnv())
}
