package config

import (
	"errors"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// agentNameRE is SPEC §3's agent name rule. It also keeps names safe as path
// components (worktrees/<name>, branch swarm/<name>).
var agentNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// backendNameRE keeps backend names to something that reads well in messages.
var backendNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// reservedNames cannot be agents: "operator" is the mail sender outside any
// session (SPEC §2).
var reservedNames = []string{"operator"}

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

// decode walks the document and returns the config; problems are in d.errs.
func (d *decoder) decode(data []byte) *Config {
	cfg := defaultConfig()
	root, ok := d.parse(data)
	if !ok {
		return cfg
	}
	var (
		repo, stateDir = DefaultRepo, DefaultStateDir
		defaultsSet    keySet
		backends       []*rawBackend
		agents         []*rawAgent
		top            = keySet{}
	)
	if root != nil {
		top = d.mapping(root, "", []field{
			{"repo", d.strTo(&repo, true)},
			{"state_dir", d.strTo(&stateDir, true)},
			{"base_ref", d.strTo(&cfg.BaseRef, false)},
			{"listen", d.strTo(&cfg.Listen, false)},
			{"defaults", d.section(d.settingsFields(&cfg.Defaults), &defaultsSet)},
			{"logs", d.section([]field{
				{"keep_archives", d.intTo(&cfg.Logs.KeepArchives, 1, maxInt)},
				{"max_age", d.durTo(&cfg.Logs.MaxAge, false)},
			}, nil)},
			{"hooks", d.section([]field{
				{"agent_start", d.strListTo(&cfg.Hooks.AgentStart, true)},
				{"session_start", d.strListTo(&cfg.Hooks.SessionStart, true)},
				{"session_end", d.strListTo(&cfg.Hooks.SessionEnd, true)},
				{"agent_stopped", d.strListTo(&cfg.Hooks.AgentStopped, true)},
				{"timeout", d.durTo(&cfg.Hooks.Timeout, false)},
			}, nil)},
			{"mailbox", d.section([]field{
				{"max_body", d.intTo(&cfg.Mailbox.MaxBody, 1, maxInt)},
			}, nil)},
			{"stall_after", d.durTo(&cfg.StallAfter, false)},
			{"backends", func(p string, v *yaml.Node) bool { backends = d.backends(v, p); return true }},
			{"agents", func(p string, v *yaml.Node) bool { agents = d.agents(v, p); return agents != nil }},
		})
	}

	d.paths(cfg, repo, stateDir, top)
	d.checkListen(cfg.Listen, top.at("listen"))
	d.checkBaseRef(cfg.BaseRef, top.at("base_ref"))
	for _, rb := range backends {
		if b, ok := d.finishBackend(rb); ok {
			cfg.Backends[b.Name] = b
		} else {
			d.broken[rb.name] = true
		}
	}
	if line, ok := defaultsSet.line("backend"); ok {
		d.checkBackendRef(cfg, cfg.Defaults.Backend, line, "defaults.backend")
	}
	if len(agents) == 0 && !(top.present("agents") && top.at("agents") == 0) {
		d.errorf(top.at("agents"), "agents", "at least one agent is required")
	}
	d.finishAgents(cfg, agents)
	return cfg
}

// settingsFields are the keys shared by `defaults` and each agent.
func (d *decoder) settingsFields(s *AgentSettings) []field {
	return []field{
		{"backend", d.strTo(&s.Backend, true)},
		{"session_timeout", d.durTo(&s.SessionTimeout, false)},
		{"grace_period", d.durTo(&s.GracePeriod, false)},
		{"max_consecutive_errors", d.intTo(&s.MaxConsecutiveErrors, 1, maxInt)},
		{"max_total_errors", d.intTo(&s.MaxTotalErrors, 1, maxInt)},
		{"env", d.envTo(&s.Env)},
	}
}

// paths resolves repo against the config directory and state_dir against repo.
func (d *decoder) paths(cfg *Config, repo, stateDir string, top keySet) {
	cfg.Repo = filepath.Clean(repo)
	if !filepath.IsAbs(cfg.Repo) {
		cfg.Repo = filepath.Join(d.dir, cfg.Repo)
	}
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

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
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

// checkBaseRef refuses what git would misread: a leading "-" is an option.
func (d *decoder) checkBaseRef(ref string, line int) {
	switch {
	case ref == "":
		d.errorf(line, "base_ref", "must not be empty (default %s)", DefaultBaseRef)
	case strings.HasPrefix(ref, "-"):
		d.errorf(line, "base_ref", "%q must not start with \"-\"", ref)
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
			b := &rb.b
			rb.set = d.mapping(val, rb.path, []field{
				{"type", d.strTo(&rb.typ, true)},
				{"command", d.strTo(&b.Command, true)},
				{"args", d.strListTo(&b.Args, false)},
				{"model", d.strTo(&b.Model, true)},
				{"allowed_tools", d.strListTo(&b.AllowedTools, true)},
				{"cancel_signal", d.strTo(&b.CancelSignal, true)},
				{"env", d.envTo(&b.Env)},
				{"steps", func(p string, v *yaml.Node) bool { b.Steps = d.steps(v, p); return b.Steps != nil }},
			})
		}
		out = append(out, rb)
	}
	return out
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
		set := d.mapping(item, index(path, i), []field{
			{"print", d.strListTo(&s.Print, false)},
			{"print_every", d.durTo(&s.PrintEvery, false)},
			{"sleep", d.durTo(&s.Sleep, true)},
			{"exit", d.intTo(&s.Exit, 0, 255)},
			{"ignore_signals", d.boolTo(&s.IgnoreSignals)},
			{"setsid_child", d.boolTo(&s.SetsidChild)},
			{"no_result", d.boolTo(&s.NoResult)},
		})
		_, s.Exits = set.line("exit")
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
		d.errorf(rb.line, rb.path, "a command backend needs a command")
		ok = false
	}
	if line, set := rb.set.line("steps"); set && len(rb.b.Steps) == 0 && typ == TypeScripted {
		d.errorf(line, join(rb.path, "steps"), "a scripted backend needs at least one step")
		ok = false
	} else if !rb.set.present("steps") && typ == TypeScripted {
		d.errorf(rb.line, rb.path, "a scripted backend needs steps")
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
		fields := append([]field{
			{"name", d.strTo(&ra.name, false)},
			{"role", d.strTo(&ra.role, false)},
		}, d.settingsFields(&ra.settings)...)
		ra.set = d.mapping(item, ra.path, fields)
		out = append(out, ra)
	}
	return out
}

func (d *decoder) finishAgents(cfg *Config, raws []*rawAgent) {
	firstLine := map[string]int{}
	firstIndex := map[string]string{}
	for _, ra := range raws {
		a := Agent{AgentSettings: merge(cfg.Defaults, ra.settings, ra.set)}
		good := true

		nameLine, validName := ra.set.line("name")
		switch {
		case !ra.set.present("name"):
			d.errorf(ra.line, join(ra.path, "name"), "is required")
			good = false
		case !validName:
			good = false
		case !agentNameRE.MatchString(ra.name):
			d.errorf(nameLine, join(ra.path, "name"), "%q is not a valid agent name (want %s)", ra.name, agentNameRE)
			good = false
		case slices.Contains(reservedNames, ra.name):
			d.errorf(nameLine, join(ra.path, "name"), "%q is reserved (it is the mail sender outside any session)", ra.name)
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
	out.Env = make(map[string]string, len(base.Env)+len(over.Env))
	maps.Copy(out.Env, base.Env)
	maps.Copy(out.Env, over.Env)
	return out
}

// role resolves a role value: an existing file (relative to the config
// directory) is read; a value that looks like a path but names no file is an
// error rather than a one-line prompt nobody meant; anything else is inline.
func (d *decoder) role(value string, line int, key string) (text, file string, ok bool) {
	if strings.TrimSpace(value) == "" {
		d.errorf(line, key, "is empty: give a prompt file path or inline text")
		return "", "", false
	}
	if strings.ContainsAny(value, "\n\x00") {
		return value, "", true
	}
	p := value
	if !filepath.IsAbs(p) {
		p = filepath.Join(d.dir, p)
	}
	fi, err := os.Stat(p)
	if err == nil && fi.Mode().IsRegular() {
		data, err := readLimited(p, maxRoleFile)
		if err != nil {
			d.errorf(line, key, "read role file %s: %v", p, err)
			return "", "", false
		}
		if strings.TrimSpace(string(data)) == "" {
			d.errorf(line, key, "role file %s is empty", p)
			return "", "", false
		}
		return string(data), p, true
	}
	if !looksLikePath(value) {
		return value, "", true
	}
	switch {
	case err == nil:
		d.errorf(line, key, "role file %s is not a regular file", p)
	case errors.Is(err, fs.ErrNotExist):
		d.errorf(line, key, "role file %s does not exist (relative paths are relative to the config file)", p)
	default:
		d.errorf(line, key, "role file %s: %v", p, unwrapPath(err))
	}
	return "", "", false
}

// looksLikePath: one word that has a "/" or a prompt-file extension. Inline
// prompts are sentences, so "Review docs/ and/or fix bugs" stays inline.
func looksLikePath(s string) bool {
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return false
	}
	return strings.Contains(s, "/") || strings.HasSuffix(s, ".md") || strings.HasSuffix(s, ".txt")
}

// maxRoleFile bounds a role prompt: it goes into every session's prompt, so
// anything bigger is a mistaken path (and /proc files report absurd sizes).
const maxRoleFile = 1 << 20

var errTooLarge = errors.New("larger than 1 MiB; a role prompt should be far smaller")

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	if int64(len(data)) > limit {
		return nil, errTooLarge
	}
	return data, nil
}
