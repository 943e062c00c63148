package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// probe skips the test loudly where bwrap is missing: the sandbox is then
// not in force on this host, and swarmd says so at start.
func probe(t *testing.T) *Sandbox {
	t.Helper()
	s, err := Probe(context.Background(), "")
	if err != nil && os.Getenv("SWARMD_REQUIRE_BWRAP") == "1" {
		t.Fatalf("no sandbox on this host and SWARMD_REQUIRE_BWRAP=1: %v", err)
	}
	if err != nil {
		t.Skipf("SKIPPED LOUDLY: no sandbox on this host: %v", err)
	}
	return s
}

// run runs script in a sandbox made from spec and returns its output.
func run(t *testing.T, s *Sandbox, spec Spec, script string) (string, error) {
	t.Helper()
	argv := s.Command(spec, []string{"/bin/sh", "-c", script})
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}

func TestSandboxSeesWhatItIsGiven(t *testing.T) {
	s := probe(t)
	base := t.TempDir() // under /tmp: private in the sandbox unless given
	state := filepath.Join(base, "state")
	wt := filepath.Join(state, "worktrees", "a")
	peer := filepath.Join(state, "worktrees", "b")
	repo := filepath.Join(base, "repo")
	for _, d := range []string{wt, peer, repo} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "swarm.db"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	pinned := filepath.Join(wt, "pinned")
	if err := os.WriteFile(pinned, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		Writable: []string{wt},
		// Given shallow to deep in the wrong order: Command sorts them.
		ReadOnly: []string{pinned, repo},
		Hidden:   []string{state},
		Dir:      wt,
		Unsetenv: []string{"SECRET_PATH"},
	}
	t.Setenv("SECRET_PATH", "/nowhere")
	checks := map[string]bool{ // script -> should succeed
		`echo x > ` + wt + `/new`:                     true,
		`pwd | grep -qx ` + wt:                        true,
		`ls ` + repo:                                  true,
		`echo x > ` + repo + `/f`:                     false,
		`echo x > ` + pinned:                          false,
		`cat ` + state + `/swarm.db`:                  false,
		`ls ` + peer:                                  false,
		`echo x > /etc/swarmd-sandbox-test`:           false,
		`test -z "$SECRET_PATH"`:                      true,
		`test "$(ls /proc | grep -c '^[0-9]')" -lt 6`: true, // its own pid namespace: bwrap, sh, ls, grep
	}
	for script, want := range checks {
		out, err := run(t, s, spec, script)
		if got := err == nil; got != want {
			t.Errorf("%s: succeeded %v, want %v (%v: %s)", script, got, want, err, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(wt, "new")); string(b) != "x\n" {
		t.Errorf("write in the writable worktree did not reach the host: %q", b)
	}
	if _, err := os.Stat(filepath.Join(repo, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a read-only path was written: %v", err)
	}
}

func TestCommandOrdersShallowToDeep(t *testing.T) {
	s := &Sandbox{bwrap: "/usr/bin/bwrap", root: true}
	argv := s.Command(Spec{
		Writable: []string{"/s/w/a"},
		ReadOnly: []string{"/s/w/a/pin", "/r"},
		Hidden:   []string{"/s"},
		Binds:    []Bind{{Src: "/s/run/1", Dest: "/s/sock"}},
	}, []string{"cmd", "arg"})
	line := strings.Join(argv, " ")
	order := []string{"--ro-bind /r /r", "--tmpfs /s", "--ro-bind /s/run/1 /s/sock", "--bind /s/w/a /s/w/a", "--ro-bind /s/w/a/pin /s/w/a/pin", "-- cmd arg"}
	at := -1
	for _, o := range order {
		i := strings.Index(line, o)
		if i < 0 || i < at {
			t.Fatalf("%q missing or out of order in\n%s", o, line)
		}
		at = i
	}
	if !slices.Contains(argv, "--cap-drop") || slices.Contains(argv, "--unshare-user") {
		t.Errorf("as root: capabilities dropped, no user namespace: %s", line)
	}
	if !slices.Contains(argv, "--unshare-pid") {
		t.Errorf("no pid namespace: %s", line)
	}
}

// A path asked for twice the same way is mounted once; asked for two ways,
// both stay, in their order.
func TestCommandMountsAPathOnce(t *testing.T) {
	s := &Sandbox{bwrap: "/usr/bin/bwrap", root: true}
	line := strings.Join(s.Command(Spec{
		ReadOnly: []string{"/repo", "/repo/", "/ro"},
		Writable: []string{"/ro"},
	}, []string{"cmd"}), " ")
	if n := strings.Count(line, "--ro-bind /repo /repo"); n != 1 {
		t.Errorf("/repo mounted %d times, want 1:\n%s", n, line)
	}
	w, r := strings.Index(line, "--bind /ro /ro"), strings.Index(line, "--ro-bind /ro /ro")
	if w < 0 || r < 0 || w > r {
		t.Errorf("/ro asked for writable and read-only: want both, the read-only last:\n%s", line)
	}
}
