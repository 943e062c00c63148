package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/go-git/go-git/v5"
	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/config"
)

// initOptions are `swarmd init`'s: it writes a commented starter
// swarmd.yaml and one role prompt per agent.
type initOptions struct {
	IO      Streams
	Dir     string   // where swarmd.yaml and prompts/ go
	Agents  []string // as given, checked by checkFlags
	Backend string   // one of initBackends
	Force   bool     // overwrite files that exist
}

// initRepo is what init found in the repository: the merge queue's target
// (the branch checked out) and a gate (the project's tests).
type initRepo struct {
	dir    string // --dir, absolute
	branch string // "" when not on a branch (or not a repository)
	gate   string // "" when init found no test command
}

// initBackends are the backends init can start a swarm on: the agent CLIs,
// which need no more than their name, and command, for which init writes a
// starter script (prompts/work.sh) that does a task's work without a model.
var initBackends = []string{config.TypeClaude, config.TypeCodex, config.TypeGemini, config.TypeCommand}

// workScript is the command backend's starter session: it reads the
// prompt, and for the task it is given appends the task's title to
// WORKLOG.md, commits, and says DONE; with no task it is idle. Replace it
// with your own program: swarmd passes the prompt on standard input and reads
// the session's result from its output.
const workScript = `#!/bin/sh
# Written by swarmd init: the command backend's session. swarmd passes the
# prompt on standard input; the last lines of the output are the result (DONE
# reports the task done). Replace this with your own program.
set -e
prompt=$(cat)
task=$(printf '%s\n' "$prompt" | sed -n 's/^\(Your task: \|Continue your task \)#\([0-9]*\): \(.*\)$/\2 \3/p' | head -n 1)
if [ -z "$task" ]; then
  echo "nothing to do"
  echo DONE
  exit 0
fi
printf -- '- #%s\n' "$task" >> WORKLOG.md
git add WORKLOG.md
git commit -q -m "work on task #$task"
echo "worked on task #$task"
echo DONE
`

// NewInitCommand is `swarmd init`.
func NewInitCommand(s Streams) *cobra.Command { return newInitCmd(s, nil) }

// newInitCmd is `swarmd init`; runF (nil: initRun) runs it.
func newInitCmd(s Streams, runF func(context.Context, *initOptions) error) *cobra.Command {
	m := &initOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Write a commented starter swarmd.yaml and a role prompt per agent",
		Long: `Write DIR/swarmd.yaml, with the common settings listed (defaults commented out), and one role prompt
per agent in DIR/prompts/AGENT.md. The role prompt is each agent's standing instructions: edit it to say
what that agent is for. Existing files are left alone unless --force is given.

When DIR is a git repository on a branch, swarmd.yaml gets a merge queue into that branch, gated by
the project's tests as DIR shows them (a Makefile test target, go.mod, package.json's test script,
pyproject.toml). --backend command writes prompts/work.sh, a session that does a task's work
without a model (it logs the task in WORKLOG.md and commits), to try the whole loop with no API key.

DIR/.swarmd.schema.json is the config's JSON Schema ('swarmd config schema'); the first line of
swarmd.yaml points editors with a YAML language server at it, so they complete and check the keys.

Then check the config with 'swarmd config validate', start the swarm with 'swarmd run', and give it
work with 'swarmd task add'.`,
		Example: `  swarmd init
  swarmd init --agents implementer,reviewer,tester --backend codex
  swarmd init --backend command
  swarmd init --dir /etc/swarmd --force`,
		Args: func(cmd *cobra.Command, args []string) error { return usage(cobra.NoArgs(cmd, args)) },
		RunE: func(cmd *cobra.Command, _ []string) error { return orRun(runF, initRun)(cmd.Context(), m) },
	}
	f := cmd.Flags()
	f.StringVar(&m.Dir, "dir", ".", "directory to write swarmd.yaml and prompts/ into (the repository, usually)")
	f.StringSliceVar(&m.Agents, "agents", []string{"alice", "bob"}, "agent names, comma-separated")
	f.StringVar(&m.Backend, "backend", config.TypeClaude, "backend of every agent: "+strings.Join(initBackends, ", "))
	f.BoolVar(&m.Force, "force", false, "overwrite swarmd.yaml and prompt files that already exist")
	completeFlag(s, cmd, "backend", cobra.FixedCompletions(initBackends, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagDirname("dir")
	return cmd
}

// schemaFile is the JSON Schema that init writes next to swarmd.yaml. The
// config's first line points at it by a relative path, which editors resolve
// against the config file: it works offline, and it is the schema of the
// swarmd that wrote it (swarmd config schema refreshes it after an upgrade).
const schemaFile = ".swarmd.schema.json"

// initFile is one file init writes.
type initFile struct {
	rel  string // relative to the directory, for messages
	data []byte
}

func initRun(_ context.Context, m *initOptions) error {
	agents, err := m.checkFlags()
	if err != nil {
		return err
	}
	schema, err := config.JSONSchema()
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	files := []initFile{
		{rel: "swarmd.yaml", data: starterConfig(agents, m.Backend, m.detect())},
		{rel: schemaFile, data: schema},
	}
	if m.Backend == config.TypeCommand {
		files = append(files, initFile{rel: filepath.Join("prompts", "work.sh"), data: []byte(workScript)})
	}
	for _, a := range agents {
		files = append(files, initFile{rel: filepath.Join("prompts", a+".md"), data: rolePrompt(a, agents)})
	}
	if !m.Force {
		var existing []string
		for _, f := range files {
			if _, err := os.Lstat(filepath.Join(m.Dir, f.rel)); err == nil {
				existing = append(existing, filepath.Join(m.Dir, f.rel))
			} else if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("init: %w", err)
			}
		}
		if len(existing) > 0 {
			return usagef("%s already exists; nothing was written (--force overwrites)", strings.Join(existing, ", "))
		}
	}
	// Prompts first, the config last: a swarmd.yaml on disk always has its
	// prompt files.
	for i := len(files) - 1; i >= 0; i-- {
		if err := writeFileReplacing(filepath.Join(m.Dir, files[i].rel), files[i].data); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	cfgPath := filepath.Join(m.Dir, "swarmd.yaml")
	if _, err := config.Load(cfgPath); err != nil {
		return fmt.Errorf("init: the config just written does not load (a bug in swarmd init): %w", err)
	}
	return m.report(files, cfgPath)
}

// detect reads what the merge queue needs from the repository at --dir:
// the branch checked out, and the project's test command by what the
// directory holds (a Makefile's test target, go.mod, package.json's test
// script, pyproject.toml).
func (m *initOptions) detect() initRepo {
	r := initRepo{dir: m.Dir}
	if abs, err := filepath.Abs(m.Dir); err == nil {
		r.dir = abs
	}
	if out, err := exec.Command("git", "-C", m.Dir, "symbolic-ref", "--quiet", "--short", "HEAD").Output(); err == nil {
		r.branch = strings.TrimSpace(string(out))
	}
	has := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(m.Dir, name))
		if err != nil {
			return nil
		}
		return b
	}
	switch {
	case regexp.MustCompile(`(?m)^test:`).Match(has("Makefile")):
		r.gate = "make test"
	case has("go.mod") != nil:
		r.gate = "go test ./..."
	case regexp.MustCompile(`"test"\s*:`).Match(has("package.json")):
		r.gate = "npm test"
	case has("pyproject.toml") != nil:
		r.gate = "python3 -m pytest"
	}
	return r
}

// checkFlags validates the flags and returns the agent names.
func (m *initOptions) checkFlags() ([]string, error) {
	if !slices.Contains(initBackends, m.Backend) {
		return nil, usagef("--backend %q: want one of %s (other backends are configured under backends: in swarmd.yaml)",
			m.Backend, strings.Join(initBackends, ", "))
	}
	var agents []string
	for _, a := range m.Agents {
		a = strings.TrimSpace(a)
		switch {
		case !agent.ValidName(a):
			return nil, usagef("--agents: %q is not a valid agent name (lowercase letters, digits and '-', starting with a letter, at most 32 characters)", a)
		case a == "operator":
			return nil, usagef("--agents: %q is reserved: it is the mail sender outside any session", a)
		case slices.Contains(agents, a):
			return nil, usagef("--agents: %q is named twice", a)
		}
		agents = append(agents, a)
	}
	if len(agents) == 0 {
		return nil, usagef("--agents: name at least one agent")
	}
	switch fi, err := os.Stat(m.Dir); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, usagef("--dir %s does not exist", m.Dir)
	case err != nil:
		return nil, usagef("--dir: %w", err)
	case !fi.IsDir():
		return nil, usagef("--dir %s is not a directory", m.Dir)
	}
	return agents, nil
}

// report says what was written and what to do next, with notes on what
// `swarmd run` will need and is missing.
func (m *initOptions) report(files []initFile, cfgPath string) error {
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "wrote %s\n", filepath.Join(m.Dir, f.rel))
	}
	if _, err := git.PlainOpenWithOptions(m.Dir, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true}); err != nil {
		fmt.Fprintf(&b, "\nnote: %s is not in a git repository; swarmd run needs one (git init, or set repo: in swarmd.yaml)\n", m.Dir)
	}
	if m.Backend == config.TypeCommand {
		fmt.Fprintf(&b, `
Next (the command backend runs %s: no model, no API key):
  swarmd config validate -c %s
  swarmd run -c %s
  swarmd task add -c %s "first task"      (in another terminal)
`, filepath.Join(m.Dir, "prompts", "work.sh"), cfgPath, cfgPath, cfgPath)
		_, err := fmt.Fprint(m.IO.Out, b.String())
		return err
	}
	if _, err := exec.LookPath(m.Backend); err != nil {
		fmt.Fprintf(&b, "\nnote: the %s CLI is not in PATH; install it before swarmd run\n", m.Backend)
	}
	fmt.Fprintf(&b, `
Next:
  1. Say what each agent is for in its prompt file.
  2. Give swarmd's environment the agents' API key (%s).
  3. swarmd config validate -c %s
  4. swarmd run -c %s
  5. swarmd task add -c %s "first task"      (in another terminal)
`, apiKeyVar(m.Backend), cfgPath, cfgPath, cfgPath)
	_, err := fmt.Fprint(m.IO.Out, b.String())
	return err
}

func apiKeyVar(backend string) string {
	switch backend {
	case config.TypeCodex:
		return "OPENAI_API_KEY, or codex login"
	case config.TypeGemini:
		return "GEMINI_API_KEY"
	}
	return "ANTHROPIC_API_KEY, or claude login"
}

// writeFileReplacing writes data to path through a temporary file and a
// rename, so that a reader never sees half a file and a failed write leaves
// the old one.
func writeFileReplacing(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// starterData fills starterTemplate. The defaults come from package config,
// so the commented-out values are the real defaults.
type starterData struct {
	Into, Gate              string // the merge queue's: "" leaves it out
	WorkScript              string // the command backend's script, absolute
	Backend, DefaultBackend string
	Agents                  []string
	StateDir, BaseRef       string
	Listen                  string
	StallAfter              string
	Isolation               string
	SessionTimeout          string
	GracePeriod             string
	MaxConsecutiveErrors    int
	MaxTotalErrors          int
	KeepArchives            int
	RotateSessions          int
	HistoryMaxAge           string
	MaxAge                  string
	HookTimeout             string
	MaxBody                 int
	MinSessionInterval      string
	MaxSessionBytes         int
}

func starterConfig(agents []string, backend string, repo initRepo) []byte {
	d := starterData{
		Into:                 repo.branch,
		Gate:                 repo.gate,
		WorkScript:           filepath.Join(repo.dir, "prompts", "work.sh"),
		Backend:              backend,
		DefaultBackend:       config.DefaultBackend,
		Agents:               agents,
		StateDir:             config.DefaultStateDir,
		BaseRef:              config.DefaultBaseRef,
		Listen:               config.DefaultListen,
		StallAfter:           config.FormatDuration(config.DefaultStallAfter),
		Isolation:            config.IsolationAuto,
		SessionTimeout:       config.FormatDuration(config.DefaultSessionTimeout),
		GracePeriod:          config.FormatDuration(config.DefaultGracePeriod),
		MaxConsecutiveErrors: config.DefaultMaxConsecutiveErrors,
		MaxTotalErrors:       config.DefaultMaxTotalErrors,
		KeepArchives:         config.DefaultKeepArchives,
		RotateSessions:       config.DefaultRotateSessions,
		HistoryMaxAge:        config.FormatDuration(config.DefaultHistoryMaxAge),
		MaxAge:               config.FormatDuration(config.DefaultMaxAge),
		HookTimeout:          config.FormatDuration(config.DefaultHookTimeout),
		MaxBody:              config.DefaultMaxBody,
		MinSessionInterval:   config.FormatDuration(config.DefaultMinSessionInterval),
		MaxSessionBytes:      config.DefaultMaxSessionBytes,
	}
	if backend == config.TypeCommand {
		d.Backend = "work"
	}
	var b bytes.Buffer
	if err := starterTemplate.Execute(&b, d); err != nil {
		panic(err) // the template and its data are fixed: a test runs every branch
	}
	return b.Bytes()
}

// starterTemplate is the starter config. A commented-out key ("# key:
// value") shows its default; a test uncomments them all and checks that
// nothing changes.
var starterTemplate = template.Must(template.New("swarmd.yaml").Funcs(template.FuncMap{
	// kv aligns the comments after "key: value".
	"kv": func(key string, value any) string { return fmt.Sprintf("%-27s ", fmt.Sprintf("%s: %v", key, value)) },
	"q":  strconv.Quote, // a YAML double-quoted string
}).Parse(`# yaml-language-server: $schema=` + schemaFile + `
# swarmd.yaml: the swarm that 'swarmd run' keeps working on one git repository.
# Written by 'swarmd init'. Every key, its default and its rule: docs/configuration.md
# in swarmd's repository; editors complete and check keys with ` + schemaFile + `.
#
# A commented-out key shows its default: uncomment it to change it.
# Durations are Go durations (30s, 10m, 720h). Relative paths are relative to
# this file. Check the file with: swarmd config validate -c swarmd.yaml

# The git repository the agents work on.
repo: .
# swarmd's state, relative to repo: the mailbox (swarm.db), session logs and
# archives, the agents' worktrees (branches swarm/AGENT/work) and the control
# socket. swarmd adds it to .git/info/exclude.
# state_dir: {{.StateDir}}
# What new agent branches start from.
# base_ref: {{.BaseRef}}
# Prometheus /metrics, /healthz and /readyz; "" turns the listener off.
# listen: {{.Listen}}
# 'swarmd status' shows a Running session as stalled after this long without output.
# stall_after: {{.StallAfter}}
# How sessions, hooks and merge gates are contained. auto: a cgroup each where
# this host allows it, and a bubblewrap sandbox each where bwrap is installed
# (apt-get install bubblewrap): a session writes only its worktree, its branch,
# its HOME and a private /tmp, and never sees swarm.db or the other agents.
# 'swarmd status' says what is in force. strict: refuse to start without both,
# or with agents that share a HOME (give each env: {HOME: ...} of its own).
# isolation: {{.Isolation}}
# More directories sessions may write (a shared build cache; a merge gate run
# gets an empty one of its own at each), and what they need under /tmp,
# which is private to each.
# sandbox: {writable: [], readable: []}

# Every agent inherits these; an agent may override any of them.
defaults:
{{- if eq .Backend .DefaultBackend}}
  # {{kv "backend" .DefaultBackend}}# claude, codex, gemini or a name under backends:
{{- else}}
  {{kv "backend" .Backend}}  # claude, codex, gemini or a name under backends:
{{- end}}
  # {{kv "session_timeout" .SessionTimeout}}# a session still running after this ends as a Timeout
  # {{kv "grace_period" .GracePeriod}}# a cancelled session is killed (SIGKILL) after this
  # {{kv "max_consecutive_errors" .MaxConsecutiveErrors}}# the agent stops after this many failed sessions in a row
  # {{kv "max_total_errors" .MaxTotalErrors}}# ...or after this many in all
  # {{kv "env" "{}"}}# extra environment for the backend, e.g. {GOFLAGS: -mod=mod}
  # {{kv "min_session_interval" .MinSessionInterval}}# least time between two session starts (0: none)

# Session logs of an agent are archived when it stops (after a stop of the
# whole daemon, when it starts again), and every rotate_sessions sessions
# while it runs.
logs:
  # {{kv "keep_archives" .KeepArchives}}# archives kept per agent
  # {{kv "rotate_sessions" .RotateSessions}}# a running agent's ended sessions per archive (0: only at its stop)
  # {{kv "max_age" .MaxAge}}# older archives are deleted
  # {{kv "max_session_bytes" .MaxSessionBytes}}# 64 MiB; a session's output past it is dropped, and counted in its log

# The event log's agent events and the tool audit older than max_age are
# deleted (hourly); a task's events are kept. 0s keeps everything.
history:
  # {{kv "max_age" .HistoryMaxAge}}

# Shell commands run in the agent's worktree with the SWARM_* variables and a
# JSON description of the event on stdin. Output goes to the daemon log; a
# failing hook is logged, never blocks the agent, except that a session_start
# hook exiting 2 blocks that session.
hooks:
  # {{kv "agent_start" "[]"}}# once per agent run, before its first session
  # {{kv "session_start" "[]"}}# before each session, e.g. ["git fetch -q origin"]
  # {{kv "session_end" "[]"}}# after each session
  # {{kv "agent_stopped" "[]"}}# once, when the agent stops
  # {{kv "timeout" .HookTimeout}}# per hook run

mailbox:
  # {{kv "max_body" .MaxBody}}# bytes; longer messages are refused, never cut

# The web dashboard and its JSON API on listen. Without a token it is
# read-only; with one, stopping, starting, mail and new tasks need it as a
# bearer token (make one with: openssl rand -hex 24).
web:
  # {{kv "token" "\"\""}}# at least 16 characters; "" keeps the dashboard read-only

# Who is told when something needs a person (an agent stopped for good, a
# task failed past its limits, a budget spent, the daemon unhealthy): one POST
# per event to a webhook, as json, slack ({"text": ...}) or ntfy.
notify:
  # {{kv "webhook" "\"\""}}# an http(s) URL; "" sends nothing
  # {{kv "format" "json"}}# json, slack or ntfy

# Named backends. claude, codex and gemini are built in; an entry named after
# one adjusts it, and its args are appended to swarmd's own invocation of the
# CLI. Any other name needs a type: claude, codex, gemini, or command (any
# program, given the prompt on stdin; its exit code is the outcome), such as:
#
#   tests:
#     type: command
#     command: sh
#     args: [-c, "cat >/dev/null; make test"]
#     cancel_signal: SIGTERM       # default: SIGINT for claude and codex, SIGTERM otherwise
backends:
{{- if eq .Backend "claude"}}
  claude:
    # Which model: the CLI's default unless set, e.g. model: sonnet
    # The agents work unattended: without this, Claude Code denies every tool
    # that asks for permission (edits, shell commands). For a narrower grant,
    # remove it and list the tools instead:
    #   allowed_tools: [Read, Edit, Write, Glob, Grep, "Bash(git:*)", "Bash(make:*)"]
    args: [--dangerously-skip-permissions]
{{- else if eq .Backend "codex"}}
  codex:
    # Which model: the CLI's default unless set, e.g. model: gpt-5-codex
    # The agents work unattended. Codex's own sandbox (--full-auto) cannot
    # write the worktree's git directory, which lives in the repository's
    # .git, so the agents could not commit under it.
    args: [--dangerously-bypass-approvals-and-sandbox]
{{- else if eq .Backend "gemini"}}
  gemini:
    # Which model: the CLI's default unless set, e.g. model: gemini-2.5-pro
    # The agents work unattended: approve every tool call.
    args: [--yolo]
{{- else if eq .Backend "work"}}
  # Each session runs the script swarmd init wrote (no model, no API key): it
  # does the task it is given, commits, and says DONE. Replace it with your
  # own program; it reads the prompt on standard input.
  work:
    type: command
    command: sh
    args: [{{q .WorkScript}}]
{{- end}}
{{- if .Into}}

# The merge queue: a task's finished work is merged into {{.Into}} (the branch
# checked out when swarmd init ran) once the gate passes in a clean checkout.
merge:
  into: {{q .Into}}
{{- if .Gate}}
  gate: [{{q .Gate}}]
{{- else}}
  gate: []   # no test command found: add yours, e.g. ["make test"]
{{- end}}
{{- else}}

# To merge finished tasks into a branch, add a merge section, e.g.
#   merge: {into: main, gate: ["make test"]}
# (swarmd init found no branch checked out in this directory).
{{- end}}

# The agents. A role is a prompt file (relative to this file) or inline text:
# the standing instructions in every prompt the agent gets. Names: lowercase
# letters, digits and '-'; each agent works on branch swarm/NAME/work.
agents:
{{- range .Agents}}
  - name: {{.}}
    role: prompts/{{.}}.md
{{- end}}
`))

// theOthers names the other agents in a sentence.
func theOthers(others []string) string {
	if len(others) == 1 {
		return "the other is " + others[0]
	}
	return "the others are " + strings.Join(others[:len(others)-1], ", ") + " and " + others[len(others)-1]
}

// rolePrompt is a starter role: useful as it is, meant to be rewritten.
func rolePrompt(name string, agents []string) []byte {
	others := slices.DeleteFunc(slices.Clone(agents), func(a string) bool { return a == name })
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- Written by swarmd init: %s's role, the standing instructions in every prompt it gets.\n", name)
	b.WriteString("     Replace it with what this agent is for: its job, what done looks like, whom it works with. -->\n\n")
	if len(others) == 0 {
		fmt.Fprintf(&b, "You are %s, the only agent working on this repository.\n", name)
	} else {
		fmt.Fprintf(&b, "You are %s, one of %d agents working on this repository; %s.\n", name, len(agents), theOthers(others))
	}
	b.WriteString(`
Your job is steady, reviewable progress. In each session:

1. Read your mail first and act on what other agents ask of you.
2. Pick one small, useful piece of work: a failing test, a bug, a TODO in the
   code, an open item in the project's docs or issue list.
`)
	if len(others) > 0 {
		b.WriteString(`   Before you start on something sizeable, tell the others what you are taking
   (swarmd mail send --all --subject "taking: ..." "...") so that nobody
   duplicates it.
`)
	}
	b.WriteString(`3. Do it on your branch, run the project's tests, and commit with a message
   that says what changed and why.
4. Finish the session once that piece is committed: the next session starts
   fresh, with your mail and your branch's recent commits.
`)
	if len(others) > 0 {
		b.WriteString(`
To build on another agent's work, merge its branch (git merge swarm/NAME/work) into
yours. Use --urgent mail only when the recipient must stop what it is doing.
`)
	}
	return []byte(b.String())
}
