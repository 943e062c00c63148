// Package config loads, defaults and validates swarmd.yaml; every key is
// documented in docs/configuration.md.
//
// The YAML is walked as a yaml.Node tree against a fixed schema rather than
// decoded into structs: that gives every problem its key path and line, tells
// an explicit `listen: ""` apart from an absent key, and rejects unknown keys
// at every level. All defaults live in defaultConfig.
//
// Conventions: a key with no value (`listen:`) counts as absent, so its
// default applies; anchors, aliases and `<<:` merge keys work (aliases within
// a budget); every problem is reported, as Errors ordered by line.
package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/gitmaint"
	"github.com/swarmd/swarmd/internal/hooks"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/review"
)

// Backend types. A backend whose name is one of these needs no type key.
const (
	TypeClaude   = "claude"
	TypeCodex    = "codex"
	TypeGemini   = "gemini"
	TypeCommand  = "command"
	TypeScripted = "scripted"
)

// Config is a loaded and validated swarmd.yaml. Paths are absolute.
type Config struct {
	Path     string // absolute path of the config file
	Repo     string // absolute; relative values are relative to the config file's directory
	StateDir string // absolute; relative values are relative to Repo
	BaseRef  string
	Listen   string // "" disables the HTTP listener
	// Store is where the swarm's shared state lives: "" for the SQLite file
	// STATE_DIR/swarm.db, else a postgres:// URL (no password: PGPASSWORD
	// or a passfile supplies it) that several daemons share.
	Store string
	// LeaseTimeout is how long a daemon's hold on its agents' names outlives
	// its last heartbeat: after it, another daemon may take them and the
	// dead daemon's tasks are requeued.
	LeaseTimeout time.Duration
	// Remote is the git remote agents' branches are pushed to after each
	// session that made commits ("" for none): how daemons on other
	// machines, and the merge queue, see their work.
	Remote   string
	Defaults AgentSettings
	Logs     Logs
	Hooks    Hooks
	Mailbox  Mailbox
	// History is what the store keeps of the swarm's past.
	History History
	// Maintenance is the daemon's own upkeep of the repository's objects.
	Maintenance Maintenance
	StallAfter  time.Duration // status marks a Running session stalled after this long without output
	// Isolation is IsolationAuto, IsolationStrict or IsolationOff.
	Isolation string
	// Sandbox are the paths a session's sandbox sees beyond its own.
	Sandbox Sandbox
	// Limits are the swarm's admission limits (zero: none).
	Limits Limits
	// GitEmailDomain is the domain of the email address agents commit
	// with by default: AGENT@GitEmailDomain.
	GitEmailDomain string
	Web            Web
	Notify         Notify
	Merge          *Merge // nil: no merge queue
	Backends       map[string]Backend
	Agents         []Agent
	// SwarmBudget limits all agents' spend together; Prices price the
	// tokens of backends that report no cost, by model; Providers tunes the
	// health shared by the agents of one provider.
	SwarmBudget Budget
	Prices      map[string]Price // never nil
	Providers   Providers
	// Warnings are problems that do not stop the config from loading (a
	// listener open to other machines), ordered by line; nil when none.
	Warnings []*Error
}

// AgentSettings are the per-agent knobs; `defaults` sets them for every agent
// and an agent may override each one.
type AgentSettings struct {
	Backend              string
	SessionTimeout       time.Duration
	GracePeriod          time.Duration
	MaxConsecutiveErrors int
	MaxTotalErrors       int
	Env                  map[string]string // never nil
	// AllowControl lets the agent's sessions stop and start other agents
	// through the control socket; without it they may act only as
	// themselves.
	AllowControl bool
	// MinSessionInterval is the least time between two session starts of
	// an agent (0: none): it bounds a backend that exits at once.
	MinSessionInterval time.Duration
	// MaxSessions stops the agent after this many sessions in one run (0:
	// no limit).
	MaxSessions int
	// Reviewer reviews the agent's finished tasks ("" for none);
	// MaxIterations bounds the review rounds of one task.
	Reviewer      string
	MaxIterations int
	// MaxSilentSessions holds the agent (a pause by swarmd, with the reason)
	// once this many sessions in a row ended, successfully, without a
	// signal while they held a task or a review (0: never): an agent that
	// never reports would otherwise run sessions on it for ever.
	MaxSilentSessions int
	// Claims says whether the agent claims unassigned tasks from the board
	// (tasks assigned to it it always may); nil is the default: an agent
	// that reviews any agent's tasks claims none (see Config.ReviewOnly).
	Claims *bool
	// MaxTurns limits each session's model turns (0: no limit): Claude
	// Code gets --max-turns, Codex and Gemini CLI sessions are counted from
	// their stream and cancelled at the limit (abort reason max_turns).
	MaxTurns int
	// MemoryMax bounds each session's process tree in bytes (0: none),
	// enforced by its cgroup where the memory controller is delegated.
	MemoryMax int
	// Signals are the words a session's result carries to report on its
	// task; "" means the default (DONE, PASS, FAIL).
	Signals Signals
	// Tools is the agent's tool policy; Budget its spending limit.
	Tools  Tools
	Budget Budget
}

// Signals are the configured signal words.
type Signals struct{ Done, Pass, Fail string }

// Agent is one agent with its settings resolved (defaults merged with its
// overrides; env maps merged, the agent's values win).
type Agent struct {
	Name     string
	Role     string // the role prompt text
	RoleFile string // absolute path when Role came from a file, "" when inline
	AgentSettings
}

// Logs configures session logs and their archives.
type Logs struct {
	KeepArchives    int // per agent
	RotateSessions  int // a running agent's ended sessions per archive; 0: archived only at its stop
	MaxAge          time.Duration
	MaxSessionBytes int // output past it is dropped from a session's log (and counted there)
}

// Hooks are shell commands run at lifecycle points.
type Hooks struct {
	AgentStart   []string
	SessionStart []string
	SessionEnd   []string
	AgentStopped []string
	Timeout      time.Duration // per hook run
}

// Web configures the web dashboard and its JSON API on listen.
// Notify is how the operator is told of what needs a person (package
// notify): a webhook, and the shape of what it is sent.
type Notify struct {
	Webhook string // "" sends nothing
	Format  string // NotifyJSON, NotifySlack or NotifyNtfy
}

// The notify.format values.
const (
	NotifyJSON  = "json"
	NotifySlack = "slack"
	NotifyNtfy  = "ntfy"
)

var notifyFormats = []string{NotifyJSON, NotifySlack, NotifyNtfy}

type Web struct {
	// Token, when set, lets requests carrying it as a bearer token change
	// things (stop, start, mail, tasks); "" keeps the dashboard read-only.
	Token string
}

// MinWebTokenLen is the shortest web.token accepted: a bearer token guards
// the swarm's controls, so it must not be guessable.
const MinWebTokenLen = 16

// History configures what the store keeps of the swarm's past (package
// history).
type History struct {
	MaxAge time.Duration // agent events and tool calls older are deleted; 0 keeps all
}

// Maintenance configures the daemon's git gc (package gitmaint).
type Maintenance struct {
	GC           bool          // false: the daemon runs no git gc (the operator's timer does)
	LooseObjects int           // git gc runs past this many loose objects (git's gc.auto estimate)
	Packs        int           // or past this many packs (gc.autoPackLimit)
	Every        time.Duration // how often that is checked
	Timeout      time.Duration // one run is ended, whole, after this long
}

// Mailbox configures the mailbox (in the store: SQLite or PostgreSQL).
type Mailbox struct {
	MaxBody int // bytes; longer bodies are refused
}

// Backend is a named way to run a session.
type Backend struct {
	Name         string
	Type         string // one of the Type* constants
	Command      string // "" for scripted
	Args         []string
	Model        string            // claude, codex, gemini
	AllowedTools []string          // claude
	CancelSignal string            // canonical name such as "SIGINT"
	Env          map[string]string // never nil
	Steps        []ScriptStep      // scripted only
}

// Signal is CancelSignal as a signal number; validation guarantees it is known.
func (b Backend) Signal() syscall.Signal {
	for _, s := range cancelSignals {
		if s.name == b.CancelSignal {
			return s.sig
		}
	}
	return syscall.SIGTERM
}

// ScriptStep is one step of a scripted (test and demo) backend. The
// backend that runs it owns the type; the config only fills it in.
type ScriptStep = backend.ScriptStep

// Defaults of swarmd.yaml (docs/configuration.md). Changing one changes
// what users rely on.
const (
	DefaultRepo                 = "."
	DefaultStateDir             = ".swarm"
	DefaultBaseRef              = "HEAD"
	DefaultListen               = "127.0.0.1:9464"
	DefaultLeaseTimeout         = 30 * time.Second
	DefaultBackend              = TypeClaude
	DefaultSessionTimeout       = 60 * time.Minute
	DefaultGracePeriod          = backend.DefaultGracePeriod             // 10s; the runner fills the same default
	DefaultMaxConsecutiveErrors = int(agent.DefaultMaxConsecutiveErrors) // 5, the machine's
	DefaultMaxTotalErrors       = int(agent.DefaultMaxTotalErrors)       // 20, the machine's
	DefaultKeepArchives         = logs.DefaultKeepArchives               // 10, the log store's
	DefaultMaxAge               = logs.DefaultMaxAge                     // 30 days, the log store's
	DefaultRotateSessions       = logs.DefaultRotateSessions             // 100, the log store's
	DefaultHistoryMaxAge        = 90 * 24 * time.Hour
	DefaultHookTimeout          = hooks.DefaultTimeout        // 30s, the hook runner's
	DefaultMaxBody              = mailbox.DefaultMaxBodyBytes // 64 KiB, the mailbox's
	DefaultStallAfter           = 5 * time.Minute
	DefaultGitEmailDomain       = "swarmd.invalid"
	DefaultMinSessionInterval   = time.Second
	DefaultMaxIterations        = int(review.DefaultMaxIterations) // 3, the review loop's (and the tasks table's column default)
	DefaultMaxSilentSessions    = 3
	DefaultMaxSessionBytes      = 64 << 20
	DefaultGCLooseObjects       = gitmaint.DefaultLooseObjects // 6700, git's gc.auto
	DefaultGCPacks              = gitmaint.DefaultPacks        // 50, git's gc.autoPackLimit
	DefaultGCEvery              = gitmaint.DefaultEvery        // 10m
	DefaultGCTimeout            = gitmaint.DefaultTimeout      // 30m
)

// Sandbox is config key sandbox: host paths every session's sandbox sees
// (absolute, existing), beyond its worktree, HOME and the read-only rest.
type Sandbox struct {
	Bwrap    string   // the bubblewrap binary: a name in PATH or a path
	Writable []string // bound read-write (a shared cache)
	ReadOnly []string // bound read-only: under /tmp, which is private otherwise
}

// Isolation levels (config key isolation).
const (
	IsolationAuto   = "auto"   // use what the host offers, say what is missing
	IsolationStrict = "strict" // refuse to start without it
	IsolationOff    = "off"    // process groups and markers only
)

var isolationLevels = []string{IsolationAuto, IsolationStrict, IsolationOff}

func defaultConfig() *Config {
	c := &Config{
		BaseRef:      DefaultBaseRef,
		Listen:       DefaultListen,
		LeaseTimeout: DefaultLeaseTimeout,
		Isolation:    IsolationAuto,
		Sandbox:      Sandbox{Bwrap: "bwrap"},
		Notify:       Notify{Format: NotifyJSON},
		Defaults: AgentSettings{
			Backend:              DefaultBackend,
			SessionTimeout:       DefaultSessionTimeout,
			GracePeriod:          DefaultGracePeriod,
			MaxConsecutiveErrors: DefaultMaxConsecutiveErrors,
			MaxTotalErrors:       DefaultMaxTotalErrors,
			Env:                  map[string]string{},
			MinSessionInterval:   DefaultMinSessionInterval,
			MaxIterations:        DefaultMaxIterations,
			MaxSilentSessions:    DefaultMaxSilentSessions,
			Budget:               Budget{Window: DefaultBudgetWindow},
		},
		Logs:    Logs{KeepArchives: DefaultKeepArchives, RotateSessions: DefaultRotateSessions, MaxAge: DefaultMaxAge, MaxSessionBytes: DefaultMaxSessionBytes},
		Hooks:   Hooks{Timeout: DefaultHookTimeout},
		Mailbox: Mailbox{MaxBody: DefaultMaxBody},
		History: History{MaxAge: DefaultHistoryMaxAge},
		Maintenance: Maintenance{GC: true, LooseObjects: DefaultGCLooseObjects, Packs: DefaultGCPacks,
			Every: DefaultGCEvery, Timeout: DefaultGCTimeout},
		StallAfter:     DefaultStallAfter,
		GitEmailDomain: DefaultGitEmailDomain,
		Backends:       map[string]Backend{},

		SwarmBudget: Budget{Window: DefaultBudgetWindow},
		Prices:      map[string]Price{},
		Providers:   Providers{Backoff: DefaultProviderBackoff, MaxBackoff: DefaultProviderMaxBackoff},
		Limits:      Limits{DaemonTimerSlack: DefaultDaemonTimerSlack},
	}
	for _, t := range []string{TypeClaude, TypeCodex, TypeGemini} {
		c.Backends[t] = builtinBackend(t)
	}
	return c
}

// builtinBackend is what a backend named after a type starts from.
func builtinBackend(typ string) Backend {
	b := Backend{Name: typ, Type: typ, CancelSignal: defaultCancelSignal(typ), Env: map[string]string{}}
	if typ != TypeScripted && typ != TypeCommand {
		b.Command = typ
	}
	return b
}

// defaultCancelSignal: Claude Code and Codex clean up their tool processes on
// SIGINT; everything else gets the conventional SIGTERM.
func defaultCancelSignal(typ string) string {
	if typ == TypeClaude || typ == TypeCodex {
		return "SIGINT"
	}
	return "SIGTERM"
}

// Load reads and parses the config file at path.
func Load(path string) (*Config, error) { return LoadWith(path, Options{}) }

// LoadWith is Load with the checks of opts.
func LoadWith(path string, opts Options) (*Config, error) {
	if path == "" {
		return nil, Errors{{File: "config", Msg: "the path is empty (-c \"\"): name a file, or leave -c out for ./swarmd.yaml", Err: fs.ErrInvalid}}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = pe.Err.Error() // the path is already in Error.File
		}
		return nil, Errors{{File: path, Msg: "read config: " + msg, Err: err}}
	}
	return ParseWith(data, path, opts)
}

// Parse parses a config whose file is at path: path names the file in error
// messages and relative paths are resolved against its directory. Parse
// reads role files and checks that the repo directory exists. The error is
// always Errors; errors.As(err, new(*Error)) yields the first problem.
func Parse(data []byte, path string) (*Config, error) { return ParseWith(data, path, Options{}) }

// ParseWith is Parse with the checks of opts.
func ParseWith(data []byte, path string, opts Options) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: "resolve config path: " + err.Error(), Err: err}}
	}
	d := &decoder{file: path, dir: filepath.Dir(abs), opts: opts, aliasBudget: maxAliases, broken: map[string]bool{}}
	cfg := d.decode(data)
	if len(d.errs) > 0 {
		return nil, sortByLine(d.errs)
	}
	cfg.Path = abs
	if len(d.warnings) > 0 {
		cfg.Warnings = sortByLine(d.warnings)
	}
	return cfg, nil
}

// Agent returns the agent named name.
// ReviewOnly reports whether agent name claims no unassigned task: its
// claims key says false, or it has none and it reviews some agent's tasks.
// A reviewer that also took work from the board could take the task it is
// to review, or a task nobody then reviews.
func (c *Config) ReviewOnly(name string) bool {
	a, ok := c.Agent(name)
	if !ok {
		return false
	}
	if a.Claims != nil {
		return !*a.Claims
	}
	for _, b := range c.Agents {
		if b.Reviewer == name && b.Name != name {
			return true
		}
	}
	return false
}

func (c *Config) Agent(name string) (Agent, bool) {
	for _, a := range c.Agents {
		if a.Name == name {
			return a, true
		}
	}
	return Agent{}, false
}

// AgentNames returns the agent names in config order.
func (c *Config) AgentNames() []string {
	names := make([]string, len(c.Agents))
	for i, a := range c.Agents {
		names[i] = a.Name
	}
	return names
}

// Files of the state_dir layout (docs/operations.md) that several commands open; logs
// and worktrees are laid out by their own packages.

// DBPath is the mailbox database.
func (c *Config) DBPath() string { return filepath.Join(c.StateDir, "swarm.db") }

// StoreTarget is what store.Open opens: the store URL when the config sets
// one, else the SQLite file DBPath.
func (c *Config) StoreTarget() string {
	if c.Store != "" {
		return c.Store
	}
	return c.DBPath()
}

// SharedStore reports whether the store is a database server that other
// daemons may share (not the local SQLite file).
func (c *Config) SharedStore() bool { return c.Store != "" }

// SocketPath is the control socket.
func (c *Config) SocketPath() string { return filepath.Join(c.StateDir, "swarmd.sock") }
