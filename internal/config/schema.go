package config

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/store"
)

// agentNameRE is the agent name rule. It also keeps names safe as path
// components (worktrees/<name>, branch swarm/<name>/work).
var agentNameRE = regexp.MustCompile(agent.NamePattern)

// backendNameRE keeps backend names to something that reads well in messages.
var backendNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// reservedNames cannot be agents, for the reason given: "operator" sends mail
// from outside any session; "merge" names the merge queue's gate logs
// (logs/merge/) and its events.
var reservedNames = map[string]string{
	"operator": "it is the mail sender outside any session",
	"merge":    "it names the merge queue's gate logs and events",
	"task":     "its branch would clash with the tasks' branches (swarm/task/N)",
}

var backendTypes = []string{TypeClaude, TypeCodex, TypeGemini, TypeCommand, TypeScripted}

// cancelSignals are the signals a backend may be asked to stop with.
// SIGKILL is not one: it is what force-stop sends after the grace period.
var cancelSignals = []struct {
	name string
	sig  syscall.Signal
}{
	{"SIGINT", syscall.SIGINT},
	{"SIGTERM", syscall.SIGTERM},
	{"SIGHUP", syscall.SIGHUP},
	{"SIGQUIT", syscall.SIGQUIT},
	{"SIGUSR1", syscall.SIGUSR1},
	{"SIGUSR2", syscall.SIGUSR2},
}

// maxSocketPath is sun_path (108 bytes) less its terminating NUL.
const maxSocketPath = 107

type rawAgent struct {
	path     string
	line     int
	set      keySet
	name     string
	role     string
	settings AgentSettings // only the keys in set are overrides
}

type rawBackend struct {
	name, path string
	line       int
	set        keySet
	typ        string
	b          Backend
}

// topValues are the top-level values that decode finishes after the walk.
type topValues struct {
	repo, stateDir string
	defaultsSet    keySet
	backends       []*rawBackend
	agents         []*rawAgent
	merge          mergeValues
}

// topFields is the top level of swarmd.yaml. It and the field lists it
// reaches are the one description of the file: decode walks them and
// JSONSchema renders them.
func (d *decoder) topFields(cfg *Config, t *topValues) []field {
	t.repo, t.stateDir = DefaultRepo, DefaultStateDir
	return []field{
		{"repo", "The git repository the agents work on; relative to this file's directory.", d.strTo(&t.repo, true)},
		{"state_dir", "swarmd's state (mailbox, logs, worktrees, control socket); relative to repo.", d.strTo(&t.stateDir, true)},
		{"base_ref", "What new agent branches start from: any git revision.", d.strTo(&cfg.BaseRef, false)},
		{"listen", `host:port of /metrics, /healthz and /readyz; "" turns the listener off.`, d.strTo(&cfg.Listen, false)},
		{"store", `Where the swarm's shared state lives: absent or "" for STATE_DIR/swarm.db (SQLite); a postgres:// URL, without a password (a passfile, ~/.pgpass, or the systemd credential pgpass gives it), for one swarm across several daemons.`, d.strTo(&cfg.Store, false)},
		{"lease_timeout", "With a shared store: how long a daemon's hold on its agents outlives its last heartbeat.", d.durTo(&cfg.LeaseTimeout, false)},
		{"remote", `The git remote (a name of repo's remotes, or a URL) each agent's branch is pushed to after a session that made commits; "" for none.`, d.strTo(&cfg.Remote, false)},
		{"defaults", "Settings every agent inherits; an agent may override each one.", d.section(d.settingsFields(&cfg.Defaults, false), &t.defaultsSet)},
		{"logs", "Archives of session logs, made when an agent stops and every rotate_sessions sessions while it runs.", d.section([]field{
			{"keep_archives", "Archives kept per agent.", d.intTo(&cfg.Logs.KeepArchives, 1, maxInt)},
			{"rotate_sessions", "A running agent's ended sessions are archived each time this many have ended; 0 archives them only when the agent stops.",
				d.intTo(&cfg.Logs.RotateSessions, 0, maxInt)},
			{"max_age", "Archives older than this are deleted.", d.durTo(&cfg.Logs.MaxAge, false)},
			{"max_session_bytes", "Most output bytes written to one session's log; the rest is dropped, and one line in the log says how much.",
				d.intTo(&cfg.Logs.MaxSessionBytes, 1, maxInt)},
		}, nil)},
		{"hooks", "Shell commands run at lifecycle points, in the agent's worktree.", d.section([]field{
			{"agent_start", "Run once per agent run, before its first session.", d.strListTo(&cfg.Hooks.AgentStart, true)},
			{"session_start", "Run before each session; exit status 2 blocks that session.", d.strListTo(&cfg.Hooks.SessionStart, true)},
			{"session_end", "Run after each session.", d.strListTo(&cfg.Hooks.SessionEnd, true)},
			{"agent_stopped", "Run once when the agent stops.", d.strListTo(&cfg.Hooks.AgentStopped, true)},
			{"timeout", "Each hook run is killed after this long.", d.durTo(&cfg.Hooks.Timeout, false)},
		}, nil)},
		{"mailbox", "The mailbox, in the store (SQLite or PostgreSQL).", d.section([]field{
			{"max_body", "Longest message body in bytes; longer ones are refused, never cut.", d.intTo(&cfg.Mailbox.MaxBody, 1, maxInt)},
		}, nil)},
		{"history", "What the swarm keeps of its past in the store: the event log's agent events and the tool audit.", d.section([]field{
			{"max_age", "Agent events and tool calls older than this are deleted (hourly); 0 keeps them all. A task's events are kept.", d.durTo(&cfg.History.MaxAge, true)},
		}, nil)},
		{"maintenance", "The daemon's own upkeep of the repository: git gc --auto, bounded, when git's threshold is passed.", d.section([]field{
			{"gc", "Whether the daemon runs git gc --auto itself; false leaves it to the operator's timer.", d.boolTo(&cfg.Maintenance.GC)},
			{"loose_objects", "git gc runs once the loose objects pass this many (git's gc.auto estimate).", d.intTo(&cfg.Maintenance.LooseObjects, 1, maxInt)},
			{"packs", "Or once the packs pass this many (git's gc.autoPackLimit).", d.intTo(&cfg.Maintenance.Packs, 1, maxInt)},
			{"every", "How often that is checked.", d.durTo(&cfg.Maintenance.Every, false)},
			{"timeout", "One run of git gc is ended, whole, after this long.", d.durTo(&cfg.Maintenance.Timeout, false)},
		}, nil)},
		{"limits", "Admission: how many sessions may run at once, so that the swarm stays within the host; an agent over them waits for a slot (status shows why).",
			d.section(d.limitsFields(&cfg.Limits), nil)},
		{"isolation", "How sessions, hooks and merge gates are contained: auto uses what this host offers (a cgroup v2 per process tree; a bubblewrap sandbox per session, where bwrap is installed) and says what is missing; strict refuses to start without both, or with agents that share a writable HOME (theirs or the daemon's); off uses process groups and markers only.",
			d.enumTo(&cfg.Isolation, isolationLevels)},
		{"sandbox", "What every session's sandbox sees beyond its worktree, its HOME, a private /tmp and the read-only rest (the state directory is never there).", d.section([]field{
			{"bwrap", "The bubblewrap binary: a name looked up in PATH, or a path.", d.strTo(&cfg.Sandbox.Bwrap, true)},
			{"writable", "Absolute paths of existing directories sessions and hooks may write (a shared build cache); a merge gate run gets an empty one of its own at each.", d.strListTo(&cfg.Sandbox.Writable, true)},
			{"readable", "Absolute paths under /tmp, /run or /var/tmp sessions may read (the rest of them is private to each session; a socket there can be connected to).", d.strListTo(&cfg.Sandbox.ReadOnly, true)},
		}, nil)},
		{"stall_after", "swarmd status shows a Running session as stalled after this long without output.", d.durTo(&cfg.StallAfter, false)},
		{"git_email_domain", "Agents commit as \"AGENT (swarmd)\" <AGENT@this domain> unless their env sets GIT_AUTHOR_*/GIT_COMMITTER_*.",
			d.strTo(&cfg.GitEmailDomain, true)},
		{"web", "The web dashboard and its JSON API, served on listen.", d.section([]field{
			{"token", "Bearer token that unlocks the dashboard's actions (stop, start, mail, tasks); \"\" keeps it read-only. At least 16 characters.",
				d.tokenTo(&cfg.Web.Token)},
		}, nil)},
		{"notify", "How the operator is told of what needs a person (an agent stopped for good, a task failed past its limits, a budget exhausted, the daemon unhealthy).", d.section([]field{
			{"webhook", "An http:// or https:// URL that gets one POST per event that needs a person; \"\" sends nothing.", d.webhookTo(&cfg.Notify.Webhook)},
			{"format", "The POST's body: json (swarmd's object), slack (an incoming webhook's text) or ntfy (a topic URL's message).", d.enumTo(&cfg.Notify.Format, notifyFormats)},
		}, nil)},
		{"merge", "The merge queue: integrates finished tasks' branches into one branch when the gate passes; absent: no queue.",
			d.section(d.mergeFields(&t.merge.m), &t.merge.set)},
		{"backends", "Named ways to run a session. claude, codex and gemini are built in; an entry named after one adjusts it.", d.backendsTo(&t.backends)},
		{"agents", "The agents; at least one.", d.agentsTo(&t.agents)},
		{"swarm_budget", "A spending limit for all agents together; at 100% every agent is paused until the window rolls over or swarmd budget set --swarm raises it.",
			d.section(d.budgetFields(&cfg.SwarmBudget, true), nil)},
		{"prices", "USD per million tokens by model, for backends that report no cost (Codex, Gemini CLI); \"*\" is any other model.", d.pricesTo(&cfg.Prices)},
		{"providers", "The health shared by the agents of one provider and credentials.", d.section(d.providersFields(&cfg.Providers), nil)},
	}
}

// decode walks the document and returns the config; problems are in d.errs.
func (d *decoder) decode(data []byte) *Config {
	cfg := defaultConfig()
	root, ok := d.parse(data)
	if !ok {
		return cfg
	}
	var t topValues
	fields := d.topFields(cfg, &t)
	top := keySet{}
	if root != nil {
		top = d.mapping(root, "", fields)
	}

	d.paths(cfg, t.repo, t.stateDir, top)
	d.checkListen(cfg.Listen, top.at("listen"))
	d.checkStore(cfg.Store, top.at("store"))
	if cfg.LeaseTimeout < minLeaseTimeout {
		d.errorf(top.at("lease_timeout"), "lease_timeout", "%s is too short: a daemon renews its leases every third of it; at least %s",
			FormatDuration(cfg.LeaseTimeout), FormatDuration(minLeaseTimeout))
	}
	d.checkBaseRef(cfg.BaseRef, top.at("base_ref"))
	d.checkDomain(cfg.GitEmailDomain, top.at("git_email_domain"))
	d.checkSandbox(cfg, top)
	if !slices.Contains(notifyFormats, cfg.Notify.Format) {
		d.errorf(top.at("notify"), "notify.format", "%q is not a format (want one of %s)", cfg.Notify.Format, strings.Join(notifyFormats, ", "))
	}
	if !slices.Contains(isolationLevels, cfg.Isolation) {
		d.errorf(top.at("isolation"), "isolation", "%q is not an isolation level (want one of %s)", cfg.Isolation, strings.Join(isolationLevels, ", "))
	}
	d.finishMerge(cfg, &t.merge, top.at("merge"))
	raws := map[string]*rawBackend{}
	for _, rb := range t.backends {
		raws[rb.name] = rb
		if b, ok := d.finishBackend(rb); ok {
			cfg.Backends[b.Name] = b
		} else {
			d.broken[rb.name] = true
		}
	}
	if line, ok := t.defaultsSet.line("backend"); ok {
		d.checkBackendRef(cfg, cfg.Defaults.Backend, line, "defaults.backend")
	}
	if len(t.agents) == 0 && !(top.present("agents") && top.at("agents") == 0) {
		d.errorf(top.at("agents"), "agents", "at least one agent is required (list them under agents:, each with a name and a role)")
	}
	good := d.finishAgents(cfg, t.agents)
	d.checkSignals(cfg, good, t.defaultsSet)
	d.finishLimits(cfg, top, good)
	if d.opts.LookPath != nil {
		d.checkBinaries(cfg, good, raws, t.defaultsSet)
	}
	d.warnListen(cfg.Listen, top.at("listen"), cfg.Web.Token != "")
	return cfg
}

// settingsFields are the keys shared by `defaults` and each agent; agent
// says which of the two the descriptions are for.
func (d *decoder) settingsFields(s *AgentSettings, agent bool) []field {
	doc := func(def, own string) string {
		if agent {
			return own
		}
		return def
	}
	return []field{
		{"backend", doc("Backend of every agent: claude, codex, gemini or a name under backends.",
			"This agent's backend (overrides defaults.backend)."), d.strTo(&s.Backend, true)},
		{"session_timeout", doc("A session still running after this long is cancelled and ends as a Timeout.",
			"This agent's session timeout (overrides defaults.session_timeout)."), d.durTo(&s.SessionTimeout, false)},
		{"grace_period", doc("A cancelled session is killed (SIGKILL) after this long.",
			"This agent's grace period (overrides defaults.grace_period)."), d.durTo(&s.GracePeriod, false)},
		{"max_consecutive_errors", doc("The agent stops after this many failed sessions in a row.",
			"Overrides defaults.max_consecutive_errors."), d.intTo(&s.MaxConsecutiveErrors, 1, maxInt)},
		{"max_total_errors", doc("The agent stops after this many failed sessions in all.",
			"Overrides defaults.max_total_errors."), d.intTo(&s.MaxTotalErrors, 1, maxInt)},
		{"env", doc("Extra environment of every session; SWARM_* names are set by swarmd.",
			"Extra environment of this agent's sessions, merged over defaults.env (this agent's values win)."), d.envTo(&s.Env)},
		{"allow_control", doc("Let agents' sessions stop and start other agents through the control socket (default: only the operator may).",
			"Let this agent's sessions stop and start other agents (overrides defaults.allow_control)."), d.boolTo(&s.AllowControl)},
		{"min_session_interval", doc("Least time between two session starts of an agent (0s: none); bounds a backend that exits at once.",
			"Overrides defaults.min_session_interval."), d.durTo(&s.MinSessionInterval, true)},
		{"max_sessions", doc("An agent stops (reason max_sessions) after this many sessions in one daemon run; 0: no limit.",
			"Overrides defaults.max_sessions."), d.intTo(&s.MaxSessions, 0, maxInt)},
		{"reviewer", doc("An agent that reviews every agent's finished tasks before they close (the review loop): its PASS closes a task, its FAIL sends it back to its worker. \"\": none.",
			"The agent that reviews this agent's finished tasks (overrides defaults.reviewer)."), d.strTo(&s.Reviewer, false)},
		{"max_iterations", doc("Review rounds a task may take: past this many FAIL verdicts it fails (reason max_iterations).",
			"Overrides defaults.max_iterations."), d.intTo(&s.MaxIterations, 1, maxInt)},
		{"max_silent_sessions", doc("An agent is held (paused by swarmd, with the reason; `swarmd resume` lets it go) once this many sessions in a row ended without DONE, PASS or FAIL while it held a task or a review; 0: never.",
			"Overrides defaults.max_silent_sessions."), d.intTo(&s.MaxSilentSessions, 0, maxInt)},
		{"claims", doc("Whether agents claim unassigned tasks from the board (a task assigned to an agent it always may). Unset: an agent that reviews any agent's tasks claims none, so that it reviews rather than works; every other agent claims.",
			"Overrides defaults.claims: false makes this agent review-only, true lets a reviewer also take work."), d.boolPtrTo(&s.Claims)},
		{"max_turns", doc("A session ends (abort reason max_turns, not an error) after this many model turns; 0: no limit.",
			"Overrides defaults.max_turns."), d.intTo(&s.MaxTurns, 0, maxInt)},
		{"memory_max", doc("Most memory, in bytes, one session's processes may use together; over it the kernel kills them and the session ends oom_killed. Needs isolation with the memory controller delegated (swarmd says at start whether it is); 0: no limit.",
			"Overrides defaults.memory_max."), d.intTo(&s.MemoryMax, 0, maxInt)},
		{"signals", doc("The words a session's final result ends with to report on its task: the last non-empty line is the word, or starts with it and a colon or dash.",
			"This agent's signal words, each overriding the same word of defaults.signals."), d.section([]field{
			{"done", "The task is done (the agent goes idle when it has nothing else to do).", d.wordTo(&s.Signals.Done)},
			{"pass", "A reviewer approves the work.", d.wordTo(&s.Signals.Pass)},
			{"fail", "The task failed, or a reviewer rejects the work.", d.wordTo(&s.Signals.Fail)},
		}, nil)},
		{"tools", doc("Which tools agents' sessions may call: passed to the CLI where it can take it, and enforced from the stream (a refused call stops the session).",
			"This agent's tool policy; each list given replaces the same list of defaults.tools."), d.section(d.toolsFields(&s.Tools), nil)},
		{"budget", doc("A spending limit per agent: at 80% and 95% an event and a note in the prompt, at 100% the session is stopped and the agent paused.",
			"This agent's budget; each key given overrides the same key of defaults.budget."), d.section(d.budgetFields(&s.Budget, false), nil)},
	}
}

// wordTo decodes one signal word: letters, digits, '_' or '-', no spaces.
func (d *decoder) wordTo(dst *string) value {
	v := d.strTo(dst, true)
	check := v.set
	v.set = func(path string, n *yaml.Node) bool {
		if !check(path, n) {
			return false
		}
		for _, r := range *dst {
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '-' {
				d.errorf(n.Line, path, "signal word %q: use letters, digits, '_' or '-' only (a word the agent ends its result with)", *dst)
				*dst = ""
				return false
			}
		}
		if err := review.CheckWord(*dst); err != nil {
			// A leading '_' or '-' is markdown the scan strips from a line.
			d.errorf(n.Line, path, "signal word %q %s (start it with a letter or digit)", *dst, err)
			*dst = ""
			return false
		}
		return true
	}
	return v
}

// optionalStrTo decodes a string that is "" (unset) or passes check, which
// returns what is wrong with it ("" when nothing): the problem is reported
// at the key's line and the value left unset.
func (d *decoder) optionalStrTo(dst *string, check func(string) string) value {
	v := d.strTo(dst, false)
	decode := v.set
	v.set = func(path string, n *yaml.Node) bool {
		if !decode(path, n) {
			return false
		}
		if *dst == "" {
			return true
		}
		if msg := check(*dst); msg != "" {
			d.errorf(n.Line, path, "%s", msg)
			*dst = ""
			return false
		}
		return true
	}
	return v
}

// webhookTo decodes notify.webhook: "" or an absolute http(s) URL.
func (d *decoder) webhookTo(dst *string) value {
	return d.optionalStrTo(dst, func(s string) string {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Sprintf("%q is not an http:// or https:// URL", s)
		}
		return ""
	})
}

// tokenTo decodes web.token: empty (read-only), or a secret of at least
// MinWebTokenLen printable characters without spaces, as it travels in an
// Authorization header.
func (d *decoder) tokenTo(dst *string) value {
	return d.optionalStrTo(dst, func(s string) string {
		if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
			return "must be printable ASCII without spaces (it is sent in an Authorization header)"
		}
		if len(s) < MinWebTokenLen {
			return fmt.Sprintf("is %d characters; use at least %d (for example: openssl rand -hex 24)", len(s), MinWebTokenLen)
		}
		return ""
	})
}

// paths resolves repo against the config directory and state_dir against repo.
func (d *decoder) paths(cfg *Config, repo, stateDir string, top keySet) {
	cfg.Repo = filepath.Clean(repo)
	if !filepath.IsAbs(cfg.Repo) {
		cfg.Repo = filepath.Join(d.dir, cfg.Repo)
	}
	d.repo = cfg.Repo
	cfg.StateDir = filepath.Clean(stateDir)
	if !filepath.IsAbs(cfg.StateDir) {
		cfg.StateDir = filepath.Join(cfg.Repo, cfg.StateDir)
	}
	switch fi, err := os.Stat(cfg.Repo); {
	case errors.Is(err, fs.ErrNotExist):
		d.errorf(top.at("repo"), "repo", "directory %s does not exist", cfg.Repo)
	case err != nil:
		d.errorf(top.at("repo"), "repo", "%s: %v", cfg.Repo, unwrapPath(err))
	case !fi.IsDir():
		d.errorf(top.at("repo"), "repo", "%s is not a directory", cfg.Repo)
	}
	if sock := cfg.SocketPath(); len(sock) > maxSocketPath {
		d.errorf(top.at("state_dir"), "state_dir", "the control socket path %s is %d bytes, over the %d-byte limit for unix sockets; use a shorter state_dir",
			sock, len(sock), maxSocketPath)
	}
}

// checkSandbox: sandbox paths are absolute existing directories, and never
// the state directory or anything in it.
func (d *decoder) checkSandbox(cfg *Config, top keySet) {
	for _, l := range []struct {
		key   string
		paths []string
	}{{"writable", cfg.Sandbox.Writable}, {"readable", cfg.Sandbox.ReadOnly}} {
		for _, p := range l.paths {
			key := "sandbox." + l.key
			switch fi, err := os.Stat(p); {
			case !filepath.IsAbs(p):
				d.errorf(top.at("sandbox"), key, "%q is not an absolute path", p)
			case err != nil:
				d.errorf(top.at("sandbox"), key, "%s: %v", p, unwrapPath(err))
			case !fi.IsDir():
				d.errorf(top.at("sandbox"), key, "%s is not a directory", p)
			case within(filepath.Clean(p), cfg.StateDir) || within(cfg.StateDir, filepath.Clean(p)):
				d.errorf(top.at("sandbox"), key, "%s overlaps the state directory %s, which no session may see", p, cfg.StateDir)
			}
		}
	}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// minLeaseTimeout keeps the lease heartbeat (a third of lease_timeout)
// from spinning.
const minLeaseTimeout = 300 * time.Millisecond

// checkStore refuses a store that is neither SQLite's default nor a
// postgres:// URL, and a URL that carries a password: the config file is
// not where secrets go.
func (d *decoder) checkStore(target string, line int) {
	if target == "" {
		return
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		d.errorf(line, "store", "%q is not a postgres:// URL (leave store out for the SQLite file in state_dir)", store.Redact(target))
		return
	}
	if _, has := u.User.Password(); has || u.Query().Has("password") {
		d.errorf(line, "store", "the URL carries a password: put it in a passfile (~/.pgpass) or the systemd credential pgpass (LoadCredential=pgpass:FILE), not in the config file")
	}
}

func (d *decoder) checkListen(listen string, line int) {
	if listen == "" {
		return
	}
	_, port, err := net.SplitHostPort(listen)
	if err == nil {
		var n int
		n, err = strconv.Atoi(port)
		if err == nil && (n < 0 || n > 65535) {
			err = strconv.ErrRange
		}
	}
	if err != nil {
		d.errorf(line, "listen", "%q is not host:port such as 127.0.0.1:9464 (\"\" disables the listener)", listen)
	}
}

// checkDomain refuses a git_email_domain that would not make AGENT@DOMAIN an
// address git accepts as it is: no "@", "<", ">" or spaces.
func (d *decoder) checkDomain(domain string, line int) {
	if domain == "" || strings.ContainsAny(domain, "@<>") ||
		strings.IndexFunc(domain, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		d.errorf(line, "git_email_domain", "%q is not a domain such as example.com (no @, <, > or spaces)", domain)
	}
}

// checkBaseRef refuses what git would misread: a leading "-" is an option.
func (d *decoder) checkBaseRef(ref string, line int) {
	switch {
	case ref == "":
		d.errorf(line, "base_ref", "must not be empty (default %s)", DefaultBaseRef)
	case strings.HasPrefix(ref, "-"):
		d.errorf(line, "base_ref", "%q must not start with \"-\" (name a branch, tag or commit)", ref)
	case strings.IndexFunc(ref, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		d.errorf(line, "base_ref", "%q is not a git revision (it contains spaces or control characters)", ref)
	}
}

func (d *decoder) checkBackendRef(cfg *Config, name string, line int, key string) bool {
	if _, ok := cfg.Backends[name]; ok {
		return true
	}
	if d.broken[name] {
		return false // its own problem is reported; "unknown backend" would mislead
	}
	known := slices.Sorted(maps.Keys(cfg.Backends))
	d.errorf(line, key, "%q is not a configured backend (known: %s)", name, strings.Join(known, ", "))
	return false
}

// backendsTo reads the backends mapping: name -> backend.
func (d *decoder) backendsTo(dst *[]*rawBackend) value {
	entry := objectSchema(d.backendFields(&rawBackend{}))
	entry.Type = []string{"object", "null"} // `claude:` alone keeps the built-in
	sch := &schemaNode{Type: []string{"object"}, Values: entry, KeyRE: backendNameRE.String()}
	return value{func(p string, v *yaml.Node) bool { *dst = d.backends(v, p); return true }, sch}
}

func (d *decoder) backendFields(rb *rawBackend) []field {
	b := &rb.b
	return []field{
		{"type", "claude, codex, gemini, command or scripted; only a backend named after a type may omit it.", d.enumTo(&rb.typ, backendTypes)},
		{"command", "The program: a name looked up in PATH, or a path. Default: the type's CLI (claude, codex, gemini).", d.strTo(&b.Command, true)},
		{"args", "Arguments appended to swarmd's own invocation of the CLI (command: the whole argument list).", d.strListTo(&b.Args, false)},
		{"model", "The model the CLI uses (claude, codex, gemini only); the CLI's default when unset.", d.strTo(&b.Model, true)},
		{"allowed_tools", "Claude Code's --allowedTools (claude only).", d.strListTo(&b.AllowedTools, true)},
		{"cancel_signal", "The signal that cancels a session: SIGINT for claude and codex, SIGTERM otherwise.", d.signalTo(&b.CancelSignal)},
		{"env", "Extra environment of this backend's sessions (an agent's env wins over it).", d.envTo(&b.Env)},
		{"steps", "What each session of a scripted (test and demo) backend does, in turn.", d.stepsTo(&b.Steps)},
	}
}

func (d *decoder) backends(v *yaml.Node, path string) []*rawBackend {
	var out []*rawBackend
	for _, e := range d.entries(v, path, 0) {
		name := e.k.Value
		rb := &rawBackend{name: name, path: join(path, name), line: e.k.Line, set: keySet{}}
		rb.b.Env = map[string]string{}
		if !backendNameRE.MatchString(name) {
			d.errorf(e.k.Line, rb.path, "%q is not a valid backend name (want %s)", name, backendNameRE)
			d.broken[name] = true
			continue
		}
		val, ok := d.resolve(e.v)
		if !ok {
			continue
		}
		if !isNull(val) { // `claude:` alone keeps the built-in as it is
			rb.set = d.mapping(val, rb.path, d.backendFields(rb))
		}
		out = append(out, rb)
	}
	return out
}

// enumTo reads a string that the schema lists the values of; the caller
// checks it, with a message that fits.
func (d *decoder) enumTo(dst *string, values []string) value {
	v := d.strTo(dst, true)
	v.schema.Pattern, v.schema.Enum = "", values
	return v
}

// signalTo reads a cancel signal; finishBackend checks it.
func (d *decoder) signalTo(dst *string) value {
	v := d.strTo(dst, true)
	v.schema.Pattern = signalPattern()
	return v
}

func (d *decoder) stepsTo(dst *[]ScriptStep) value {
	item := objectSchema(d.stepFields(&ScriptStep{}))
	item.Type = []string{"object"}
	sch := &schemaNode{Type: []string{"array"}, Items: item, MinItems: 1}
	return value{func(p string, v *yaml.Node) bool { *dst = d.steps(v, p); return *dst != nil }, sch}
}

func (d *decoder) stepFields(s *ScriptStep) []field {
	return []field{
		{"print", "Lines written to stdout.", d.strListTo(&s.Print, false)},
		{"print_every", "Pause between printed lines; unset prints them at once.", d.durTo(&s.PrintEvery, false)},
		{"sleep", "How long the step then sleeps.", d.durTo(&s.Sleep, true)},
		{"exit", "Exit code; the success record is printed first when it is 0 (unless no_result).", d.intTo(&s.Exit, 0, 255)},
		{"ignore_signals", "Ignore SIGINT and SIGTERM, so that a cancel must force-stop the session.", d.boolTo(&s.IgnoreSignals)},
		{"setsid_child", "Start a child in a new session first, as an agent CLI's tool shell would.", d.boolTo(&s.SetsidChild)},
		{"no_result", "Print no success record, so exit 0 alone is not a success.", d.boolTo(&s.NoResult)},
	}
}

func (d *decoder) steps(v *yaml.Node, path string) []ScriptStep {
	if v.Kind != yaml.SequenceNode {
		d.errorf(v.Line, path, "want a list of steps, got %s", describe(v))
		return nil
	}
	steps := make([]ScriptStep, 0, len(v.Content))
	for i, item := range v.Content {
		item, ok := d.resolve(item)
		if !ok {
			continue
		}
		var s ScriptStep
		d.mapping(item, index(path, i), d.stepFields(&s))
		steps = append(steps, s)
	}
	return steps
}

// finishBackend applies the type's defaults and checks which keys apply.
func (d *decoder) finishBackend(rb *rawBackend) (Backend, bool) {
	typ := rb.typ
	if rb.set.present("type") {
		line, valid := rb.set.line("type")
		if !valid {
			return Backend{}, false
		}
		if !slices.Contains(backendTypes, typ) {
			d.errorf(line, join(rb.path, "type"), "%q is not a backend type (known: %s)", typ, strings.Join(backendTypes, ", "))
			return Backend{}, false
		}
	} else if slices.Contains(backendTypes, rb.name) {
		typ = rb.name
	} else {
		d.errorf(rb.line, rb.path, "needs a type (one of %s): only a backend named after a type may omit it", strings.Join(backendTypes, ", "))
		return Backend{}, false
	}

	b := builtinBackend(typ)
	b.Name = rb.name
	ok := true
	notFor := func(key, applies string) {
		if line, set := rb.set.line(key); set {
			d.errorf(line, join(rb.path, key), "does not apply to a %s backend (only to %s)", typ, applies)
			ok = false
		}
	}
	agentCLI := typ == TypeClaude || typ == TypeCodex || typ == TypeGemini
	if !agentCLI {
		notFor("model", "claude, codex and gemini")
	}
	if typ != TypeClaude {
		notFor("allowed_tools", "claude")
	}
	if typ == TypeScripted {
		notFor("command", "claude, codex, gemini and command")
		notFor("args", "claude, codex, gemini and command")
	} else {
		notFor("steps", "scripted")
	}
	if _, set := rb.set.line("command"); set {
		b.Command = rb.b.Command
	} else if typ == TypeCommand && !rb.set.present("command") {
		d.errorf(rb.line, rb.path, "a command backend needs a command (add command: PROGRAM)")
		ok = false
	}
	if line, set := rb.set.line("steps"); set && len(rb.b.Steps) == 0 && typ == TypeScripted {
		d.errorf(line, join(rb.path, "steps"), "a scripted backend needs at least one step (add one under steps:)")
		ok = false
	} else if !rb.set.present("steps") && typ == TypeScripted {
		d.errorf(rb.line, rb.path, "a scripted backend needs steps (add steps: with at least one step)")
		ok = false
	}
	if line, set := rb.set.line("cancel_signal"); set {
		sig, good := canonicalSignal(rb.b.CancelSignal)
		switch {
		case good:
			b.CancelSignal = sig
		case sig == "SIGKILL":
			d.errorf(line, join(rb.path, "cancel_signal"), "SIGKILL cannot cancel gracefully: force-stop sends it after grace_period")
			ok = false
		default:
			names := make([]string, len(cancelSignals))
			for i, s := range cancelSignals {
				names[i] = s.name
			}
			d.errorf(line, join(rb.path, "cancel_signal"), "%q is not a supported signal (want one of %s)", rb.b.CancelSignal, strings.Join(names, ", "))
			ok = false
		}
	}
	b.Args, b.Model, b.AllowedTools, b.Env, b.Steps = rb.b.Args, rb.b.Model, rb.b.AllowedTools, rb.b.Env, rb.b.Steps
	return b, ok
}

// canonicalSignal accepts "SIGINT", "sigint" and "INT".
func canonicalSignal(s string) (string, bool) {
	s = strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	for _, c := range cancelSignals {
		if c.name == s {
			return s, true
		}
	}
	return s, false
}

func (d *decoder) agentsTo(dst *[]*rawAgent) value {
	item := objectSchema(d.agentFields(&rawAgent{}))
	item.Type = []string{"object"}
	item.Required = []string{"name", "role"}
	sch := &schemaNode{Type: []string{"array"}, Items: item, MinItems: 1}
	return value{func(p string, v *yaml.Node) bool { *dst = d.agents(v, p); return *dst != nil }, sch}
}

func (d *decoder) agentFields(ra *rawAgent) []field {
	name := d.strTo(&ra.name, false)
	name.schema.Pattern = agentNameRE.String()
	return append([]field{
		{"name", "Lowercase letters, digits and '-', starting with a letter; the agent works on branch swarm/NAME/work.", name},
		{"role", "The agent's standing instructions: a prompt file (relative to this file) or inline text.", d.strTo(&ra.role, false)},
	}, d.settingsFields(&ra.settings, true)...)
}

func (d *decoder) agents(v *yaml.Node, path string) []*rawAgent {
	if v.Kind != yaml.SequenceNode {
		d.errorf(v.Line, path, "want a list of agents, got %s", describe(v))
		return nil
	}
	out := make([]*rawAgent, 0, len(v.Content))
	for i, item := range v.Content {
		item, ok := d.resolve(item)
		if !ok {
			continue
		}
		ra := &rawAgent{path: index(path, i), line: item.Line}
		ra.set = d.mapping(item, ra.path, d.agentFields(ra))
		out = append(out, ra)
	}
	return out
}

// finishAgents resolves each agent and returns the raw form of each one
// added to cfg.Agents, in the same order.
func (d *decoder) finishAgents(cfg *Config, raws []*rawAgent) []*rawAgent {
	var goodRaws []*rawAgent
	firstLine := map[string]int{}
	firstIndex := map[string]string{}
	for _, ra := range raws {
		a := Agent{AgentSettings: merge(cfg.Defaults, ra.settings, ra.set)}
		good := true

		nameLine, validName := ra.set.line("name")
		switch {
		case !ra.set.present("name"):
			d.errorf(ra.line, join(ra.path, "name"), "is required (add name: with a lowercase name)")
			good = false
		case !validName:
			good = false
		case !agentNameRE.MatchString(ra.name):
			d.errorf(nameLine, join(ra.path, "name"), "%q is not a valid agent name (want %s)", ra.name, agentNameRE)
			good = false
		case reservedNames[ra.name] != "":
			d.errorf(nameLine, join(ra.path, "name"), "%q is reserved (%s)", ra.name, reservedNames[ra.name])
			good = false
		default:
			if prev, dup := firstLine[ra.name]; dup {
				d.errorf(nameLine, join(ra.path, "name"), "%q is already the name of %s (line %d)", ra.name, firstIndex[ra.name], prev)
				good = false
			} else {
				firstLine[ra.name], firstIndex[ra.name] = nameLine, ra.path
			}
		}
		a.Name = ra.name

		if roleLine, ok := ra.set.line("role"); ok {
			a.Role, a.RoleFile, ok = d.role(ra.role, roleLine, join(ra.path, "role"))
			good = good && ok
		} else if ra.set.present("role") {
			good = false
		} else {
			d.errorf(ra.line, join(ra.path, "role"), "is required: a prompt file path or inline text")
			good = false
		}

		// An inherited backend was checked once, at defaults.backend.
		if line, ok := ra.set.line("backend"); ok {
			good = d.checkBackendRef(cfg, a.Backend, line, join(ra.path, "backend")) && good
		} else if ra.set.present("backend") {
			good = false
		}
		if good {
			cfg.Agents = append(cfg.Agents, a)
			goodRaws = append(goodRaws, ra)
		}
	}
	d.checkReviewers(cfg, goodRaws)
	return goodRaws
}

// checkSignals: an agent's three signal words, its own over the defaults'
// over DONE/PASS/FAIL, differ, or a result could not say which it meant.
// A clash the defaults make alone is reported once, at defaults.signals.
func (d *decoder) checkSignals(cfg *Config, raws []*rawAgent, defaultsSet keySet) {
	defaultsReported := false
	for i, a := range cfg.Agents {
		words := [3]struct{ key, word string }{
			{"done", cmp.Or(a.Signals.Done, review.DefaultDone)},
			{"pass", cmp.Or(a.Signals.Pass, review.DefaultPass)},
			{"fail", cmp.Or(a.Signals.Fail, review.DefaultFail)},
		}
		for j := range words {
			k := (j + 1) % len(words)
			if words[j].word != words[k].word {
				continue
			}
			line, own := raws[i].set.line("signals")
			key := join(raws[i].path, "signals")
			if !own {
				if defaultsReported {
					break
				}
				defaultsReported = true
				line, key = defaultsSet.at("signals"), "defaults.signals"
			}
			first, second := words[min(j, k)], words[max(j, k)]
			d.errorf(line, key, "%s and %s are both %q: a result could not say which it means (make them differ)", first.key, second.key, first.word)
			break
		}
	}
}

// checkReviewers: a reviewer is one of the agents, and not the agent
// itself (an agent inheriting itself from defaults.reviewer is simply not
// reviewed).
func (d *decoder) checkReviewers(cfg *Config, raws []*rawAgent) {
	names := cfg.AgentNames()
	for i, a := range cfg.Agents {
		if a.Reviewer == "" {
			continue
		}
		line, own := raws[i].set.line("reviewer")
		key := join(raws[i].path, "reviewer")
		if !own {
			line, key = raws[i].line, "defaults.reviewer"
		}
		switch {
		case !slices.Contains(names, a.Reviewer):
			d.errorf(line, key, "%q is not an agent of this config (agents: %s)", a.Reviewer, strings.Join(names, ", "))
		case own && a.Reviewer == a.Name:
			d.errorf(line, key, "agent %s cannot review its own work (name another agent)", a.Name)
		}
	}
}

// merge overlays an agent's overrides (the keys in set) on the defaults.
func merge(base, over AgentSettings, set keySet) AgentSettings {
	out := base
	has := func(k string) bool { _, ok := set.line(k); return ok }
	if has("backend") {
		out.Backend = over.Backend
	}
	if has("session_timeout") {
		out.SessionTimeout = over.SessionTimeout
	}
	if has("grace_period") {
		out.GracePeriod = over.GracePeriod
	}
	if has("max_consecutive_errors") {
		out.MaxConsecutiveErrors = over.MaxConsecutiveErrors
	}
	if has("max_total_errors") {
		out.MaxTotalErrors = over.MaxTotalErrors
	}
	if has("allow_control") {
		out.AllowControl = over.AllowControl
	}
	if has("min_session_interval") {
		out.MinSessionInterval = over.MinSessionInterval
	}
	if has("max_sessions") {
		out.MaxSessions = over.MaxSessions
	}
	if has("reviewer") {
		out.Reviewer = over.Reviewer
	}
	if has("max_iterations") {
		out.MaxIterations = over.MaxIterations
	}
	if has("max_turns") {
		out.MaxTurns = over.MaxTurns
	}
	if has("memory_max") {
		out.MemoryMax = over.MemoryMax
	}
	if has("max_silent_sessions") {
		out.MaxSilentSessions = over.MaxSilentSessions
	}
	if has("claims") {
		out.Claims = over.Claims
	}
	mergeLimits(&out, over)
	out.Signals.Done = cmp.Or(over.Signals.Done, base.Signals.Done)
	out.Signals.Pass = cmp.Or(over.Signals.Pass, base.Signals.Pass)
	out.Signals.Fail = cmp.Or(over.Signals.Fail, base.Signals.Fail)
	out.Env = make(map[string]string, len(base.Env)+len(over.Env))
	maps.Copy(out.Env, base.Env)
	maps.Copy(out.Env, over.Env)
	return out
}

// looksLikePath: one word that has a "/" or a prompt-file extension. Inline
// prompts are sentences, so "Review docs/ and/or fix bugs" stays inline.
func looksLikePath(s string) bool {
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return false
	}
	return strings.Contains(s, "/") || strings.HasSuffix(s, ".md") || strings.HasSuffix(s, ".txt")
}
