package backend

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mockllm"
	"github.com/swarmd/swarmd/internal/proc"
)

// The real agent CLIs are installed by scripts/install-clis.sh into
// $SWARMD_CLI_DIR (default <repo>/.cache/clis). Without them these tests
// skip loudly, or fail when SWARMD_REQUIRE_CLIS=1 (CI, which installs them).

// cliLimit bounds one real CLI session: a start takes a second or two, more
// under -race on two shared cores.
const cliLimit = 60 * time.Second

// cliBin returns the path of an installed agent CLI, or skips the test.
func cliBin(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("SWARMD_CLI_DIR")
	if dir == "" {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".cache", "clis")
	}
	bin := filepath.Join(dir, "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("\n%s\n*** %s CLI NOT INSTALLED (%s): the real-CLI tests did NOT run.\n"+
			"*** Install the pinned CLIs with scripts/install-clis.sh (or set SWARMD_CLI_DIR).\n%s",
			strings.Repeat("*", 78), name, bin, strings.Repeat("*", 78))
		if os.Getenv("SWARMD_REQUIRE_CLIS") == "1" {
			t.Fatal(msg)
		}
		fmt.Fprintln(os.Stderr, msg) // visible without -v
		t.Skip(msg)
	}
	return bin
}

// gitEnv is the identity the agents' commits are made with; HOME is
// isolated, so there is no global git config.
var gitEnv = []string{
	"GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@example.com",
	"GIT_COMMITTER_NAME=Agent", "GIT_COMMITTER_EMAIL=agent@example.com",
	"GIT_CONFIG_NOSYSTEM=1",
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), gitEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitRepo makes a repository with one commit, to be a session's worktree.
func gitRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

// commitCmd is the shell command the mock has the agent run: it makes a
// file and commits it with message msg.
func commitCmd(msg string) string {
	return "printf 'made by the agent\\n' > agent.txt && git add -A && git commit -q -m '" + msg + "' && echo committed"
}

// cliKind is one agent CLI under test: how to make its backend talk to the
// mock from an isolated HOME.
type cliKind struct {
	name string
	args []string // beyond the backend's own invocation: unattended tool use
	env  func(t testing.TB, home, url string) []string
	// lateTools: the CLI reports a shell tool call only once it ends
	// (Codex's exec_command), so an interrupted call is not seen.
	lateTools bool
	make      func(sup *proc.Supervisor, cfg AgentCLIConfig) (Backend, error)
}

var claudeKind = cliKind{
	name: "claude",
	args: nil, // AllowedTools: Bash, below
	env: func(_ testing.TB, _, url string) []string {
		return []string{
			"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=sk-ant-test",
			"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
		}
	},
	make: func(sup *proc.Supervisor, cfg AgentCLIConfig) (Backend, error) {
		cfg.AllowedTools = []string{"Bash"}
		return NewClaude(sup, cfg)
	},
}

var codexKind = cliKind{
	name:      "codex",
	args:      []string{"--dangerously-bypass-approvals-and-sandbox"},
	lateTools: true,
	env: func(t testing.TB, home, url string) []string {
		codexHome := filepath.Join(home, "codex")
		if err := os.MkdirAll(codexHome, 0o700); err != nil {
			t.Fatal(err)
		}
		// One retry of a failed request, so that failure tests stay short.
		conf := `model = "mock-model"
model_provider = "mock"

[model_providers.mock]
name = "mock"
base_url = "` + url + `/v1"
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 1
stream_max_retries = 1
`
		if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"CODEX_HOME=" + codexHome, "MOCK_API_KEY=test-key"}
	},
	make: func(sup *proc.Supervisor, cfg AgentCLIConfig) (Backend, error) { return NewCodex(sup, cfg) },
}

var geminiKind = cliKind{
	name: "gemini",
	args: []string{"--yolo"},
	env: func(t testing.TB, home, url string) []string {
		dir := filepath.Join(home, ".gemini")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		settings := `{"security":{"auth":{"selectedType":"gemini-api-key"}}}`
		if err := os.WriteFile(filepath.Join(dir, "settings.json"), []byte(settings), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"GEMINI_API_KEY=test-key", "GOOGLE_GEMINI_BASE_URL=" + url}
	},
	make: func(sup *proc.Supervisor, cfg AgentCLIConfig) (Backend, error) { return NewGemini(sup, cfg) },
}

// cliRig is one real CLI wired to a fresh mock, in a fresh git repository,
// with an isolated HOME and TMPDIR (Gemini CLI writes error reports there).
type cliRig struct {
	kind cliKind
	mock *mockllm.Server
	be   Backend
	repo string
}

func newCLIRig(t *testing.T, kind cliKind, extraEnv []string, script ...mockllm.Turn) *cliRig {
	t.Helper()
	bin := cliBin(t, kind.name)
	m := mockllm.New(script...)
	t.Cleanup(m.Close)
	home := t.TempDir()
	env := append([]string{"HOME=" + home, "TMPDIR=" + home}, kind.env(t, home, m.URL())...)
	env = append(env, extraEnv...)
	be, err := kind.make(newSupervisor(t), AgentCLIConfig{Command: bin, Args: kind.args, Env: env})
	if err != nil {
		t.Fatalf("new %s backend: %v", kind.name, err)
	}
	return &cliRig{kind: kind, mock: m, be: be, repo: gitRepo(t)}
}

var cliSeq int

// spec is a session in the rig's repository with a unique prompt.
func (r *cliRig) spec(t *testing.T) Spec {
	cliSeq++
	id := r.kind.name + "-" + strconv.Itoa(cliSeq) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return Spec{
		Agent:     "alice",
		SessionID: id,
		Seq:       1,
		Dir:       r.repo,
		Env:       append([]string{"SWARM_AGENT_ID=alice", "SWARM_SESSION_ID=" + id}, gitEnv...),
		Prompt:    "You are agent alice (" + id + "). Commit your work.\n",
		LogPath:   filepath.Join(t.TempDir(), id+".log"),
	}
}

func (r *cliRig) start(t *testing.T, sp Spec) Session {
	t.Helper()
	return start(t, r.be, sp)
}

// waitCLI waits for a real CLI session, dumping its log on a timeout.
func waitCLI(t *testing.T, s Session, sp Spec, limit time.Duration) Result {
	t.Helper()
	select {
	case <-s.Done():
		return s.Result()
	case <-time.After(limit):
		b, _ := os.ReadFile(sp.LogPath)
		t.Fatalf("session %s not done within %s; log:\n%s", s.ID(), limit, tail(b, 4000))
		return Result{}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func logOf(t *testing.T, sp Spec) string {
	b, _ := os.ReadFile(sp.LogPath)
	return string(tail(b, 6000))
}

// treeProcs lists the live processes whose environment carries the marker
// of the tree with this id.
func treeProcs(t testing.TB, id string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	suffix := []byte("\x1f" + id + "\x00")
	var found []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone, or a kernel thread
		}
		i := bytes.Index(env, []byte(proc.MarkerEnv+"="))
		if i < 0 || !bytes.Contains(env[i:], suffix) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && bytes.Contains(st, []byte(") Z ")) {
			continue // a zombie is dead; its reaping is the supervisor's business
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		found = append(found, e.Name()+": "+string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
	}
	return found
}

// waitProc polls until a process of the tree runs a command line holding
// want, as a tool of the CLI.
func waitProc(t *testing.T, id, want string, s Session, sp Spec) {
	t.Helper()
	deadline := time.Now().Add(cliLimit)
	for time.Now().Before(deadline) {
		for _, p := range treeProcs(t, id) {
			if strings.Contains(p, want) {
				return
			}
		}
		select {
		case <-s.Done():
			t.Fatalf("session ended before running %q: %+v\nlog:\n%s", want, s.Result(), logOf(t, sp))
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no process running %q within %s; log:\n%s", want, cliLimit, logOf(t, sp))
}

// firstScripted is the first request the script answered.
func firstScripted(t *testing.T, m *mockllm.Server) mockllm.Request {
	t.Helper()
	reqs := m.Scripted()
	if len(reqs) == 0 {
		t.Fatal("the mock saw no scripted request")
	}
	return reqs[0]
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), cliLimit)
	t.Cleanup(cancel)
	return ctx
}

// testCommit runs a session whose agent commits through the CLI's shell tool
// and then finishes: the session is a success, the commit is there, usage
// and the tool call are recorded, and the CLI sent the prompt.
func testCommit(t *testing.T, kind cliKind) {
	rig := newCLIRig(t, kind, nil, mockllm.Shell(commitCmd("work by "+kind.name)), mockllm.Text("Committed agent.txt."))
	sp := rig.spec(t)
	head := git(t, rig.repo, "rev-parse", "HEAD")
	s := rig.start(t, sp)
	r := waitCLI(t, s, sp, cliLimit)
	if r.Outcome != OutcomeSuccess {
		t.Fatalf("result %+v\nlog:\n%s", r, logOf(t, sp))
	}
	if got := git(t, rig.repo, "log", "-1", "--format=%s %an"); got != "work by "+kind.name+" Agent" {
		t.Fatalf("last commit %q, want the agent's", got)
	}
	if got := git(t, rig.repo, "rev-parse", "HEAD~1"); got != head {
		t.Fatalf("HEAD~1 = %s, want %s", got, head)
	}
	if r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 {
		t.Errorf("usage not recorded: %+v", r.Usage)
	}
	if r.ToolCalls != 1 || len(r.Tools) != 1 || r.Tools[0].End.IsZero() {
		t.Errorf("tool calls %d %+v, want one finished", r.ToolCalls, r.Tools)
	}
	if r.Text != "Committed agent.txt." {
		t.Errorf("Text = %q", r.Text)
	}
	reqs := rig.mock.Scripted()
	if len(reqs) != 2 || !reqs[0].BodyContains(strings.TrimSpace(sp.Prompt)) {
		t.Errorf("mock saw %d scripted requests; first has the prompt: %v", len(reqs), len(reqs) > 0 && reqs[0].BodyContains(sp.Prompt))
	}
	// The log renders to the call, its output, the answer and the usage
	// that was recorded, without JSON.
	b, err := os.ReadFile(sp.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	out := render(t, b, 4096)
	rest := out
	for _, want := range []string{"=== swarmd session " + sp.SessionID, "\n→ ", "git commit -q -m 'work by " + kind.name + "'",
		"\n  │ committed", "\nCommitted agent.txt.", "\n✓ ", "\n  " + usageText(r.Usage) + "\n", "outcome success"} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("rendered log lacks %q after what came before:\n%s\nlog:\n%s", want, out, b)
		}
		rest = rest[i+len(want):]
	}
	t.Logf("%s: spawn -> first request %v, result record -> session done %v, whole session %v, usage %+v",
		kind.name, firstScripted(t, rig.mock).Time.Sub(r.Started), r.Ended.Sub(r.ResultAt), r.Ended.Sub(r.Started), r.Usage)
}

// testInterrupt cancels a session while the CLI's shell tool runs a long
// sleep in its own session (setsid): the session ends and nothing of its
// tree is left.
func testInterrupt(t *testing.T, kind cliKind) {
	rig := newCLIRig(t, kind, nil, mockllm.Shell("sleep 300"), mockllm.Text("slept"))
	sp := rig.spec(t)
	s := rig.start(t, sp)
	waitProc(t, sp.SessionID, "sleep 300", s, sp)
	cancelled := time.Now()
	if err := s.Cancel(); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	r := waitCLI(t, s, sp, 15*time.Second)
	if left := treeProcs(t, sp.SessionID); len(left) > 0 {
		t.Fatalf("processes left after the session ended: %q", left)
	}
	if r.Outcome == OutcomeSuccess {
		t.Fatalf("an interrupted session is a success: %+v", r)
	}
	if r.AbortReason != abortForSignal(kind.cancelSignal()) && r.AbortReason != AbortReasonFor(r.ExitCode, 0) {
		t.Errorf("AbortReason %q for %+v", r.AbortReason, r)
	}
	if !kind.lateTools && (r.ToolCalls != 1 || len(r.Tools) != 1 || r.Tools[0].Start.After(cancelled)) {
		t.Errorf("ToolCalls = %d, Tools %+v; want the sleep", r.ToolCalls, r.Tools)
	}
	t.Logf("%s: cancel -> session done %v (%s)", kind.name, time.Since(cancelled), r.Reason)
}

func (k cliKind) cancelSignal() syscall.Signal {
	if k.name == "gemini" {
		return syscall.SIGTERM
	}
	return syscall.SIGINT
}

// testMaxTurns runs a session whose model would take four turns (three
// shell commands, then an answer) with MaxTurns 2: it ends with
// AbortMaxTurns after the two allowed turns' commands ran, the third never
// runs, and OnTool was told of both calls with their commands.
func testMaxTurns(t *testing.T, kind cliKind) {
	// Where swarmd counts the turns (Codex, Gemini CLI), it cancels once
	// the second turn's calls have ended, while the CLI asks the model for
	// a third. A model takes a while to answer; an instant one would race
	// the cancel on a loaded machine (CI lost it once), so the third
	// answer takes as long as a real one may. The CLI's exit cuts it off.
	third := mockllm.Shell("echo turn-three > three.txt")
	third.Delay = 3 * time.Second
	rig := newCLIRig(t, kind, nil, mockllm.Shell("echo turn-one"), mockllm.Shell("echo turn-two"),
		third, mockllm.Text("finished"))
	sp := rig.spec(t)
	sp.MaxTurns = 2
	calls := make(chan ToolCall, 16)
	sp.OnTool = func(c ToolCall) { calls <- c }
	s := rig.start(t, sp)
	r := waitCLI(t, s, sp, cliLimit)
	if r.AbortReason != AbortMaxTurns || r.Outcome != OutcomeError || !strings.HasPrefix(r.Reason, "max_turns") {
		t.Fatalf("result %+v; want abort reason max_turns\nlog:\n%s", r, logOf(t, sp))
	}
	if _, err := os.Stat(filepath.Join(rig.repo, "three.txt")); err == nil {
		t.Fatal("the third turn's command ran")
	}
	close(calls)
	var got []string
	for c := range calls {
		if c.End.IsZero() || c.Failed {
			t.Errorf("call %+v: want ended and ok", c)
		}
		got = append(got, c.Input)
	}
	if len(got) != 2 || !strings.Contains(got[0], "echo turn-one") || !strings.Contains(got[1], "echo turn-two") {
		t.Fatalf("OnTool was told %q; want the two commands", got)
	}
	t.Logf("%s: %s; %d scripted requests", kind.name, r.Reason, len(rig.mock.Scripted()))
}

func TestClaudeMaxTurns(t *testing.T) { testMaxTurns(t, claudeKind) }
func TestCodexMaxTurns(t *testing.T)  { testMaxTurns(t, codexKind) }
func TestGeminiMaxTurns(t *testing.T) { testMaxTurns(t, geminiKind) }
