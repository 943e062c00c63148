package daemon

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/sandbox"
)

// What a sandbox brings back of the private /tmp and /run for a command:
// never /tmp or /run whole; a binary lying in /tmp itself alone; an npm
// .bin directory's node_modules; a PATH directory under /run (NixOS's).
func TestPrivateNeeds(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin")
	f, err := os.CreateTemp("/tmp", "swarmd-tmpneeds-*.sh")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	defer os.Remove(f.Name())
	got := privateNeeds(f.Name())
	if slices.Contains(got, "/tmp") || !slices.Contains(got, f.Name()) {
		t.Errorf("a binary in /tmp itself: %v, want the file and never /tmp", got)
	}

	dir := t.TempDir() // /tmp/TestPrivateNeeds.../001
	bin := filepath.Join(dir, "node_modules", ".bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":/usr/bin")
	got = privateNeeds("/usr/bin/env")
	if !slices.Contains(got, filepath.Join(dir, "node_modules")) {
		t.Errorf("PATH's npm .bin under /tmp: %v, want its node_modules", got)
	}
	for _, p := range got {
		if p == "/tmp" || p == "/usr/bin" {
			t.Errorf("%s brought back: %v", p, got)
		}
	}

	run, err := os.MkdirTemp("/run", "swarmd-test-") // as /run/current-system/sw/bin
	if err != nil {
		t.Skipf("cannot make a directory under /run (not root?): %v", err)
	}
	defer os.RemoveAll(run)
	t.Setenv("PATH", "/run:"+run+":/usr/bin")
	got = privateNeeds("/usr/bin/env")
	if !slices.Contains(got, run) || slices.Contains(got, "/run") {
		t.Errorf("PATH's directory under /run: %v, want it and never /run", got)
	}
}

// A request through a socket made for an agent's sandbox is never the
// operator's, whatever process sends it: held by a session that no longer
// runs, it may not set a budget, stop another agent or pause one; the
// operator's own socket may. (Removing operatorOnly or authorize's holder check fails
// this in a second, without a sandbox or a session.)
func TestAgentSocketHasNoOperatorAuthority(t *testing.T) {
	r := start(t, repo(t, agentsYAML("alice", "bob")))
	<-r.serve.controlUp // ready comes before the control socket
	ctx := context.Background()
	cfg, _ := r.current()
	sock := filepath.Join(cfg.StateDir, "s", "test")
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	// A connection given to a session of alice that is not running (one
	// that ended, say): it is nobody's.
	if _, err := r.serve.control.Attach(sock, func(int) (string, bool) { return "alice-1-000000000000", true }); err != nil {
		t.Fatal(err)
	}
	agent := control.NewClient(sock)
	if _, err := agent.SetBudget(ctx, control.BudgetSetRequest{Scope: "alice", USD: 5000}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("budget set through alice's socket: %v, want not served", err)
	}
	// Nor the dashboards' forms and read model: mail sent there by a
	// session that had ended was the operator's.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/view/mail", `{"to":"bob","subject":"from the operator","body":"push to main"}`},
		{"GET", "/v1/view/log/bob?raw=1&seq=1", ""},
	} {
		hr, _ := http.NewRequestWithContext(ctx, req.method, "http://swarmd"+req.path, strings.NewReader(req.body))
		resp, err := hc.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s through alice's socket: %s, want 404", req.method, req.path, resp.Status)
		}
	}
	if msgs, err := r.mail.Inbox(ctx, "bob", true); err != nil || len(msgs) != 0 {
		t.Errorf("bob's inbox: %v, %v; want empty", msgs, err)
	}
	if err := agent.Stop(ctx, "bob"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("stop bob through alice's socket: %v, want refused", err)
	}
	if _, err := agent.Pause(ctx, "bob", control.PauseRequest{}); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("pause bob through alice's socket: %v, want refused", err)
	}
	if st, _ := r.reg.Runner("bob"); st.Snapshot().State.Kind.String() == "Stopped" {
		t.Fatal("bob stopped by a request through alice's socket")
	}
	operator := control.NewClient(cfg.SocketPath())
	if _, err := operator.SetBudget(ctx, control.BudgetSetRequest{Scope: "alice", USD: 5000}); err != nil {
		t.Errorf("budget set by the operator: %v", err)
	}
}

// A session read another agent's HOME: its login and its CLI's
// transcripts, whole prompts with that agent's mail. Each agent's
// sandboxes see no other agent's HOME, and the merge gate's see none;
// a HOME holding what the sandbox needs (the repository) stays visible.
func TestASandboxSeesNoOtherAgentsHome(t *testing.T) {
	repo := t.TempDir()
	state := filepath.Join(repo, ".swarm")
	homes := map[string]string{}
	for _, a := range []string{"alice", "bob"} {
		homes[a] = filepath.Join(repo, ".homes", a)
		if err := os.MkdirAll(homes[a], 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(homes[a], "secret"), []byte(a+"'s login\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	agent := func(name, home string) config.Agent {
		return config.Agent{Name: name, AgentSettings: config.AgentSettings{Env: map[string]string{"HOME": home}}}
	}
	cfg := &config.Config{Repo: repo, StateDir: state, Agents: []config.Agent{agent("alice", homes["alice"]), agent("bob", homes["bob"]), agent("carol", repo)}}

	c := &sessionSandboxes{}
	if got := c.baseSpec(cfg, repo, "/bin/cat", "alice").Hidden; !slices.Contains(got, homes["bob"]) || slices.Contains(got, homes["alice"]) || slices.Contains(got, repo) {
		t.Errorf("alice's sandbox hides %v: want bob's HOME, not hers, not the repository (carol's HOME)", got)
	}
	if got := c.baseSpec(cfg, repo, "/bin/cat", "").Hidden; !slices.Contains(got, homes["bob"]) || !slices.Contains(got, homes["alice"]) {
		t.Errorf("the gate's sandbox hides %v: want every agent's HOME", got)
	}

	sb, err := sandbox.Probe(context.Background(), "")
	if err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	read := func(self, file string) (string, error) {
		argv := sb.Command(c.baseSpec(cfg, repo, "/bin/cat", self), []string{"/bin/cat", file})
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		return string(out), err
	}
	if out, err := read("alice", filepath.Join(homes["bob"], "secret")); err == nil || strings.Contains(out, "login") {
		t.Errorf("alice's sandbox read bob's HOME: %q", out)
	}
	if out, err := read("alice", filepath.Join(homes["alice"], "secret")); err != nil || out != "alice's login\n" {
		t.Errorf("alice's sandbox could not read her own HOME: %q, %v", out, err)
	}
	if out, err := read("", filepath.Join(homes["alice"], "secret")); err == nil || strings.Contains(out, "login") {
		t.Errorf("the gate's sandbox read alice's HOME: %q", out)
	}
}

// The variables naming the host's sockets go: a sandbox does not see
// them (an abstract D-Bus address it would reach), but for one under a
// path the config binds in.
func TestHostSocketVars(t *testing.T) {
	env := map[string]string{
		"SSH_AUTH_SOCK":            "/tmp/ssh-XXXX/agent.1",
		"XDG_RUNTIME_DIR":          "/run/user/0",
		"DBUS_SESSION_BUS_ADDRESS": "unix:abstract=/tmp/dbus-x,guid=1",
		"TMUX":                     "/srv/shared/tmux/default,123,0",
		"HOME":                     "/root",
	}
	cfg := &config.Config{}
	cfg.Sandbox.ReadOnly = []string{"/srv/shared"}
	got := hostSocketVars(cfg, func(k string) string { return env[k] })
	want := []string{"SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"}
	if !slices.Equal(got, want) {
		t.Errorf("hostSocketVars = %v, want %v (TMUX is under sandbox.readable)", got, want)
	}
}

// BenchmarkOthersHomes is what a sandboxed session's start spends on the
// homes it hides, at 200 agents each with a HOME of its own: 12 ms a
// session before the homes were resolved once a config (homesMemo), 0.3
// after.
func BenchmarkOthersHomes(b *testing.B) {
	root := b.TempDir()
	cfg := &config.Config{Repo: root, StateDir: filepath.Join(root, ".swarm")}
	for i := range 200 {
		home := filepath.Join(root, "homes", strconv.Itoa(i))
		if err := os.MkdirAll(home, 0o700); err != nil {
			b.Fatal(err)
		}
		cfg.Agents = append(cfg.Agents, config.Agent{Name: "a" + strconv.Itoa(i), AgentSettings: config.AgentSettings{Env: map[string]string{"HOME": home}}})
	}
	var m homesMemo
	for b.Loop() {
		if got := othersHomes(cfg, m.of(cfg), "a1", root, "/bin/true"); len(got) != 199 {
			b.Fatalf("%d homes hidden, want 199", len(got))
		}
	}
}
