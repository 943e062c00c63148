package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/cli"
	"github.com/swarmd/swarmd/internal/config"
)

// cliRoot is the command tree with init and completion, whether or not
// newRootCommand adds them itself.
func cliRoot(s streams) *cobra.Command {
	root := newRootCommand(s)
	have := map[string]bool{}
	for _, c := range root.Commands() {
		have[c.Name()] = true
	}
	if !have["init"] {
		root.AddCommand(cli.NewInitCommand(s.cli()))
	}
	if !have["completion"] {
		root.AddCommand(newCompletionCommand())
	}
	return root
}

// runInProcess runs one command line through the command tree and returns
// its standard output and error; Main would exit 2 for a cli.UsageError.
func runInProcess(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	s := streams{in: strings.NewReader(""), out: &out, err: &errOut, getenv: func(string) string { return "" }}
	root := cliRoot(s)
	root.SetArgs(args)
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

func isUsage(err error) bool {
	var ue cli.UsageError
	return errors.As(err, &ue)
}

func TestInitWritesALoadableConfig(t *testing.T) {
	dir := gitRepo(t)
	out, err := runInProcess(t, "init", "--dir", dir, "--agents", "alice,bob,carol")
	if err != nil {
		t.Fatalf("init: %v", err)
	}
	cfgPath := filepath.Join(dir, "swarmd.yaml")
	for _, f := range []string{cfgPath, filepath.Join(dir, "prompts", "alice.md"), filepath.Join(dir, "prompts", "carol.md")} {
		if !strings.Contains(out, "wrote "+f) {
			t.Errorf("output does not report %s:\n%s", f, out)
		}
	}
	if strings.Contains(out, "not in a git repository") {
		t.Errorf("a git repository reported as not one:\n%s", out)
	}
	if !strings.Contains(out, "swarmd run -c "+cfgPath) {
		t.Errorf("output does not say how to run the swarm:\n%s", out)
	}

	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("load the written config: %v", err)
	}
	if got, want := cfg.AgentNames(), []string{"alice", "bob", "carol"}; !slices.Equal(got, want) {
		t.Errorf("agents %v, want %v", got, want)
	}
	for _, a := range cfg.Agents {
		if want := filepath.Join(dir, "prompts", a.Name+".md"); a.RoleFile != want {
			t.Errorf("%s: role file %q, want %q", a.Name, a.RoleFile, want)
		}
		if !strings.Contains(a.Role, "You are "+a.Name+", one of 3 agents") || strings.Contains(a.Role, "others are "+a.Name) {
			t.Errorf("%s: role does not introduce the agent among the others:\n%s", a.Name, a.Role)
		}
		if a.Backend != config.TypeClaude {
			t.Errorf("%s: backend %q, want claude", a.Name, a.Backend)
		}
	}
	if cfg.Repo != dir {
		t.Errorf("repo %q, want %q", cfg.Repo, dir)
	}
	// Unattended agents need their CLI's permission flag, or every edit is denied.
	if args := cfg.Backends[config.TypeClaude].Args; !slices.Equal(args, []string{"--dangerously-skip-permissions"}) {
		t.Errorf("claude args %q", args)
	}

	// A lone agent is told it is alone, and not to coordinate with nobody.
	solo := t.TempDir()
	if _, err := runInProcess(t, "init", "--dir", solo, "--agents", "solo"); err != nil {
		t.Fatal(err)
	}
	role := readText(t, filepath.Join(solo, "prompts", "solo.md"))
	if !strings.Contains(role, "the only agent") || strings.Contains(role, "--all") {
		t.Errorf("solo role:\n%s", role)
	}
}

// commentedKeyRE is a commented-out setting of the starter config.
var commentedKeyRE = regexp.MustCompile(`^(\s*)# ([a-z_]+):( .*)?$`)

// TestInitCommentedDefaultsAreTheDefaults uncomments every commented-out key
// of the starter config: the result must load to the very same config, so
// each commented value is the real default, and every key must be there.
func TestInitCommentedDefaultsAreTheDefaults(t *testing.T) {
	every := []string{"state_dir", "base_ref", "listen", "stall_after", "isolation", "sandbox", "backend", "session_timeout", "grace_period",
		"max_consecutive_errors", "max_total_errors", "env", "keep_archives", "rotate_sessions", "max_age", "max_age", "agent_start",
		"session_start", "session_end", "agent_stopped", "timeout", "max_body", "min_session_interval", "max_session_bytes", "token", "webhook", "format"}
	for _, backend := range []string{config.TypeClaude, config.TypeCodex, config.TypeGemini} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := runInProcess(t, "init", "--dir", dir, "--backend", backend); err != nil {
				t.Fatal(err)
			}
			written := filepath.Join(dir, "swarmd.yaml")
			var b strings.Builder
			var keys []string
			sc := bufio.NewScanner(strings.NewReader(readText(t, written)))
			for sc.Scan() {
				line := sc.Text()
				if m := commentedKeyRE.FindStringSubmatch(line); m != nil {
					keys = append(keys, m[2])
					line = m[1] + m[2] + ":" + m[3]
				}
				b.WriteString(line + "\n")
			}
			uncommented := filepath.Join(dir, "uncommented.yaml")
			if err := os.WriteFile(uncommented, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}

			want := every
			if backend != config.DefaultBackend {
				// Not the default, so not commented out: the agents run it.
				want = slices.DeleteFunc(slices.Clone(every), func(k string) bool { return k == "backend" })
			}
			slices.Sort(keys)
			slices.Sort(want)
			if !slices.Equal(keys, want) {
				t.Errorf("commented-out keys %v, want %v", keys, want)
			}

			a, err := config.Load(written)
			if err != nil {
				t.Fatalf("load as written: %v", err)
			}
			u, err := config.Load(uncommented)
			if err != nil {
				t.Fatalf("load uncommented: %v\n%s", err, b.String())
			}
			a.Path, u.Path = "", ""
			if as, us := fmt.Sprintf("%+v", *a), fmt.Sprintf("%+v", *u); as != us {
				t.Errorf("uncommenting the defaults changed the config:\nas written:  %s\nuncommented: %s", as, us)
			}
			if a.Defaults.Backend != backend || len(a.Backends[backend].Args) != 1 {
				t.Errorf("defaults.backend %q, %s args %q", a.Defaults.Backend, backend, a.Backends[backend].Args)
			}
			// The values are the package's defaults (as the unit test of the
			// uncommented file cannot tell a default that both got wrong).
			if a.Defaults.SessionTimeout != config.DefaultSessionTimeout || a.Logs.MaxAge != config.DefaultMaxAge ||
				a.StallAfter != config.DefaultStallAfter || a.Mailbox.MaxBody != config.DefaultMaxBody {
				t.Errorf("defaults not the package's: %+v", a)
			}
		})
	}
}

func TestInitRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "prompts", "bob.md")
	if err := os.MkdirAll(filepath.Dir(mine), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mine, []byte("my own role\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	_, err := runInProcess(t, "init", "--dir", dir, "--agents", "alice,bob")
	if !isUsage(err) || !strings.Contains(err.Error(), mine) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("init over an existing prompt: %v; want a usage error naming %s and --force", err, mine)
	}
	for _, f := range []string{"swarmd.yaml", "prompts/alice.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was written by a refused init (stat: %v)", f, err)
		}
	}
	if got := readText(t, mine); got != "my own role\n" {
		t.Errorf("existing prompt changed to %q", got)
	}

	if _, err := runInProcess(t, "init", "--dir", dir, "--agents", "alice,bob", "--force"); err != nil {
		t.Fatalf("init --force: %v", err)
	}
	if got := readText(t, mine); got == "my own role\n" {
		t.Error("--force did not overwrite the prompt")
	}
	if _, err := config.Load(filepath.Join(dir, "swarmd.yaml")); err != nil {
		t.Error(err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	_, err = runInProcess(t, "init", "--dir", dir, "--agents", "carol")
	if !isUsage(err) || !strings.Contains(err.Error(), filepath.Join(dir, "swarmd.yaml")) {
		t.Errorf("init over an existing config: %v", err)
	}
}

func TestInitRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--agents", "Bob"}, `"Bob" is not a valid agent name`},
		{[]string{"--agents", "alice,alice"}, `"alice" is named twice`},
		{[]string{"--agents", "operator"}, "reserved"},
		{[]string{"--agents", ""}, "at least one agent"},
		{[]string{"--backend", "gpt"}, `--backend "gpt": want one of claude, codex, gemini`},
		{[]string{"--dir", filepath.Join(dir, "missing")}, "does not exist"},
		{[]string{"--dir", file}, "is not a directory"},
		{[]string{"extra"}, `init: takes no argument (got "extra")`},
		{[]string{"--bogus"}, "bogus"},
	}
	for _, c := range cases {
		args := append([]string{"init"}, c.args...)
		if !slices.Contains(c.args, "--dir") {
			args = append(args, "--dir", dir)
		}
		_, err := runInProcess(t, args...)
		if !isUsage(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want a usage error containing %q", c.args, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("refused inits wrote files: %v", entries)
	}
}

func TestInitNotesWhatRunWillMiss(t *testing.T) {
	dir := t.TempDir() // not a repository
	t.Setenv("PATH", t.TempDir())
	out, err := runInProcess(t, "init", "--dir", dir, "--backend", "gemini")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"is not in a git repository", "the gemini CLI is not in PATH", "GEMINI_API_KEY"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	markers := map[string]string{
		"bash": "__start_swarmd",
		"zsh":  "#compdef swarmd",
		"fish": "complete -c swarmd",
	}
	for shell, marker := range markers {
		out, err := runInProcess(t, "completion", shell)
		if err != nil {
			t.Errorf("completion %s: %v", shell, err)
			continue
		}
		if len(out) < 200 || !strings.Contains(out, marker) {
			t.Errorf("completion %s: %d bytes without %q", shell, len(out), marker)
		}
	}
	for _, args := range [][]string{{"completion"}, {"completion", "powershell"}, {"completion", "bash", "zsh"}} {
		if _, err := runInProcess(t, args...); !isUsage(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}

	// The scripts call `swarmd __complete` at each TAB: check what it offers.
	complete := func(args ...string) []string {
		out, err := runInProcess(t, append([]string{cobra.ShellCompRequestCmd}, args...)...)
		if err != nil {
			t.Fatalf("__complete %q: %v", args, err)
		}
		var words []string
		for _, l := range strings.Split(out, "\n") {
			if l != "" && !strings.HasPrefix(l, ":") {
				w, _, _ := strings.Cut(l, "\t")
				words = append(words, w)
			}
		}
		return words
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{""}, []string{"init", "completion", "run", "status"}},
		{[]string{"completion", ""}, completionShells},
		{[]string{"init", "--backend", ""}, []string{config.TypeClaude, config.TypeCodex, config.TypeGemini, config.TypeCommand}},
		{[]string{"init", "--"}, []string{"--agents", "--backend", "--dir", "--force"}},
	} {
		got := complete(c.args...)
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("swarmd %s<TAB> offers %q, want %q among them", strings.Join(c.args, " "), got, w)
			}
		}
	}
}

// TestExampleConfigsLoad loads every configs/*.yaml as an operator would.
func TestExampleConfigsLoad(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "configs", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	loaded := map[string]*config.Config{}
	for _, p := range paths {
		cfg, err := config.Load(p)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		loaded[filepath.Base(p)] = cfg
	}
	typesOf := func(name string) []string {
		cfg := loaded[name]
		if cfg == nil {
			t.Fatalf("configs/%s is missing or does not load (have %v)", name, paths)
		}
		var types []string
		for _, a := range cfg.Agents {
			if typ := cfg.Backends[a.Backend].Type; !slices.Contains(types, typ) {
				types = append(types, typ)
			}
			if a.RoleFile == "" {
				t.Errorf("%s: agent %s has no role file", name, a.Name)
			}
		}
		slices.Sort(types)
		return types
	}
	if got := typesOf("claude-3.yaml"); !slices.Equal(got, []string{config.TypeClaude}) || len(loaded["claude-3.yaml"].Agents) != 3 {
		t.Errorf("claude-3.yaml: backend types %v, %d agents; want 3 claude agents", got, len(loaded["claude-3.yaml"].Agents))
	}
	if got := typesOf("mixed.yaml"); !slices.Equal(got, []string{config.TypeClaude, config.TypeCodex}) {
		t.Errorf("mixed.yaml: backend types %v, want claude and codex", got)
	}
	if loaded["demo.yaml"] == nil {
		t.Error("configs/demo.yaml is missing or does not load")
	}
}

// TestDeployUnitCommandLineParses runs the systemd unit's ExecStart through
// the real command tree, so that renaming a flag breaks this test rather
// than every installed service.
func TestDeployUnitCommandLineParses(t *testing.T) {
	var argv []string
	sc := bufio.NewScanner(strings.NewReader(readText(t, filepath.Join("..", "..", "deploy", "swarmd.service"))))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			argv = strings.Fields(v)
		}
	}
	if len(argv) < 2 || filepath.Base(argv[0]) != "swarmd" {
		t.Fatalf("ExecStart %q: want swarmd and its arguments", argv)
	}
	root := cliRoot(streams{in: strings.NewReader(""), out: io.Discard, err: io.Discard, getenv: func(string) string { return "" }})
	cmd, rest, err := root.Find(argv[1:])
	if err != nil || cmd.Name() != "run" {
		t.Fatalf("ExecStart %q: finds command %q (%v), want run", argv, cmd.Name(), err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("ExecStart %q: %v", argv, err)
	}
	if extra := cmd.Flags().Args(); len(extra) > 0 {
		t.Errorf("ExecStart %q: stray arguments %q", argv, extra)
	}
	format, _ := cmd.Flags().GetString("log-format")
	level, _ := cmd.Flags().GetString("log-level")
	if _, err := newLogger(io.Discard, format, level); err != nil {
		t.Errorf("ExecStart %q: %v", argv, err)
	}
	if format != "json" {
		t.Errorf("ExecStart log format %q: journald wants json", format)
	}
}

func readText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestInitToMergedWork is a newcomer's first hour: a fresh repository on a
// branch named trunk with a Makefile test target; `swarmd init --backend
// command` with nothing edited after it; `swarmd run`; one task added; the
// task's work merged into trunk by the merge queue, the gate being the
// Makefile's test target that init found.
func TestInitToMergedWork(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "trunk"}, {"config", "user.email", "dev@example.com"}, {"config", "user.name", "Dev"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte("test:\n\ttest -f Makefile\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "."}, {"commit", "-q", "-m", "a project"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	stdout, stderr, code := runCLIIn(t, dir, nil, "init", "--backend", "command")
	if code != 0 || !strings.Contains(stdout, "swarmd run") || !strings.Contains(stdout, "swarmd task add") {
		t.Fatalf("init: exit %d\n%s%s", code, stdout, stderr)
	}
	cfg := readText(t, filepath.Join(dir, "swarmd.yaml"))
	if !strings.Contains(cfg, `into: "trunk"`) || !strings.Contains(cfg, `gate: ["make test"]`) {
		t.Fatalf("init's merge section does not name trunk and make test:\n%s", cfg)
	}
	if l, err := net.Listen("tcp", "127.0.0.1:9464"); err != nil {
		// A swarmd runs on this machine (a developer's): the one edit, so
		// that the test does not fail on the machine instead of the code.
		t.Logf("the default listen address is taken (%v): listen turned off", err)
		if err := os.WriteFile(filepath.Join(dir, "swarmd.yaml"), []byte(cfg+"\nlisten: \"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		l.Close()
	}
	d := startDaemon(t, filepath.Join(dir, "swarmd.yaml"))
	d.waitLine("the swarm running", func(m map[string]any) bool { return m["msg"] == "swarmd running" })
	if _, stderr, code := runCLIIn(t, dir, nil, "task", "add", "write the first entry"); code != 0 {
		t.Fatalf("task add: %s", stderr)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := exec.Command("git", "-C", dir, "show", "trunk:WORKLOG.md").Output()
		if strings.Contains(string(out), "write the first entry") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task's work is not on trunk after 60 s; log:\n%s", d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
}
