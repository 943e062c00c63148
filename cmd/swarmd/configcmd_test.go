package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/config"
)

// TestValidatePrintsEveryProblem: validate and run print every problem of
// the file, a backend program that is not there among them, one line each.
func TestValidatePrintsEveryProblem(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `listen: "localhost"
defaults:
  grace_period: soon
backends:
  tests:
    type: command
    command: /nonexistent/test-runner
agents:
  - {name: Alice, role: x}
  - {name: bob, role: x, backend: tests}
  - {name: carol, role: /proc/self/environ}
`)
	want := []string{
		cfg + `:1: listen: "localhost" is not host:port`,
		cfg + `:3: defaults.grace_period: "soon" is not a duration`,
		cfg + `:7: backends.tests.command: command /nonexistent/test-runner of backend "tests" does not exist`,
		cfg + `:9: agents[0].name: "Alice" is not a valid agent name`,
		cfg + `:11: agents[2].role: role file /proc/self/environ is under /proc`,
	}
	for _, cmd := range [][]string{{"config", "validate", "-c", cfg}, {"run", "-c", cfg}} {
		out, stderr, code := runCLI(t, []string{"PATH=/usr/bin:/bin"}, "", cmd...)
		if code != 2 || out != "" {
			t.Errorf("%v: exit %d, stdout %q; want 2 and nothing", cmd, code, out)
		}
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%v: %d lines, want %d:\n%s", cmd, len(lines), len(want), stderr)
		}
		for i, l := range lines {
			if !strings.HasPrefix(l, want[i]) || !strings.HasSuffix(l, ")") {
				t.Errorf("%v: line %d is %q\nwant %s... (what to do)", cmd, i+1, l, want[i])
			}
		}
	}
}

// TestValidateAndRunWarnOnOpenListen: a listener open to other machines is
// a warning, printed by validate and logged by run; neither refuses it.
func TestValidateAndRunWarnOnOpenListen(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `listen: "0.0.0.0:0"
defaults: {backend: idle, grace_period: 1s}
backends:
  idle: {type: scripted, steps: [{sleep: 1h}]}
agents:
  - {name: alice, role: x}
`)
	const warning = `listen: warning: "0.0.0.0:0" is not a loopback address`
	out, stderr, code := runCLI(t, nil, "", "config", "validate", "-c", cfg)
	if code != 0 || !strings.Contains(out, ": ok (1 agents") || stderr != "" && !strings.HasPrefix(stderr, cfg+":1: "+warning) {
		t.Errorf("validate: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if !strings.Contains(stderr, warning) {
		t.Errorf("validate did not warn: %q", stderr)
	}

	d := startDaemon(t, cfg)
	w := d.waitLine("the listen warning", func(m map[string]any) bool {
		return m["level"] == "warn" && strings.HasPrefix(fmt.Sprint(m["msg"]), "config: ")
	})
	if w["key"] != "listen" || w["line"] != float64(1) || !strings.Contains(fmt.Sprint(w["msg"]), "not a loopback address") {
		t.Errorf("warning logged as %v", w)
	}
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestConfigSchemaCommand(t *testing.T) {
	out, stderr, code := runCLI(t, nil, "", "config", "schema")
	want, err := config.JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || stderr != "" || out != string(want) {
		t.Fatalf("config schema: exit %d, stderr %q, output differs from config.JSONSchema: %.200q", code, stderr, out)
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(out), &s); err != nil || s["$schema"] != config.SchemaDialect {
		t.Errorf("not a draft 2020-12 JSON Schema: %v, %v", err, s["$schema"])
	}
}

// TestInitWritesTheSchema: init writes the schema next to the config, and
// the config's first line points editors at it by a relative path.
func TestInitWritesTheSchema(t *testing.T) {
	dir := t.TempDir()
	out, err := runInProcess(t, "init", "--dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	schemaPath := filepath.Join(dir, ".swarmd.schema.json")
	if !strings.Contains(out, "wrote "+schemaPath) {
		t.Errorf("output does not report the schema:\n%s", out)
	}
	want, _ := config.JSONSchema()
	if got := readText(t, schemaPath); got != string(want) {
		t.Errorf("%s is not config.JSONSchema()", schemaPath)
	}
	first, _, _ := strings.Cut(readText(t, filepath.Join(dir, "swarmd.yaml")), "\n")
	if first != "# yaml-language-server: $schema=.swarmd.schema.json" {
		t.Errorf("first line %q", first)
	}
	// A second init without --force refuses because of the schema too.
	if _, err := runInProcess(t, "init", "--dir", dir); err == nil || !strings.Contains(err.Error(), schemaPath) {
		t.Errorf("second init: %v", err)
	}
}

// TestValidateChecksWhatRunNeeds: config validate fails, one line per
// problem, where swarmd run would: a directory that is not a git work tree;
// a repository without a commit and a merge.into that is no branch; a
// listen address another program holds, each at its key's line (none for
// a key left to its default). A runnable setup is ok.
func TestValidateChecksWhatRunNeeds(t *testing.T) {
	const body = "agents: [{name: a, role: r, backend: t}]\nbackends: {t: {type: command, command: sh}}\n"
	plain := t.TempDir()
	cfg := writeConfig(t, plain, "listen: \"\"\n"+body)
	_, stderr, code := runCLI(t, nil, "", "config", "validate", "-c", cfg)
	if code != 2 || !strings.Contains(stderr, cfg+": repo: "+plain+" is not a git work tree") {
		t.Errorf("not a repository: exit %d\n%s", code, stderr)
	}

	empty := t.TempDir()
	if out, err := exec.Command("git", "-C", empty, "init", "-q", "-b", "main").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	cfg = writeConfig(t, empty, "listen: \"\"\nmerge: {into: trunk}\n"+body)
	_, stderr, code = runCLI(t, nil, "", "config", "validate", "-c", cfg)
	if code != 2 || !strings.Contains(stderr, cfg+": base_ref: ") || !strings.Contains(stderr, cfg+":2: merge.into: branch \"trunk\" does not exist") {
		t.Errorf("no commit, no trunk: exit %d\n%s", code, stderr)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	repo := gitRepo(t)
	cfg = writeConfig(t, repo, "listen: "+l.Addr().String()+"\n"+body)
	_, stderr, code = runCLI(t, nil, "", "config", "validate", "-c", cfg)
	if code != 2 || !strings.Contains(stderr, cfg+":1: listen: "+l.Addr().String()) {
		t.Errorf("listen address taken: exit %d\n%s", code, stderr)
	}
	cfg = writeConfig(t, repo, "listen: \"\"\n"+body)
	if out, stderr, code := runCLI(t, nil, "", "config", "validate", "-c", cfg); code != 0 || !strings.Contains(out, ": ok") {
		t.Errorf("a runnable setup: exit %d\n%s%s", code, out, stderr)
	}
}
