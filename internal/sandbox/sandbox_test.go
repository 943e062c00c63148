package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dialEnv makes the test binary a Unix socket client (TestMain): a
// sandbox has none of its own to try a socket with.
const dialEnv = "SWARMD_SANDBOX_TEST_DIAL"

func TestMain(m *testing.M) {
	if path := os.Getenv(dialEnv); path != "" {
		c, err := net.Dial("unix", path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

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

// A Unix socket of a server of the host's under /run (tmux's, D-Bus's,
// Docker's) cannot be reached from a sandbox: /run, /var/tmp and /dev/shm
// are its own, empty. A read-only mount did not stop a connect(). What a
// session needs there stays: the file /etc/resolv.conf leads to, through
// links in /run or into it; and a socket directory the operator binds
// back (sandbox.readable) is reachable.
func TestSandboxHidesTheHostsSockets(t *testing.T) {
	s := probe(t)
	run0, err := os.MkdirTemp("/run", "swarmd-sandbox-test-")
	if err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot make a directory under /run (not root?): %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(run0) })
	sock := filepath.Join(run0, "server", "sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	// A resolv.conf as the hosts lay it out (the test does not touch
	// /etc's): a link into /run, and one through a link in /run.
	resolv := filepath.Join(run0, "resolve", "stub-resolv.conf")
	if err := os.MkdirAll(filepath.Dir(resolv), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(resolv, filepath.Join(run0, "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	etc := t.TempDir()
	direct, chained := filepath.Join(etc, "direct"), filepath.Join(etc, "chained")
	if err := os.Symlink(resolv, direct); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(run0, "resolv.conf"), chained); err != nil {
		t.Fatal(err)
	}
	needs := []string{direct, chained}
	if fi, err := os.Lstat("/var/run"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		// Through /var/run, a link to /run on most hosts.
		viaVar := filepath.Join(etc, "via-var-run")
		if err := os.Symlink(filepath.Join("/var/run", filepath.Base(run0), "resolv.conf"), viaVar); err != nil {
			t.Fatal(err)
		}
		needs = append(needs, viaVar)
	}
	s.needs = append(slices.Clone(s.needs), needs...)

	// Files of the host's in the other shared directories.
	for _, dir := range []string{"/var/tmp", "/dev/shm"} {
		f, err := os.CreateTemp(dir, "swarmd-sandbox-test-")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		t.Cleanup(func() { os.Remove(f.Name()) })
		needs = append(needs, "!"+f.Name())
	}

	// The test binary is the client; it lies under the private /tmp.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dial := dialEnv + "=" + sock + " " + self
	if out, err := exec.Command("/bin/sh", "-c", dial).CombinedOutput(); err != nil {
		t.Fatalf("the socket is not reachable on the host: %v %s", err, out)
	}
	base := Spec{ReadOnly: []string{filepath.Dir(self), etc}}
	checks := map[string]bool{ // script -> should succeed
		dial:                                  false,
		`test -e ` + sock:                     false,
		`test -e ` + filepath.Dir(sock):       false,
		`cat /etc/resolv.conf`:                true,
		`echo x > /run/mine && cat /run/mine`: true, // its own, writable
	}
	for _, p := range needs {
		if name, ok := strings.CutPrefix(p, "!"); ok {
			checks[`test -e `+name] = false
			continue
		}
		checks[`grep -qx "nameserver 127.0.0.53" `+p] = true
	}
	for script, want := range checks {
		out, err := run(t, s, base, script)
		if got := err == nil; got != want {
			t.Errorf("%s: succeeded %v, want %v (%v: %s)", script, got, want, err, out)
		}
	}
	if b, _ := os.ReadFile("/run/mine"); b != nil {
		t.Errorf("a sandbox's write to its /run reached the host's")
	}

	// The operator binds the socket's directory back: a deeper path wins.
	given := base
	given.ReadOnly = append(slices.Clone(base.ReadOnly), filepath.Dir(sock))
	if out, err := run(t, s, given, dial); err != nil {
		t.Errorf("a socket directory given read-only is not reachable: %v %s", err, out)
	}
}

// A private root is laid first at its depth: the same path given (an
// operator's sandbox.readable: [/run]) is laid over it, and deeper ones
// too.
func TestCommandLetsAGivenPathOverAPrivateRoot(t *testing.T) {
	if fi, err := os.Lstat("/run"); err != nil || !fi.IsDir() {
		t.Skipf("no /run directory here: %v", err)
	}
	s := &Sandbox{bwrap: "/usr/bin/bwrap", root: true}
	line := strings.Join(s.Command(Spec{ReadOnly: []string{"/run", "/run/user/1000"}}, []string{"cmd"}), " ")
	private, given, deeper := strings.Index(line, "--tmpfs /run "), strings.Index(line, "--ro-bind /run /run"), strings.Index(line, "--ro-bind /run/user/1000 /run/user/1000")
	if private < 0 || given < private || deeper < given {
		t.Errorf("want the private /run, then the given /run, then the deeper path:\n%s", line)
	}
}
