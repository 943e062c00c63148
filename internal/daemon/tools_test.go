package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/config"
)

// TestFindToolsLeavesOutWhatSessionsWrite: with a sandbox, the daemon's
// git is found outside the agents' HOMEs, the sandbox's writable paths and
// the state directory, a link into one of them included, and the gate's
// PATH keeps only the other directories; a git found nowhere else is an
// error that names where it is. Without a sandbox PATH is taken whole.
func TestFindToolsLeavesOutWhatSessionsWrite(t *testing.T) {
	root := t.TempDir()
	home, shared, state, sys, linked := filepath.Join(root, "home"), filepath.Join(root, "shared"), filepath.Join(root, "state"), filepath.Join(root, "usr"), filepath.Join(root, "opt")
	exe := func(dir string) string {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "git")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exe(filepath.Join(home, "go", "bin"))
	exe(filepath.Join(shared, "bin"))
	exe(filepath.Join(state, "bin"))
	if err := os.MkdirAll(linked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(home, "go", "bin", "git"), filepath.Join(linked, "git")); err != nil {
		t.Fatal(err)
	}
	want := exe(filepath.Join(sys, "bin"))
	if err := os.WriteFile(want, []byte("#!/bin/sh\nexec git \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home) // the agents have none of their own: the daemon's
	t.Setenv("GIT_SSH_COMMAND", "")
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	cfg := &config.Config{Repo: repo, StateDir: state, Agents: []config.Agent{{Name: "alice"}}}
	cfg.Sandbox.Writable = []string{shared}

	path := strings.Join([]string{filepath.Join(home, "go", "bin"), "bin", filepath.Join(shared, "bin"), filepath.Join(state, "bin"), linked, filepath.Join(sys, "bin")}, ":")
	tools, err := findTools(cfg, true, path)
	if err != nil {
		t.Fatal(err)
	}
	if tools.git != want {
		t.Errorf("git = %s, want %s", tools.git, want)
	}
	if got, wantPath := tools.path, linked+":"+filepath.Join(sys, "bin"); got != wantPath {
		t.Errorf("the gate's PATH = %s, want %s", got, wantPath)
	}
	if !slices.Contains(tools.dropped, filepath.Join(home, "go", "bin")) || !slices.Contains(tools.dropped, "bin") {
		t.Errorf("dropped = %v, want HOME's go/bin and the relative entry among them", tools.dropped)
	}

	// The daemon's HOME is the agent's: its pushes' ssh reads no
	// ~/.ssh/config, unless the repository names the ssh to use.
	if len(tools.remoteEnv) != 1 || !strings.HasPrefix(tools.remoteEnv[0], "GIT_SSH_COMMAND=ssh -F ") {
		t.Errorf("remoteEnv = %q, want an ssh that reads no user configuration", tools.remoteEnv)
	}
	if out, err := exec.Command("git", "-C", repo, "config", "core.sshCommand", "ssh -i /etc/swarmd/key").CombinedOutput(); err != nil {
		t.Fatalf("git config: %v\n%s", err, out)
	}
	if tools, err := findTools(cfg, true, path); err != nil || tools.remoteEnv != nil {
		t.Errorf("with core.sshCommand: remoteEnv %q, %v; want none", tools.remoteEnv, err)
	}

	_, err = findTools(cfg, true, filepath.Join(home, "go", "bin")+":"+linked)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(home, "go", "bin", "git")+" is in a directory sessions write") {
		t.Errorf("git only in HOME: %v", err)
	}

	if tools, err := findTools(cfg, false, path); err != nil || tools.git != "git" || tools.path != path {
		t.Errorf("without a sandbox: %+v, %v", tools, err)
	}
}
