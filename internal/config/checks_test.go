package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/proc"
)

// parseIn writes body as dir/swarmd.yaml and parses it with opts.
func parseIn(t *testing.T, dir, body string, opts Options) (*Config, error) {
	t.Helper()
	path := filepath.Join(dir, "swarmd.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return LoadWith(path, opts)
}

// oneProblem asserts that err is exactly one problem at line and key whose
// message contains want, and returns it.
func oneProblem(t *testing.T, err error, line int, key, want string) *Error {
	t.Helper()
	var all Errors
	if !errors.As(err, &all) || len(all) != 1 {
		t.Fatalf("want one problem, got %v", err)
	}
	e := all[0]
	if e.Line != line || e.Key != key || !strings.Contains(e.Msg, want) {
		t.Errorf("got %s\nwant line %d, key %s, message with %q", e, line, key, want)
	}
	if strings.Contains(e.Error(), "\n") {
		t.Errorf("problem spans lines: %q", e)
	}
	return e
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRoleFileMustBeAPromptFile(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "conf")          // the config's directory
	repo := filepath.Join(root, "repo")          // the repository, elsewhere
	outside := filepath.Join(root, "outside.md") // under neither
	writeFile(t, filepath.Join(conf, "prompts", "in-conf.md"), "In conf.\n")
	writeFile(t, filepath.Join(repo, "prompts", "in-repo.md"), "In repo.\n")
	writeFile(t, outside, "Outside.\n")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("/proc/self/environ", filepath.Join(conf, "env.md")))
	must(os.Symlink(outside, filepath.Join(conf, "escape.md")))
	must(os.Symlink(filepath.Join(conf, "prompts", "in-conf.md"), filepath.Join(conf, "link.md")))
	must(os.Mkdir(filepath.Join(conf, "dir.md"), 0o755))
	must(unix.Mkfifo(filepath.Join(conf, "fifo.md"), 0o644))

	cfg := func(role string) string {
		return "repo: ../repo\nlisten: \"\"\nagents:\n  - name: alice\n    role: " + role + "\n"
	}
	refused := []struct{ name, role, want string }{
		{"proc environ, absolute", "/proc/self/environ", "is under /proc, which holds kernel and device files"},
		{"proc environ through ..", "../../../../../../../../proc/self/environ", "is under /proc"},
		{"proc environ through a symlink", "env.md", "is under /proc"},
		{"sys", "/sys/kernel/notes", "is under /sys"},
		{"dev null", "/dev/null", "is a character device, not a regular file"},
		{"relative path outside", "../outside.md", "outside the config's directory and the repository"},
		{"symlink escaping", "escape.md", "resolves to " + outside + ", outside the config's directory"},
		{"directory", "dir.md", "is a directory, not a regular file"},
		{"fifo", "fifo.md", "is a FIFO, not a regular file"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "sys" {
				if fi, err := os.Stat(tt.role); err != nil || !fi.Mode().IsRegular() {
					t.Skipf("%s is not a regular file here", tt.role)
				}
			}
			_, err := parseIn(t, conf, cfg(tt.role), Options{})
			e := oneProblem(t, err, 5, "agents[0].role", tt.want)
			if strings.Contains(e.Error(), "SWARM") || strings.Contains(e.Error(), "PATH=") {
				t.Errorf("the error carries the environment: %s", e)
			}
		})
	}

	allowed := []struct{ name, role, text string }{
		{"under the config's directory", "prompts/in-conf.md", "In conf.\n"},
		{"in the repository, relative to the config", "../repo/prompts/in-repo.md", "In repo.\n"},
		{"symlink that stays inside", "link.md", "In conf.\n"},
		{"absolute path elsewhere, on purpose", outside, "Outside.\n"},
	}
	for _, tt := range allowed {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseIn(t, conf, cfg(tt.role), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Agents[0].Role != tt.text {
				t.Errorf("role %q, want %q", c.Agents[0].Role, tt.text)
			}
		})
	}
}

// TestBackendPrograms: with a LookPath, every backend an agent uses must
// have its program; without one (commands that only read the config) the
// file alone is checked.
func TestBackendPrograms(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	writeFile(t, filepath.Join(bin, "fake-cli"), "#!/bin/sh\nexit 0\n")
	if err := os.Chmod(filepath.Join(bin, "fake-cli"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "not-exec"), "#!/bin/sh\n")
	t.Setenv("PATH", "/usr/bin:/bin") // sh is there; no agent CLI is
	opts := Options{LookPath: proc.LookPath}

	tests := []struct {
		name, body string
		line       int
		key, want  string
	}{
		{"built-in CLI not installed, chosen by default", "agents:\n  - {name: a, role: x}\n",
			2, "agents[0].backend", `command "claude" of backend "claude" is not in PATH (install it, or set backends.claude.command to its absolute path)`},
		{"built-in CLI chosen in defaults", "defaults:\n  backend: codex\nagents:\n  - {name: a, role: x}\n",
			2, "defaults.backend", `command "codex" of backend "codex" is not in PATH`},
		{"built-in CLI adjusted under backends", "backends:\n  gemini: {model: x}\nagents:\n  - {name: a, role: x, backend: gemini}\n",
			2, "backends.gemini", `command "gemini" of backend "gemini" is not in PATH`},
		{"missing absolute path", "backends:\n  b:\n    type: command\n    command: /nonexistent/cli\nagents:\n  - {name: a, role: x, backend: b}\n",
			4, "backends.b.command", `command /nonexistent/cli of backend "b" does not exist`},
		{"a directory", "backends:\n  b:\n    type: command\n    command: " + bin + "\nagents:\n  - {name: a, role: x, backend: b}\n",
			4, "backends.b.command", "is a directory, not a program"},
		{"not executable", "backends:\n  b:\n    type: command\n    command: " + filepath.Join(dir, "not-exec") + "\nagents:\n  - {name: a, role: x, backend: b}\n",
			4, "backends.b.command", "is not executable (chmod +x it"},
		{"not in the PATH that env sets", "backends:\n  b:\n    type: command\n    command: sh\n    env: {PATH: " + dir + "}\nagents:\n  - {name: a, role: x, backend: b}\n",
			4, "backends.b.command", `command "sh" of backend "b" is not in the PATH that env sets`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseIn(t, dir, "listen: \"\"\n"+tt.body, opts)
			oneProblem(t, err, tt.line+1, tt.key, tt.want)
			if _, err := parseIn(t, dir, "listen: \"\"\n"+tt.body, Options{}); err != nil {
				t.Errorf("without LookPath: %v", err)
			}
		})
	}

	good := map[string]string{
		"a name in PATH": "backends:\n  b: {type: command, command: sh}\nagents:\n  - {name: a, role: x, backend: b}\n",
		"an absolute path": "backends:\n  b: {type: command, command: " + filepath.Join(bin, "fake-cli") + "}\n" +
			"agents:\n  - {name: a, role: x, backend: b}\n",
		"scripted has no program": "backends:\n  s: {type: scripted, steps: [{exit: 0}]}\nagents:\n  - {name: a, role: x, backend: s}\n",
		"an unused backend is not checked": "backends:\n  s: {type: scripted, steps: [{exit: 0}]}\n  b: {type: command, command: /nonexistent}\n" +
			"agents:\n  - {name: a, role: x, backend: s}\n",
		"the backend's env PATH":    "backends:\n  claude: {command: fake-cli, env: {PATH: " + bin + "}}\nagents:\n  - {name: a, role: x}\n",
		"the agent's env PATH wins": "backends:\n  claude: {command: fake-cli, env: {PATH: /nowhere}}\nagents:\n  - {name: a, role: x, env: {PATH: " + bin + "}}\n",
	}
	for name, body := range good {
		t.Run(name, func(t *testing.T) {
			if _, err := parseIn(t, dir, "listen: \"\"\n"+body, opts); err != nil {
				t.Error(err)
			}
		})
	}

	t.Run("every problem at once", func(t *testing.T) {
		_, err := parseIn(t, dir, "listen: \"\"\nbackends:\n  b: {type: command, command: /nonexistent}\n"+
			"agents:\n  - {name: a, role: x, backend: b}\n  - {name: b, role: x, backend: codex}\n  - {name: c, role: x, backend: codex}\n", opts)
		var all Errors
		if !errors.As(err, &all) || len(all) != 2 {
			t.Fatalf("want two problems (each backend once), got %v", err)
		}
		if all[0].Key != "backends.b.command" || all[1].Key != "agents[1].backend" {
			t.Errorf("keys %s, %s", all[0].Key, all[1].Key)
		}
	})
}

func TestListenWarning(t *testing.T) {
	dir := t.TempDir()
	for listen, warn := range map[string]bool{
		"0.0.0.0:9464": true, ":9464": true, "[::]:9464": true, "192.0.2.1:9464": true, "metrics.example:9464": true,
		"127.0.0.1:9464": false, "127.0.0.2:0": false, "[::1]:9464": false, "localhost:9464": false, "": false,
	} {
		cfg, err := parseIn(t, dir, "listen: \""+listen+"\"\nagents:\n  - {name: a, role: x}\n", Options{})
		if err != nil {
			t.Fatalf("%s: %v", listen, err)
		}
		if !warn {
			if cfg.Warnings != nil {
				t.Errorf("%q: unexpected warnings %v", listen, cfg.Warnings)
			}
			continue
		}
		if len(cfg.Warnings) != 1 {
			t.Fatalf("%q: warnings %v, want one", listen, cfg.Warnings)
		}
		w := cfg.Warnings[0]
		want := filepath.Join(dir, "swarmd.yaml") + `:1: listen: warning: "` + listen + `" is not a loopback address`
		if !strings.HasPrefix(w.Error(), want) || !strings.HasSuffix(w.Error(), "(listen on 127.0.0.1, or keep the port behind a firewall)") {
			t.Errorf("%q: warning %q", listen, w)
		}
	}
}

// TestListenWarningWithToken: a web.token guards the listener's writes, so
// an open listen is no longer warned about.
func TestListenWarningWithToken(t *testing.T) {
	dir := t.TempDir()
	for token, warnings := range map[string]int{"": 1, "0123456789abcdef0123": 0} {
		cfg, err := parseIn(t, dir, "listen: 0.0.0.0:9464\nweb: {token: \""+token+"\"}\nagents:\n  - {name: a, role: x}\n", Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.Warnings) != warnings || cfg.Web.Token != token {
			t.Errorf("token %q: warnings %v, web %+v", token, cfg.Warnings, cfg.Web)
		}
	}
}

// TestWebToken: a token is a secret sent in a header: long enough, and
// nothing a header cannot carry; each problem names web.token and its line.
func TestWebToken(t *testing.T) {
	dir := t.TempDir()
	for token, want := range map[string]string{
		"short":                      "is 5 characters; use at least 16",
		"0123456789 abcdef0123":      "must be printable ASCII without spaces",
		"0123456789abcdef\u00e90123": "must be printable ASCII without spaces",
	} {
		_, err := parseIn(t, dir, "listen: \"\"\nagents:\n  - {name: a, role: x}\nweb:\n  token: \""+token+"\"\n", Options{})
		oneProblem(t, err, 5, "web.token", want)
	}
}

// TestStoreKey: the store is the SQLite file unless a postgres:// URL
// says otherwise, and the URL may not carry a password.
func TestStoreKey(t *testing.T) {
	dir := t.TempDir()
	const agents = "agents:\n  - {name: alice, role: r}\n"
	cfg, err := parseIn(t, dir, agents, Options{})
	if err != nil || cfg.StoreTarget() != cfg.DBPath() || cfg.SharedStore() || cfg.LeaseTimeout != DefaultLeaseTimeout {
		t.Fatalf("no store key: %v, target %q, lease %v", err, cfg.StoreTarget(), cfg.LeaseTimeout)
	}
	url := "postgres://swarm@db.internal/swarm?sslmode=require"
	cfg, err = parseIn(t, dir, "store: "+url+"\nlease_timeout: 10s\n"+agents, Options{})
	if err != nil || cfg.StoreTarget() != url || !cfg.SharedStore() || cfg.LeaseTimeout != 10*time.Second {
		t.Fatalf("postgres store: %v, target %q", err, cfg.StoreTarget())
	}
	for body, want := range map[string]string{
		"store: postgres://swarm:hunter2@db/swarm\n":          "carries a password",
		"store: postgres://swarm@db/swarm?password=hunter2\n": "carries a password",
		"store: mysql://db/swarm\n":                           "is not a postgres:// URL",
	} {
		_, err := parseIn(t, dir, body+agents, Options{})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: %v, want an error saying %q that does not repeat the password", body, err, want)
		}
	}
}
