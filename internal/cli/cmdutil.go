package cli

// What the commands that act in swarm.db (mail, task) share: their common
// flags, who calls, finding and opening swarm.db, a body read from standard
// input, waiting on a busy store, and JSON for scripts.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
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
				return caller{}, usagef("%s: %s", cmd, daemon.ForeignAgentID(claimed, agent))
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
	// borrowed: DB is the daemon's (Streams.store), which Close leaves open.
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
func openSwarmDB(ctx context.Context, s Streams, configPath, cmd string) (*swarmDB, error) {
	return openSwarmDBWaiting(ctx, s, configPath, cmd, 0)
}

// openSwarmDBWaiting is openSwarmDB, retrying for up to wait an open that
// found the store's server away (a PostgreSQL restart), as waitStore
// retries the writes themselves.
func openSwarmDBWaiting(ctx context.Context, s Streams, configPath, cmd string, wait time.Duration) (*swarmDB, error) {
	var out swarmDB
	var opts mailbox.Options
	getenv := s.Getenv
	path := getenv("SWARM_DB_PATH")
	if path != "" {
		if names := getenv("SWARM_AGENTS"); names != "" {
			opts.Agents = strings.Split(names, ",")
		}
		if s.Store != nil {
			// Not opened again: the daemon dropped the store's password
			// from its environment once its own store had read it.
			opts.MaxBodyBytes = s.MailMaxBody
			out.DB, out.mail, out.agents, out.borrowed = s.Store, opts, opts.Agents, true
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
	db, err := openWaiting(ctx, path, store.Options{NoCreate: noCreate}, wait, cmd)
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

// dbOptions are the flags every command that acts in swarm.db takes (mail,
// task), and the streams it runs with.
type dbOptions struct {
	IO         Streams
	ConfigPath string // used when SWARM_DB_PATH is not set
	JSON       bool
	StoreWait  time.Duration
}

// addFlags adds the persistent flags of a command group; jsonHelp says
// what --json prints.
func (o *dbOptions) addFlags(cmd *cobra.Command, jsonHelp string) {
	pf := cmd.PersistentFlags()
	pf.StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file (used when SWARM_DB_PATH is not set)")
	pf.BoolVar(&o.JSON, "json", false, jsonHelp)
	o.StoreWait = defaultStoreWait
	pf.Var(positiveDuration{&o.StoreWait}, "store-wait", "how long to keep retrying a write the store refuses as busy or unreachable (and its opening, while its server is unreachable) before giving up, saying whether anything may have been recorded (one try may wait up to 10s for SQLite's lock)")
}

// knownToSwarm refuses, for cmd, an agent name that cfg does not have and
// of which the store has recorded nothing (recorded: a removed agent's
// history, or the merge queue's under its name, is still read): a typo
// would print an empty list, as if the agent had done nothing. ""
// (every agent) passes.
func knownToSwarm(ctx context.Context, cfg *config.Config, name, cmd string, recorded func(context.Context) (bool, error)) error {
	if name == "" {
		return nil
	}
	if _, ok := cfg.Agent(name); ok {
		return nil
	}
	ok, err := recorded(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	if ok {
		return nil
	}
	return usagef("%s: no agent %q (agents: %s)", cmd, name, strings.Join(cfg.AgentNames(), ", "))
}

// positiveDuration is a flag's duration that must be more than 0 (a wait
// of none would give up before the first try).
type positiveDuration struct{ d *time.Duration }

func (p positiveDuration) String() string {
	if p.d == nil {
		return ""
	}
	return p.d.String()
}

func (p positiveDuration) Type() string { return "duration" }

func (p positiveDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d <= 0 {
		return fmt.Errorf("want a positive duration, like 30s or 2m")
	}
	*p.d = d
	return nil
}

// whoCalls is who runs the command (whoCalls); cmd names it in errors.
func (o *dbOptions) whoCalls(cmd string) (caller, error) { return whoCalls(o.IO.Getenv, cmd) }

// open finds and opens swarm.db for cmd (openSwarmDB).
func (o *dbOptions) open(ctx context.Context, cmd string) (*swarmDB, error) {
	return openSwarmDBWaiting(ctx, o.IO, o.ConfigPath, cmd, o.StoreWait)
}

// openWaiting opens the store at path, trying again while its server is
// unreachable (store.Unreachable), for up to wait.
func openWaiting(ctx context.Context, path string, opts store.Options, wait time.Duration, cmd string) (*store.DB, error) {
	b := newBackoff(wait)
	for {
		db, err := store.Open(ctx, path, opts)
		if err == nil || !store.Unreachable(err) || wait <= 0 {
			return db, err
		}
		if !b.pause(ctx) {
			return nil, fmt.Errorf("%s: the store stayed unreachable for %s (raise --store-wait): nothing was recorded, run it again: %w",
				cmd, wait, err)
		}
	}
}

// backoff spaces a command's tries at the store, 10 ms doubling to 1 s,
// until a deadline.
type backoff struct {
	deadline time.Time
	delay    time.Duration
}

func newBackoff(wait time.Duration) backoff {
	return backoff{deadline: time.Now().Add(wait), delay: 10 * time.Millisecond}
}

// pause waits before the next try; false, at once, when that try would
// come past the deadline, or ctx ended meanwhile.
func (b *backoff) pause(ctx context.Context) bool {
	if time.Now().Add(b.delay).After(b.deadline) || ctx.Err() != nil {
		return false
	}
	t := time.NewTimer(b.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.delay = min(2*b.delay, time.Second)
	return true
}

// printJSON writes v for scripts on the command's standard output.
func (o *dbOptions) printJSON(v any) error { return printJSON(o.IO.Out, v) }

// readStdin reads a body from in: one byte past limit, so that its owner
// refuses an oversize body with its clear error instead of it being cut
// here. cmd names the command in the error.
func readStdin(in io.Reader, limit int64, cmd string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(in, limit+1))
	if err != nil {
		return "", fmt.Errorf("%s: read body from stdin: %w", cmd, err)
	}
	return string(b), nil
}

// printJSON writes v indented, for scripts.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// defaultStoreWait is how long `swarmd task` and `swarmd mail` wait for a
// store that is busy (another client holds its write lock) or away (a
// PostgreSQL server restarting) before they give up, saying so. A session's
// report must not be lost to a lock held for a few seconds, and must never
// be reported done when it was not written.
const defaultStoreWait = 2 * time.Minute

// waitStore runs f until it succeeds, fails for a reason that does not pass
// (the request refused, the database gone), or the store has refused it for
// longer than wait: then the error says that nothing was recorded.
func waitStore(ctx context.Context, db *store.DB, wait time.Duration, op string, f func(context.Context) error) error {
	b := newBackoff(wait)
	// The deadline also cuts short an attempt waiting in SQLite's busy
	// handler.
	ctx, cancel := context.WithDeadline(ctx, b.deadline)
	defer cancel()
	doubt := false // an attempt may have committed unseen (store.InDoubt)
	gaveUp := func(err error) error {
		if doubt {
			// Saying "nothing was recorded" would be a guess: run again,
			// the command could do twice what it did once.
			return fmt.Errorf("%s: the store stayed busy or unreachable for %s (raise --store-wait): an attempt's connection was lost after it was sent, so it may have been recorded: check before running it again: %w",
				op, wait, err)
		}
		return fmt.Errorf("%s: the store stayed busy or unreachable for %s (raise --store-wait): nothing was recorded, run it again: %w",
			op, wait, err)
	}
	for {
		err := f(ctx)
		if err == nil || !db.Transient(err) {
			return err
		}
		doubt = doubt || store.InDoubt(err)
		if !b.pause(ctx) {
			return gaveUp(err)
		}
	}
}

// bodyArg is a BODY argument at args[i]: "-" (standard input) when absent.
func bodyArg(args []string, i int) string {
	if len(args) > i {
		return args[i]
	}
	return "-"
}

// orRun is runF when a test gave one, else the command's own run function.
func orRun[O any](runF, run func(context.Context, O) error) func(context.Context, O) error {
	if runF != nil {
		return runF
	}
	return run
}

// completeFlag registers fn to complete flag, but not in a command the
// daemon runs for a session (io.Store set): cobra keeps completion
// functions in a map of the whole process, which nothing empties, so a
// daemon that built a session's `swarmd task` or `swarmd mail` with them
// kept every one, about 4 KB a command (62% of its live heap in a soak
// run), and a session never asks for a completion there.
func completeFlag(io Streams, cmd *cobra.Command, flag string, fn cobra.CompletionFunc) {
	if io.Store != nil {
		return
	}
	_ = cmd.RegisterFlagCompletionFunc(flag, fn)
}
