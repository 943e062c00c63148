package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/config"
)

func initOpts(dir string, agents ...string) (*initOptions, *bytes.Buffer) {
	out := &bytes.Buffer{}
	return &initOptions{
		IO:      Streams{In: strings.NewReader(""), Out: out, Err: &bytes.Buffer{}, Getenv: func(string) string { return "" }},
		Dir:     dir,
		Agents:  agents,
		Backend: config.TypeCommand,
	}, out
}

// TestInitWritesThenRefusesToOverwrite: init writes a config that loads
// with the agents asked for, their prompts and the command backend's
// script; a second init writes nothing and says which files are in the way.
func TestInitWritesThenRefusesToOverwrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o, _ := initOpts(dir, "alice", " bob")
	if err := initRun(ctx, o); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(dir, "swarmd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.AgentNames(), ","); got != "alice,bob" {
		t.Errorf("agents %s, want alice,bob", got)
	}
	for _, f := range []string{"prompts/alice.md", "prompts/bob.md", "prompts/work.sh", ".swarmd.schema.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("init wrote no %s: %v", f, err)
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "prompts", "alice.md"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, _ = initOpts(dir, "alice")
	err = initRun(ctx, o)
	wantUsage(t, err, err.Error())
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "prompts", "alice.md")) ||
		!strings.HasSuffix(err.Error(), "already exists; nothing was written (--force overwrites)") {
		t.Errorf("a second init: %v, want the files in the way named", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "prompts", "alice.md")); string(b) != "mine" {
		t.Errorf("a refused init changed alice's prompt to %q", b)
	}
}

// TestInitRefusesBadFlags: each bad flag is a usage error that names it.
func TestInitRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		agents  []string
		backend string
		dir     string
		want    string
	}{
		{[]string{"Alice"}, config.TypeCommand, dir, `--agents: "Alice" is not a valid agent name (lowercase letters, digits and '-', starting with a letter, at most 32 characters)`},
		{[]string{"operator"}, config.TypeCommand, dir, `--agents: "operator" is reserved: it is the mail sender outside any session`},
		{[]string{"a", "a"}, config.TypeCommand, dir, `--agents: "a" is named twice`},
		{[]string{"a"}, "gpt", dir, `--backend "gpt": want one of claude, codex, gemini, command (other backends are configured under backends: in swarmd.yaml)`},
		{[]string{"a"}, config.TypeCommand, filepath.Join(dir, "nowhere"), "--dir " + filepath.Join(dir, "nowhere") + " does not exist"},
	} {
		o, _ := initOpts(c.dir, c.agents...)
		o.Backend = c.backend
		wantUsage(t, initRun(context.Background(), o), c.want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused inits wrote %d entries in %s", len(entries), dir)
	}
}

// The starter session works on the task its prompt gives, whether it is
// a new one ("Your task: #N: ...") or one to continue ("Continue your task
// #N: ..."), and is idle without one: it read only the first, and said
// DONE on a continued task with nothing done.
func TestInitsWorkScriptReadsTheTask(t *testing.T) {
	for prompt, want := range map[string]string{
		"## Tasks\n\nYour task: #3: the parser\n":           "- #3 the parser\n",
		"## Tasks\n\nContinue your task #7: the lexer\n":    "- #7 the lexer\n",
		"## Tasks\n\nNo task for you now; mail may wait.\n": "",
	} {
		dir := t.TempDir()
		for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "init"}} {
			if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		cmd := exec.Command("sh", "-c", workScript)
		cmd.Dir, cmd.Stdin = dir, strings.NewReader(prompt)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasSuffix(string(out), "DONE\n") {
			t.Fatalf("work.sh on %q: %v\n%s", prompt, err, out)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "WORKLOG.md"))
		if string(got) != want {
			t.Errorf("work.sh on %q wrote %q, want %q", prompt, got, want)
		}
	}
}
