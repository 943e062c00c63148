package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// runCLIIn runs the swarmd binary in dir with env added.
func runCLIIn(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(swarmdBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return o.String(), e.String(), code
}

// Every command finds swarmd.yaml the way git finds .git (the working
// directory, then each parent), or where SWARMD_CONFIG says; found nowhere,
// it says where it looked. The first task and the first message, before
// any `swarmd run`, create the store where the daemon will look.
func TestConfigFoundFromASubdirectoryBeforeTheFirstRun(t *testing.T) {
	repo := gitRepo(t)
	writeConfig(t, repo, twoAgents)
	deep := filepath.Join(repo, "pkg", "sub")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runCLIIn(t, deep, nil, "task", "add", "written from a subdirectory"); code != 0 {
		t.Fatalf("task add from %s before any run: exit %d: %s", deep, code, stderr)
	}
	if _, stderr, code := runCLIIn(t, deep, nil, "mail", "send", "--to", "alice", "hello before the first run"); code != 0 {
		t.Fatalf("mail send before any run: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(repo, ".swarm", "swarm.db")); err != nil {
		t.Fatalf("the store is not where the daemon looks: %v", err)
	}
	elsewhere := t.TempDir()
	stdout, stderr, code := runCLIIn(t, elsewhere, []string{"SWARMD_CONFIG=" + filepath.Join(repo, "swarmd.yaml")}, "task", "list")
	if code != 0 || !strings.Contains(stdout, "written from a subdirectory") {
		t.Fatalf("task list with SWARMD_CONFIG: exit %d\n%s%s", code, stdout, stderr)
	}
	_, stderr, code = runCLIIn(t, elsewhere, nil, "task", "list")
	if code != 2 || !strings.Contains(stderr, elsewhere) || !strings.Contains(stderr, "SWARMD_CONFIG") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("task list with no config anywhere: exit %d, %q; want one line naming where it looked", code, stderr)
	}
	// A daemon holds the state dir (its lock) and its swarm.db is deleted:
	// a command never creates another beside it.
	stateDir := filepath.Join(repo, ".swarm")
	dir, err := os.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if err := unix.Flock(int(dir.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(stateDir, "swarm.db")); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runCLIIn(t, deep, nil, "task", "add", "while the daemon's store is gone")
	if _, err := os.Stat(filepath.Join(stateDir, "swarm.db")); code == 0 || err == nil || !strings.Contains(stderr, "deleted under the running daemon") {
		t.Fatalf("task add with the store deleted under a daemon: exit %d, %q, a new file made: %v", code, stderr, err == nil)
	}
	// A SWARM_DB_PATH that leads nowhere is still refused, not created.
	missing := filepath.Join(elsewhere, "nope", "swarm.db")
	_, _, code = runCLIIn(t, elsewhere, []string{"SWARM_DB_PATH=" + missing, "SWARM_AGENT_ID=alice"}, "mail", "inbox")
	if _, err := os.Stat(missing); code == 0 || err == nil {
		t.Fatalf("mail with a SWARM_DB_PATH to nowhere: exit %d, file made: %v", code, err == nil)
	}
}
