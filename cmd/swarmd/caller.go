package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
)

// caller is who runs a short-lived command that acts in swarm.db (`swarmd
// mail`, `swarmd task`).
type caller struct {
	name string // an agent, or mailbox.Operator
	// session is the session the command runs in: the tree marker's inside
	// one, else SWARM_SESSION_ID ("" for the operator).
	session string
	// inSession: the process-tree marker proves the command runs in a
	// session of agent name, whatever its environment claims.
	inSession bool
}

func (c caller) isOperator() bool { return c.name == mailbox.Operator }

// actor is how the event log names the caller: "agent:alice" or "operator".
func (c caller) actor() string {
	if c.isOperator() {
		return mailbox.Operator
	}
	return "agent:" + c.name
}

// whoCalls is who acts: inside a session, the session's agent, known from
// the tree marker swarmd put in the session's environment (a SWARM_AGENT_ID
// naming anyone else is refused); outside, SWARM_AGENT_ID or the operator.
// cmd names the command in errors.
func whoCalls(getenv func(string) string, cmd string) (caller, error) {
	claimed := getenv("SWARM_AGENT_ID")
	if c, ok := proc.CallerFromEnv(getenv); ok {
		if agent, ok := runner.AgentOfSession(c.TreeID); ok {
			if claimed != "" && claimed != agent {
				return caller{}, usagef("%s: SWARM_AGENT_ID=%s, but this runs in a session of agent %s: %s from a session acts as its own agent", cmd, claimed, agent, cmd)
			}
			// The tree id is the session id (runner.newSessionID).
			return caller{name: agent, session: c.TreeID, inSession: true}, nil
		}
	}
	if claimed != "" {
		return caller{name: claimed, session: getenv("SWARM_SESSION_ID")}, nil
	}
	return caller{name: mailbox.Operator}, nil
}

// swarmDB is swarm.db as a short-lived command found it.
type swarmDB struct {
	*store.DB
	mail   mailbox.Options // the mail limits and recipients it was found with
	agents []string        // the known agent names; nil when nothing says
	cfg    *config.Config  // the config it was found through; nil inside a session
	// borrowed: DB is the daemon's (streams.store), which Close leaves open.
	borrowed bool
}

// Close closes the store unless it is the daemon's.
func (db *swarmDB) Close() error {
	if db.borrowed {
		return nil
	}
	return db.DB.Close()
}

// openSwarmDB finds swarm.db for cmd: SWARM_DB_PATH inside a session (the
// daemon's open store when it runs the command for a session), else the
// config at configPath, which creates the file if the daemon has not yet.
func openSwarmDB(ctx context.Context, s streams, configPath, cmd string) (*swarmDB, error) {
	var out swarmDB
	var opts mailbox.Options
	getenv := s.getenv
	path := getenv("SWARM_DB_PATH")
	if path != "" {
		if names := getenv("SWARM_AGENTS"); names != "" {
			opts.Agents = strings.Split(names, ",")
		}
		if s.store != nil {
			// Not opened again: the daemon dropped the store's password
			// from its environment once its own store had read it.
			out.DB, out.mail, out.agents, out.borrowed = s.store, opts, opts.Agents, true
			return &out, nil
		}
	} else {
		cfg, err := config.Load(configPath)
		if err != nil {
			return nil, usagef("%s: no SWARM_DB_PATH and %w", cmd, err)
		}
		path, out.cfg = cfg.StoreTarget(), cfg
		opts.Agents = cfg.AgentNames()
		opts.MaxBodyBytes = cfg.Mailbox.MaxBody
	}
	// A SWARM_DB_PATH that leads nowhere is a mistake to report, never a
	// file to create: mail written there would reach nobody.
	noCreate := out.cfg == nil
	if out.cfg != nil && !out.cfg.SharedStore() {
		// The config names the file: before the first `swarmd run` the
		// operator's first task or message creates it where the daemon will
		// look, as the daemon would (mode 0700 for the state dir); never
		// while a daemon runs there (its swarm.db was deleted under it).
		inUse, err := daemon.StateDirInUse(out.cfg.StateDir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		if noCreate = inUse; !inUse {
			if err := os.MkdirAll(out.cfg.StateDir, 0o700); err != nil {
				return nil, fmt.Errorf("%s: create the state dir: %w", cmd, err)
			}
		}
	}
	db, err := store.Open(ctx, path, store.Options{NoCreate: noCreate})
	if err != nil {
		if errors.Is(err, store.ErrNoDatabase) {
			if getenv("SWARM_DB_PATH") != "" {
				// Inside a session the daemon created it: it was deleted.
				return nil, fmt.Errorf("%s: %w: it was deleted under the running daemon, which has stopped starting sessions (tell the operator)", cmd, err)
			}
			return nil, fmt.Errorf("%s: %w: it was deleted under the running daemon, which has stopped starting sessions (restart it)", cmd, err)
		}
		return nil, err
	}
	if out.cfg != nil && out.cfg.SharedStore() {
		// Other daemons run agents this config does not name.
		if opts.Agents, err = daemon.SwarmAgents(ctx, db, out.cfg); err != nil {
			db.Close()
			return nil, err
		}
	}
	out.DB, out.mail, out.agents = db, opts, opts.Agents
	return &out, nil
}

// knownAgent refuses a name that is not one of agents (when they are known).
func knownAgent(agents []string, name, what string) error {
	if agents == nil || slices.Contains(agents, name) {
		return nil
	}
	return usagef("%s: no agent %q (agents: %s)", what, name, strings.Join(agents, ", "))
}
