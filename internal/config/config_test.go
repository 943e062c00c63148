package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func abs(t testing.TB, path string) string {
	t.Helper()
	p, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func load(t *testing.T, path string) *Config {
	t.Helper()
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	return cfg
}

func builtins() map[string]Backend {
	return map[string]Backend{
		"claude": {Name: "claude", Type: "claude", Command: "claude", CancelSignal: "SIGINT", Env: map[string]string{}},
		"codex":  {Name: "codex", Type: "codex", Command: "codex", CancelSignal: "SIGINT", Env: map[string]string{}},
		"gemini": {Name: "gemini", Type: "gemini", Command: "gemini", CancelSignal: "SIGTERM", Env: map[string]string{}},
	}
}

// TestDefaults pins every default (docs/configuration.md): they are
// the contract users rely on.
func TestDefaults(t *testing.T) {
	dir := abs(t, "testdata")
	defaults := AgentSettings{
		Backend:              "claude",
		SessionTimeout:       60 * time.Minute,
		GracePeriod:          10 * time.Second,
		MaxConsecutiveErrors: 5,
		MaxTotalErrors:       20,
		Env:                  map[string]string{},
		MinSessionInterval:   time.Second,
		MaxIterations:        3,
		MaxSilentSessions:    3,
		Budget:               Budget{Window: 24 * time.Hour},
	}
	want := &Config{
		Path:         filepath.Join(dir, "minimal.yaml"),
		Repo:         dir,
		StateDir:     filepath.Join(dir, ".swarm"),
		BaseRef:      "HEAD",
		Listen:       "127.0.0.1:9464",
		LeaseTimeout: 30 * time.Second,
		Defaults:     defaults,
		Logs:         Logs{KeepArchives: 10, RotateSessions: 100, MaxAge: 720 * time.Hour, MaxSessionBytes: 64 << 20},
		Hooks:        Hooks{Timeout: 30 * time.Second},
		Mailbox:      Mailbox{MaxBody: 65536},
		History:      History{MaxAge: 90 * 24 * time.Hour},
		Maintenance:  Maintenance{GC: true, LooseObjects: 6700, Packs: 50, Every: 10 * time.Minute, Timeout: 30 * time.Minute},
		StallAfter:   5 * time.Minute,
		Limits:       Limits{DaemonTimerSlack: 5 * time.Millisecond},
		Isolation:    "auto",
		Sandbox:      Sandbox{Bwrap: "bwrap"},
		Notify:       Notify{Format: NotifyJSON},
		Backends:     builtins(),

		GitEmailDomain: "swarmd.invalid",
		Agents:         []Agent{{Name: "alice", Role: "You write Go.", AgentSettings: defaults}},
		SwarmBudget:    Budget{Window: 24 * time.Hour},
		Prices:         map[string]Price{},
		Providers:      Providers{Backoff: 2 * time.Second, MaxBackoff: 5 * time.Minute},
	}
	got := load(t, "testdata/minimal.yaml")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// The agent's env is its own map: a runner adding to it must not change the defaults.
	got.Agents[0].Env["X"] = "1"
	if len(got.Defaults.Env) != 0 {
		t.Errorf("agent env aliases defaults.env")
	}
}

// TestOverrides sets every key to a non-default value.
func TestOverrides(t *testing.T) {
	dir := abs(t, "testdata")
	defaults := AgentSettings{
		Backend:              "tests",
		SessionTimeout:       30 * time.Minute,
		GracePeriod:          5 * time.Second,
		MaxConsecutiveErrors: 3,
		MaxTotalErrors:       7,
		Env:                  map[string]string{"GOFLAGS": "-mod=mod", "DEBUG": "1"},
		MinSessionInterval:   2 * time.Second,
		MaxIterations:        3,
		MaxSilentSessions:    3,
		Tools:                Tools{Allow: []string{"Read", "Bash(git:*)"}, Deny: []string{"WebFetch"}},
		Budget:               Budget{USD: 10, Tokens: 5000000, Window: 12 * time.Hour, has: hasUSD | hasTokens | hasWindow},
	}
	backends := builtins()
	backends["claude"] = Backend{Name: "claude", Type: "claude", Command: "/opt/claude/bin/claude",
		Args: []string{"--max-turns", "40"}, Model: "sonnet", AllowedTools: []string{"Read", "Edit"},
		CancelSignal: "SIGINT", Env: map[string]string{}}
	backends["codex"] = Backend{Name: "codex", Type: "codex", Command: "codex", Model: "gpt-5-codex",
		CancelSignal: "SIGTERM", Env: map[string]string{}}
	backends["tests"] = Backend{Name: "tests", Type: "command", Command: "sh",
		Args: []string{"-c", "cat >/dev/null; make test"}, CancelSignal: "SIGTERM", Env: map[string]string{"CI": "true"}}
	backends["fake"] = Backend{Name: "fake", Type: "scripted", CancelSignal: "SIGUSR1", Env: map[string]string{},
		Steps: []ScriptStep{
			{Print: []string{`{"type":"result","is_error":false}`}, PrintEvery: 100 * time.Millisecond, Sleep: time.Second},
			{Exit: 0, IgnoreSignals: true, SetsidChild: true, NoResult: true},
		}}
	want := &Config{
		Path:         filepath.Join(dir, "full.yaml"),
		Repo:         filepath.Join(dir, "repo"),
		StateDir:     "/var/lib/swarmd/state",
		BaseRef:      "origin/main",
		Listen:       "",
		LeaseTimeout: 30 * time.Second,
		Defaults:     defaults,
		Logs:         Logs{KeepArchives: 4, RotateSessions: 25, MaxAge: 48 * time.Hour, MaxSessionBytes: 1 << 20},
		Hooks: Hooks{
			AgentStart:   []string{"make setup"},
			SessionStart: []string{"./check.sh", "echo start"},
			SessionEnd:   []string{"echo end"},
			AgentStopped: []string{"echo stopped"},
			Timeout:      time.Minute,
		},
		Mailbox:     Mailbox{MaxBody: 1024},
		History:     History{MaxAge: 0},
		Maintenance: Maintenance{GC: false, LooseObjects: 1000, Packs: 20, Every: time.Hour, Timeout: 5 * time.Minute},
		StallAfter:  2 * time.Minute,
		Isolation:   "strict",
		Sandbox:     Sandbox{Bwrap: "bwrap"},
		Notify:      Notify{Format: NotifyJSON},
		Limits:      Limits{MaxRunning: 6, PerProvider: map[string]int{"claude": 4}, MinAvailableMemory: 2 << 30, SessionNice: 10, DaemonCPUs: 1, DaemonTimerSlack: 2500 * time.Microsecond},
		Merge:       &Merge{Into: "release/v2", Gate: []string{"make test", "./scripts/e2e.sh"}, Timeout: 45 * time.Minute, Strategy: "squash", MaxRejections: 4, Batch: 4, Parallel: 1},
		Backends:    backends,

		GitEmailDomain: "agents.example.com",
		SwarmBudget:    Budget{USD: 100, Tokens: 90000000, Window: 168 * time.Hour, has: hasUSD | hasTokens | hasWindow},
		Prices: map[string]Price{
			"gpt-5-codex": {Input: 1.25, Output: 10, CacheRead: 0.125, CacheWrite: 2},
			"*":           {Input: 3, Output: 15},
		},
		Providers: Providers{Backoff: time.Second, MaxBackoff: time.Minute},
		Agents: []Agent{
			{Name: "alice", Role: "You are alice. You write the Go code.\n", RoleFile: filepath.Join(dir, "prompts", "alice.md"),
				AgentSettings: AgentSettings{Backend: "claude", SessionTimeout: 90 * time.Minute, GracePeriod: 5 * time.Second,
					MaxConsecutiveErrors: 3, MaxTotalErrors: 7,
					Env: map[string]string{"GOFLAGS": "-mod=mod", "DEBUG": "2", "EXTRA": "x"}, MinSessionInterval: 0, MaxIterations: 3, MaxSilentSessions: 3,
					Tools:  Tools{Allow: defaults.Tools.Allow, Deny: []string{}},
					Budget: Budget{USD: 2.5, Tokens: 5000000, Window: 12 * time.Hour, has: hasUSD | hasTokens | hasWindow}}},
			{Name: "bob", Role: "You review every commit on main.\nReply with PASS or FAIL.\n", AgentSettings: defaults},
			{Name: "carol-2", Role: "Review docs/ and/or fix bugs",
				AgentSettings: AgentSettings{Backend: "fake", SessionTimeout: 30 * time.Minute, GracePeriod: time.Second,
					MaxConsecutiveErrors: 1, MaxTotalErrors: 2, Env: defaults.Env, MinSessionInterval: 2 * time.Second, MaxIterations: 3,
					MaxSilentSessions: 3,
					Tools:             defaults.Tools, Budget: defaults.Budget}},
		},
	}
	got := load(t, "testdata/full.yaml")
	if !reflect.DeepEqual(got.Backends, want.Backends) {
		t.Errorf("backends:\ngot  %+v\nwant %+v", got.Backends, want.Backends)
	}
	if !reflect.DeepEqual(got.Agents, want.Agents) {
		t.Errorf("agents:\ngot  %+v\nwant %+v", got.Agents, want.Agents)
	}
	got.Backends, want.Backends, got.Agents, want.Agents = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestListenAndNullValues(t *testing.T) {
	tests := []struct {
		file       string
		wantListen string
	}{
		{"testdata/minimal.yaml", "127.0.0.1:9464"},
		{"testdata/listen_disabled.yaml", ""},
		{"testdata/listen_null.yaml", "127.0.0.1:9464"}, // `listen:` with no value is absent, not ""
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			got := load(t, tt.file)
			if got.Listen != tt.wantListen {
				t.Errorf("Listen = %q, want %q", got.Listen, tt.wantListen)
			}
			if got.Hooks.Timeout != DefaultHookTimeout || got.Defaults.Env == nil {
				t.Errorf("null sections did not keep defaults: hooks %+v, env %v", got.Hooks, got.Defaults.Env)
			}
		})
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	cfg := load(t, "testdata/anchors.yaml")
	lint := cfg.Backends["lint"]
	if lint.Type != TypeCommand || lint.Command != "make" || !slices.Equal(lint.Args, []string{"lint"}) {
		t.Errorf("lint backend = %+v, want the tests backend with args [lint]", lint)
	}
	tests := []struct {
		agent   string
		timeout time.Duration
		backend string
		env     map[string]string
	}{
		{"alice", 20 * time.Minute, "claude", map[string]string{"A": "1"}},
		{"bob", 5 * time.Minute, "lint", map[string]string{"A": "1", "B": "2"}}, // explicit keys beat merged ones
	}
	for _, tt := range tests {
		a, ok := cfg.Agent(tt.agent)
		if !ok {
			t.Fatalf("no agent %s", tt.agent)
		}
		if a.SessionTimeout != tt.timeout || a.Backend != tt.backend || !reflect.DeepEqual(a.Env, tt.env) {
			t.Errorf("%s = %+v, want timeout %s backend %s env %v", tt.agent, a.AgentSettings, tt.timeout, tt.backend, tt.env)
		}
	}
}

func TestRelativePaths(t *testing.T) {
	base := abs(t, "testdata/paths")
	want := struct{ path, repo, state, roleFile string }{
		filepath.Join(base, "conf", "swarmd.yaml"),
		filepath.Join(base, "work"),
		filepath.Join(base, "state"), // relative to repo, not to the config file
		filepath.Join(base, "work", "prompts", "p.md"),
	}
	check := func(t *testing.T, cfg *Config) {
		t.Helper()
		a, _ := cfg.Agent("alice")
		got := struct{ path, repo, state, roleFile string }{cfg.Path, cfg.Repo, cfg.StateDir, a.RoleFile}
		if got != want {
			t.Errorf("got %+v\nwant %+v", got, want)
		}
		if a.Role != "Paths role.\n" {
			t.Errorf("Role = %q", a.Role)
		}
		if cfg.DBPath() != filepath.Join(want.state, "swarm.db") || cfg.SocketPath() != filepath.Join(want.state, "swarmd.sock") {
			t.Errorf("state_dir layout is not under %s", want.state)
		}
	}
	t.Run("from another directory", func(t *testing.T) {
		check(t, load(t, "testdata/paths/conf/swarmd.yaml"))
	})
	t.Run("from the config directory", func(t *testing.T) {
		t.Chdir("testdata/paths/conf")
		check(t, load(t, "swarmd.yaml"))
	})
	t.Run("Parse with the same path", func(t *testing.T) {
		data, err := os.ReadFile("testdata/paths/conf/swarmd.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := Parse(data, "testdata/paths/conf/swarmd.yaml")
		if err != nil {
			t.Fatal(err)
		}
		check(t, cfg)
	})
}

func TestRoles(t *testing.T) {
	dir := abs(t, "testdata")
	alice := "You are alice. You write the Go code.\n"
	tests := []struct {
		agent, role, roleFile string
	}{
		{"file-relative", alice, filepath.Join(dir, "prompts", "alice.md")},
		{"file-dot", alice, filepath.Join(dir, "prompts", "alice.md")},
		{"file-no-extension", "Notes role.\n", filepath.Join(dir, "notes")}, // an existing file wins even without a "/"
		{"inline-word", "reviewer", ""},
		{"inline-sentence", "Review docs/ and/or fix bugs in README.md", ""}, // a sentence is not a path
		{"inline-block", "You are bob.\nSee prompts/alice.md for alice's role.\n", ""},
	}
	cfg := load(t, "testdata/roles.yaml")
	for _, tt := range tests {
		t.Run(tt.agent, func(t *testing.T) {
			a, ok := cfg.Agent(tt.agent)
			if !ok {
				t.Fatalf("no agent %s", tt.agent)
			}
			if a.Role != tt.role || a.RoleFile != tt.roleFile {
				t.Errorf("Role, RoleFile = %q, %q; want %q, %q", a.Role, a.RoleFile, tt.role, tt.roleFile)
			}
		})
	}

	t.Run("absolute path", func(t *testing.T) {
		tmp := t.TempDir()
		prompt := filepath.Join(tmp, "abs role.md") // a file that exists is read even with a space
		if err := os.WriteFile(prompt, []byte("Absolute.\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		data := []byte("agents:\n  - name: alice\n    role: " + prompt + "\n")
		cfg, err := Parse(data, filepath.Join(tmp, "swarmd.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if a := cfg.Agents[0]; a.Role != "Absolute.\n" || a.RoleFile != prompt {
			t.Errorf("Role, RoleFile = %q, %q", a.Role, a.RoleFile)
		}
	})
}

func TestAgentLookup(t *testing.T) {
	cfg := load(t, "testdata/full.yaml")
	if got, want := cfg.AgentNames(), []string{"alice", "bob", "carol-2"}; !slices.Equal(got, want) {
		t.Errorf("AgentNames() = %v, want %v (config order)", got, want)
	}
	if a, ok := cfg.Agent("bob"); !ok || a.Name != "bob" || a.Backend != "tests" {
		t.Errorf("Agent(bob) = %+v, %v", a, ok)
	}
	if _, ok := cfg.Agent("dave"); ok {
		t.Errorf("Agent(dave) found an agent that is not configured")
	}
}

func TestBackendSignal(t *testing.T) {
	cfg := load(t, "testdata/full.yaml")
	tests := []struct {
		backend string
		want    syscall.Signal
	}{
		{"claude", syscall.SIGINT},
		{"codex", syscall.SIGTERM}, // "term" in the file
		{"gemini", syscall.SIGTERM},
		{"tests", syscall.SIGTERM},
		{"fake", syscall.SIGUSR1},
	}
	for _, tt := range tests {
		if got := cfg.Backends[tt.backend].Signal(); got != tt.want {
			t.Errorf("%s: Signal() = %v, want %v", tt.backend, got, tt.want)
		}
	}
}

// TestErrors: each file under testdata/invalid has exactly one problem, and
// the error names its line and key.
func TestErrors(t *testing.T) {
	inv := abs(t, "testdata/invalid")
	known := "known keys: "
	tests := []struct {
		file string
		line int
		key  string
		msg  string
	}{
		{"syntax", 4, "", "invalid YAML: did not find expected ',' or ']'"},
		{"syntax_tab", 3, "", "invalid YAML: found character that cannot start any token"},
		{"two_documents", 4, "", "a config file holds one YAML document; a second one starts here (remove the --- line and what follows)"},
		{"top_not_mapping", 1, "", "the top level must be a mapping (repo:, defaults:, backends:, agents: ...), got a list"},
		{"empty_file", 0, "agents", "at least one agent is required (list them under agents:, each with a name and a role)"},
		{"duplicate_key", 3, "listen", "duplicate key (first defined at line 2; keep one of them)"},

		{"unknown_top", 2, "repos", "unknown key (" + known + "repo, state_dir, base_ref, listen, store, lease_timeout, remote, defaults, logs, hooks, mailbox, history, maintenance, limits, isolation, sandbox, stall_after, git_email_domain, web, notify, merge, backends, agents, swarm_budget, prices, providers)"},
		{"unknown_agent_key", 6, "agents[1].bakend", "unknown key (" + known + "name, role, backend, session_timeout, grace_period, max_consecutive_errors, max_total_errors, env, allow_control, min_session_interval, max_sessions, reviewer, max_iterations, max_silent_sessions, claims, max_turns, memory_max, signals, tools, budget)"},
		{"unknown_logs_key", 3, "logs.keep", "unknown key (" + known + "keep_archives, rotate_sessions, max_age, max_session_bytes)"},
		{"unknown_backend_key", 3, "backends.claude.modle", "unknown key (" + known + "type, command, args, model, allowed_tools, cancel_signal, env, steps)"},
		{"unknown_step_key", 6, "backends.fake.steps[1].printt", "unknown key (" + known + "print, print_every, sleep, exit, ignore_signals, setsid_child, no_result)"},

		{"bad_duration", 3, "defaults.session_timeout", `"10 minutes" is not a duration (use Go syntax such as 30s, 10m, 1h30m)`},
		{"duration_no_unit", 4, "agents[0].grace_period", `"60" is not a duration (use Go syntax such as 30s, 10m, 1h30m)`},
		{"negative_duration", 2, "logs.max_age", "must be positive, got -1h"},
		{"zero_duration", 1, "stall_after", "must be positive, got 0s"},
		{"bad_git_email_domain", 1, "git_email_domain", `"me@example.com" is not a domain such as example.com (no @, <, > or spaces)`},
		{"zero_hook_timeout", 3, "hooks.timeout", "must be positive, got 0s"},
		{"empty_hook", 4, "hooks.session_end[1]", "must not be empty (remove the empty item)"},
		{"zero_consecutive", 4, "agents[0].max_consecutive_errors", "must be at least 1, got 0"},
		{"not_integer", 2, "defaults.max_total_errors", `want an integer, got "many"`},
		{"zero_keep_archives", 2, "logs.keep_archives", "must be at least 1, got 0"},
		{"negative_rotate_sessions", 2, "logs.rotate_sessions", "must be at least 0, got -1"},
		{"zero_max_body", 2, "mailbox.max_body", "must be at least 1, got 0"},
		{"zero_max_session_bytes", 2, "logs.max_session_bytes", "must be at least 1, got 0"},
		{"negative_min_session_interval", 2, "defaults.min_session_interval", "must not be negative, got -1s"},
		{"wrong_kind_agents", 2, "agents", "want a list of agents, got a mapping"},
		{"wrong_kind_env", 2, "defaults.env", "want a mapping, got a list"},
		{"bad_env_name", 6, "agents[0].env.BAD-NAME", `"BAD-NAME" is not a valid environment variable name (use letters, digits and _, not starting with a digit)`},
		{"swarm_env", 3, "defaults.env.SWARM_AGENT_ID", "SWARM_* variables are set by swarmd and cannot be configured (use another name)"},

		{"bad_agent_name", 4, "agents[1].name", `"Bob" is not a valid agent name (want ^[a-z][a-z0-9-]{0,31}$)`},
		{"dotdot_name", 2, "agents[0].name", `"../x" is not a valid agent name (want ^[a-z][a-z0-9-]{0,31}$)`},
		{"slash_name", 2, "agents[0].name", `"a/b" is not a valid agent name (want ^[a-z][a-z0-9-]{0,31}$)`},
		{"long_name", 2, "agents[0].name", `"a123456789012345678901234567890123" is not a valid agent name (want ^[a-z][a-z0-9-]{0,31}$)`},
		{"duplicate_name", 6, "agents[2].name", `"alice" is already the name of agents[0] (line 2)`},
		{"reserved_name", 2, "agents[0].name", `"operator" is reserved (it is the mail sender outside any session)`},
		{"signal_markdown_lead", 2, "defaults.signals.done", `signal word "_DONE" starts with '_' (start it with a letter or digit)`},
		{"signals_clash_defaults", 2, "defaults.signals", `done and fail are both "DONE": a result could not say which it means (make them differ)`},
		{"signals_clash_agent", 5, "agents[0].signals", `done and pass are both "DONE": a result could not say which it means (make them differ)`},
		{"reserved_merge_name", 2, "agents[0].name", `"merge" is reserved (it names the merge queue's gate logs and events)`},
		{"merge_no_into", 2, "merge.into", "is required: the branch the queue advances (add into: main)"},
		{"merge_bad_into", 2, "merge.into", `"refs/heads/main" is a full ref: give the branch's short name (main, not refs/heads/main)`},
		{"merge_agent_into", 2, "merge.into", `"swarm/alice" is an agent's branch: the queue merges agents' branches into another one`},
		{"bad_per_provider", 2, "limits.per_provider.openai", `"openai" is not a backend type (want one of claude, codex, gemini, command, scripted)`},
		{"bad_isolation", 1, "isolation", `"paranoid" is not an isolation level (want one of auto, strict, off)`},
		{"merge_bad_strategy", 4, "merge.strategy", `"octopus" is not a merge strategy (want one of merge, squash, rebase)`},
		{"merge_zero_timeout", 3, "merge.timeout", "must be positive, got 0s"},
		{"merge_empty_gate", 3, "merge.gate[0]", "must not be empty (remove the empty item)"},
		{"merge_zero_batch", 3, "merge.batch", "must be between 1 and 64, got 0"},
		{"merge_parallel_three", 3, "merge.parallel", "must be between 1 and 2, got 3"},
		{"missing_name", 2, "agents[0].name", "is required (add name: with a lowercase name)"},
		{"missing_role", 2, "agents[0].role", "is required: a prompt file path or inline text"},
		{"empty_role", 3, "agents[0].role", "is empty: give a prompt file path or inline text"},
		{"role_file_missing", 3, "agents[0].role", "role file " + filepath.Join(inv, "prompts/nope.md") + " does not exist (relative paths are relative to the config file)"},
		{"role_file_missing_md", 3, "agents[0].role", "role file " + filepath.Join(inv, "alice.md") + " does not exist (relative paths are relative to the config file)"},
		{"role_file_dir", 3, "agents[0].role", "role file " + filepath.Join(inv, "prompts/dir") + " is a directory, not a regular file (point role at a prompt file)"},
		{"role_file_empty", 3, "agents[0].role", "role file " + filepath.Join(inv, "prompts/empty.md") + " is empty (write the agent's instructions into it)"},

		{"agent_unknown_backend", 6, "agents[0].backend", `"gpt" is not a configured backend (known: claude, codex, gemini, tests)`},
		{"defaults_unknown_backend", 2, "defaults.backend", `"gpt" is not a configured backend (known: claude, codex, gemini)`},
		{"unknown_backend_type", 3, "backends.box.type", `"docker" is not a backend type (known: claude, codex, gemini, command, scripted)`},
		{"backend_needs_type", 2, "backends.tests", "needs a type (one of claude, codex, gemini, command, scripted): only a backend named after a type may omit it"},
		{"bad_backend_name", 2, "backends.my backend", `"my backend" is not a valid backend name (want ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$)`},
		{"command_without_command", 2, "backends.tests", "a command backend needs a command (add command: PROGRAM)"},
		{"scripted_without_steps", 2, "backends.scripted", "a scripted backend needs steps (add steps: with at least one step)"},
		{"scripted_empty_steps", 4, "backends.fake.steps", "a scripted backend needs at least one step (add one under steps:)"},
		{"bad_cancel_signal", 5, "backends.tests.cancel_signal", `"SIGFOO" is not a supported signal (want one of SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)`},
		{"broken_backend_referenced", 5, "backends.tests.cancel_signal", `"SIGFOO" is not a supported signal (want one of SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)`},
		{"sigkill_cancel", 3, "backends.claude.cancel_signal", "SIGKILL cannot cancel gracefully: force-stop sends it after grace_period"},
		{"model_on_command", 5, "backends.tests.model", "does not apply to a command backend (only to claude, codex and gemini)"},
		{"steps_on_claude", 4, "backends.claude.steps", "does not apply to a claude backend (only to scripted)"},
		{"exit_out_of_range", 5, "backends.fake.steps[0].exit", "must be between 0 and 255, got 256"},
		{"bool_not_bool", 5, "backends.fake.steps[0].ignore_signals", `want true or false, got "yes"`},

		{"no_agents", 0, "agents", "at least one agent is required (list them under agents:, each with a name and a role)"},
		{"empty_agents", 2, "agents", "at least one agent is required (list them under agents:, each with a name and a role)"},
		{"repo_missing", 1, "repo", "directory " + filepath.Join(inv, "no-such-dir") + " does not exist"},
		{"repo_not_dir", 1, "repo", filepath.Join(inv, "afile") + " is not a directory"},
		{"bad_listen", 1, "listen", `"localhost" is not host:port such as 127.0.0.1:9464 ("" disables the listener)`},
		{"bad_listen_port", 1, "listen", `":99999" is not host:port such as 127.0.0.1:9464 ("" disables the listener)`},
		{"base_ref_option", 1, "base_ref", `"--upload-pack=x" must not start with "-" (name a branch, tag or commit)`},
		{"empty_base_ref", 1, "base_ref", "must not be empty (default HEAD)"},
		{"long_state_dir", 1, "state_dir", "the control socket path /" + strings.Repeat("x", 120) +
			"/swarmd.sock is 133 bytes, over the 107-byte limit for unix sockets; use a shorter state_dir"},
	}

	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", "invalid", tt.file+".yaml")
			cfg, err := Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = %+v, want an error", path, cfg)
			}
			var all Errors
			if !errors.As(err, &all) || len(all) != 1 {
				t.Fatalf("want exactly one problem, got %v (%d)", err, len(all))
			}
			want := Error{File: path, Line: tt.line, Key: tt.key, Msg: tt.msg}
			got := *all[0]
			got.Err = nil
			if got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".yaml"); !covered[name] {
			t.Errorf("%s has no test case", f)
		}
	}
}

func TestErrorString(t *testing.T) {
	_, err := Load("testdata/invalid/bad_agent_name.yaml")
	want := `testdata/invalid/bad_agent_name.yaml:4: agents[1].name: "Bob" is not a valid agent name (want ^[a-z][a-z0-9-]{0,31}$)`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant  %s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Line != 4 {
		t.Errorf("errors.As(*Error) = %v, %+v", errors.As(err, &e), e)
	}
	if got, want := (&Error{File: "swarmd.yaml", Key: "agents", Msg: "x"}).Error(), "swarmd.yaml: agents: x"; got != want {
		t.Errorf("no line: %q, want %q", got, want)
	}
	if got, want := (&Error{File: "swarmd.yaml", Line: 2, Msg: "a\nb"}).Error(), "swarmd.yaml:2: a b"; got != want {
		t.Errorf("newline: %q, want %q", got, want)
	}
}

// TestAllErrorsSorted: every problem is reported, in file order, and the
// one-line summary counts the rest.
func TestAllErrorsSorted(t *testing.T) {
	const path = "testdata/multi_errors.yaml"
	_, err := Load(path)
	var all Errors
	if !errors.As(err, &all) {
		t.Fatalf("err = %v, want Errors", err)
	}
	var got []string
	for _, e := range all {
		got = append(got, e.Key)
	}
	want := []string{"listen", "defaults.grace_period", "agents[0].name", "agents[1].role", "agents[1].bakend"}
	if !slices.Equal(got, want) {
		t.Errorf("keys = %v, want %v", got, want)
	}
	if s := err.Error(); !strings.HasPrefix(s, path+":2: listen: ") || !strings.HasSuffix(s, " (and 4 more problems)") {
		t.Errorf("Error() = %q", s)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "swarmd.yaml")
	_, err := Load(path)
	var e *Error
	if !errors.As(err, &e) || e.File != path || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want an *Error for %s wrapping fs.ErrNotExist", err, path)
	}
	if want := path + ": read config: no such file or directory"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}

// TestAliasBomb: merge keys nested through aliases ("billion laughs") must
// hit the alias budget instead of costing exponential work.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("defaults:\n  env: &m0 {A: x}\n")
	b.WriteString("backends:\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  b%d: &m%d {<<: [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*m%d", i-1)
		}
		b.WriteString("]}\n")
	}
	_, err := Parse([]byte(b.String()), filepath.Join(t.TempDir(), "swarmd.yaml"))
	var all Errors
	if !errors.As(err, &all) {
		t.Fatalf("err = %v, want Errors", err)
	}
	if !slices.ContainsFunc(all, func(e *Error) bool { return strings.Contains(e.Msg, "alias expansions") }) {
		t.Errorf("no alias-budget error in %v", all)
	}
}

func TestReviewerMustBeAnotherAgent(t *testing.T) {
	dir := t.TempDir()
	base := "repo: .\nbackends: {sh: {type: command, command: sh}}\ndefaults: {backend: sh}\nagents:\n"
	for _, tc := range []struct{ agents, want string }{
		{"  - {name: alice, role: x, reviewer: rita}\n", `agents[0].reviewer: "rita" is not an agent of this config`},
		{"  - {name: alice, role: x, reviewer: alice}\n", "agents[0].reviewer: agent alice cannot review its own work"},
	} {
		_, err := Parse([]byte(base+tc.agents), filepath.Join(dir, "swarmd.yaml"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", strings.TrimSpace(tc.agents), err, tc.want)
		}
	}
	cfg, err := Parse([]byte(strings.Replace(base, "defaults: {backend: sh}", "defaults: {backend: sh, reviewer: rita, max_iterations: 2}", 1)+
		"  - {name: alice, role: x}\n  - {name: rita, role: y}\n"),
		filepath.Join(dir, "swarmd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := cfg.Agent("alice"); a.Reviewer != "rita" || a.MaxIterations != 2 {
		t.Errorf("alice inherits reviewer %q, max %d", a.Reviewer, a.MaxIterations)
	}
}

// TestMaxTurns: max_turns in defaults applies to every agent; an agent may
// lift it (0) or set its own; a negative value is refused with its line.
func TestMaxTurns(t *testing.T) {
	dir := t.TempDir()
	yml := "defaults:\n  max_turns: 30\nagents:\n  - name: alice\n    role: r\n  - name: bob\n    role: r\n    max_turns: 0\n  - name: carol\n    role: r\n    max_turns: 5\n"
	cfg, err := Parse([]byte(yml), filepath.Join(dir, "swarmd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"alice": 30, "bob": 0, "carol": 5} {
		if a, _ := cfg.Agent(name); a.MaxTurns != want {
			t.Errorf("%s: max_turns %d, want %d", name, a.MaxTurns, want)
		}
	}
	_, err = Parse([]byte("agents:\n  - name: alice\n    role: r\n    max_turns: -1\n"), filepath.Join(dir, "swarmd.yaml"))
	var e *Error
	if !errors.As(err, &e) || e.Line != 4 || e.Key != "agents[0].max_turns" || !strings.Contains(e.Msg, "at least 0") {
		t.Fatalf("negative max_turns: %v", err)
	}
}

// TestReviewOnly: an agent that reviews another's tasks claims no
// unassigned task unless its claims key says true; claims: false makes
// any agent review-only; defaults.claims applies to every agent.
func TestReviewOnly(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		yaml string
		want map[string]bool
	}{
		{"defaults: {backend: sh}\nagents:\n  - {name: alice, role: x, reviewer: rita}\n  - {name: bob, role: x}\n  - {name: rita, role: y}\n",
			map[string]bool{"alice": false, "bob": false, "rita": true}},
		{"defaults: {backend: sh}\nagents:\n  - {name: alice, role: x, reviewer: rita}\n  - {name: rita, role: y, claims: true}\n  - {name: tess, role: t, claims: false}\n",
			map[string]bool{"alice": false, "rita": false, "tess": true}},
		{"defaults: {backend: sh, claims: false}\nagents:\n  - {name: alice, role: x, claims: true}\n  - {name: bob, role: x}\n",
			map[string]bool{"alice": false, "bob": true}},
	} {
		cfg, err := Parse([]byte("repo: .\nbackends: {sh: {type: command, command: sh}}\n"+tc.yaml), filepath.Join(dir, "swarmd.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range tc.want {
			if got := cfg.ReviewOnly(name); got != want {
				t.Errorf("%s: ReviewOnly(%s) = %v, want %v", strings.ReplaceAll(tc.yaml, "\n", " "), name, got, want)
			}
		}
	}
	_, err := Parse([]byte("repo: .\nbackends: {sh: {type: command, command: sh}}\ndefaults: {backend: sh}\nagents:\n  - {name: a, role: x, claims: maybe}\n"),
		filepath.Join(dir, "swarmd.yaml"))
	if err == nil || !strings.Contains(err.Error(), "agents[0].claims: want true or false") {
		t.Errorf("claims: maybe = %v", err)
	}
}

// TestKeyLine: the line of a key set in the file, through a nested
// mapping and an alias; 0 for a key the file leaves out.
func TestKeyLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "swarmd.yaml")
	body := "listen: \"\"\nbase_ref: dev\nshared: &m\n  into: trunk\nmerge: *m\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{"base_ref": 2, "merge": 5, "merge.into": 4, "merge.gate": 0, "repo": 0, "listen.x": 0} {
		if got := KeyLine(path, key); got != want {
			t.Errorf("KeyLine(%q) = %d, want %d", key, got, want)
		}
	}
	if got := KeyLine(filepath.Join(t.TempDir(), "none.yaml"), "base_ref"); got != 0 {
		t.Errorf("a missing file: %d, want 0", got)
	}
}
