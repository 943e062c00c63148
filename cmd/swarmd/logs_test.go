package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/cli"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
)

// operatorConfig is a repo whose alice runs Claude Code and bob a command.
const operatorConfig = `
listen: ""
backends:
  sh:
    type: command
    command: /bin/true
agents:
  - {name: alice, role: "You work."}
  - {name: bob, role: "You also work.", backend: sh}
`

// runWith runs one command line in process with out as its standard output.
func runWith(t *testing.T, out io.Writer, args ...string) (stderr string, err error) {
	t.Helper()
	var errOut bytes.Buffer
	s := streams{in: strings.NewReader(""), out: out, err: &errOut, getenv: func(string) string { return "" }}
	root := cliRoot(s)
	root.SetArgs(args)
	root.SetIn(s.in)
	root.SetOut(out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(t.Context())
	return errOut.String(), err
}

// writeLog puts a session log where swarmd keeps alice's and bob's.
func writeLog(t *testing.T, repo, agent string, seq int, data []byte) string {
	t.Helper()
	dir := filepath.Join(repo, ".swarm", "logs", agent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, strconv.Itoa(seq)+".log")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "backend", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// onPTY runs a command line with a terminal as its standard output and
// returns what the terminal received.
func onPTY(t *testing.T, args ...string) string {
	t.Helper()
	master, tty := openPTY(t)
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(master) // EIO once the terminal side is closed
		got <- b
	}()
	_, err := runWith(t, tty, args...)
	tty.Close()
	b := <-got
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return strings.ReplaceAll(string(b), "\r\n", "\n")
}

// swarmd logs renders the structured backends' logs on a terminal, prints
// them as written elsewhere, and --raw and --pretty choose.
func TestLogsRenderedOnATerminal(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, operatorConfig)
	claude := fixture(t, "claude-tools.log")
	writeLog(t, repo, "alice", 1, claude)
	plain := []byte("=== swarmd session bob-1 seq 1 started 2026-01-02T03:04:05Z ===\nline 1\nline 2\nline 3\nline 4\n")
	writeLog(t, repo, "bob", 1, plain)
	const call = "→ Bash: echo hello; echo two; false\n"

	var out bytes.Buffer
	if _, err := runWith(t, &out, "logs", "alice", "-c", cfg); err != nil || !bytes.Equal(out.Bytes(), claude) {
		t.Fatalf("logs to a buffer: %v; not the file as written:\n%s", err, out.String())
	}
	out.Reset()
	if _, err := runWith(t, &out, "logs", "alice", "--pretty", "-c", cfg); err != nil || !strings.Contains(out.String(), call) ||
		strings.Contains(out.String(), `{"type"`) {
		t.Fatalf("logs --pretty: %v\n%s", err, out.String())
	}
	if _, err := runWith(t, io.Discard, "logs", "alice", "--raw", "--pretty", "-c", cfg); !isUsage(err) {
		t.Fatalf("--raw --pretty: %v, want a usage error", err)
	}

	if got := onPTY(t, "logs", "alice", "-c", cfg); !strings.Contains(got, call) || strings.Contains(got, `{"type"`) {
		t.Fatalf("logs on a terminal is not rendered:\n%s", got)
	}
	if got := onPTY(t, "logs", "alice", "--raw", "-c", cfg); got != string(claude) {
		t.Fatalf("logs --raw on a terminal is not the file as written:\n%s", got)
	}
	// A command backend's output is its own text: as written, unless asked.
	if got := onPTY(t, "logs", "bob", "-c", cfg); got != string(plain) {
		t.Fatalf("a command agent's log on a terminal:\n%s", got)
	}
	out.Reset()
	if _, err := runWith(t, &out, "logs", "bob", "--pretty", "-c", cfg); err != nil || !strings.Contains(out.String(), "… (1 more line)") {
		t.Fatalf("logs bob --pretty: %v\n%s", err, out.String())
	}
}

// syncBuffer is a bytes.Buffer written by one goroutine and read by another.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// swarmd logs -f --pretty renders a live log line by line as it grows, and
// ends when the log is archived.
func TestLogsFollowRendered(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, operatorConfig)
	lines := strings.SplitAfter(string(fixture(t, "claude-tools.log")), "\n")
	path := writeLog(t, repo, "alice", 1, []byte(lines[0]+lines[1]))
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := runWith(t, &out, "logs", "alice", "-f", "--pretty", "-c", cfg)
		done <- err
	}()
	waitOutput := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q within 10s; output:\n%s", want, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitOutput("● claude claude-opus-5-5")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(lines[2]); err != nil { // the first tool call
		t.Fatal(err)
	}
	waitOutput("→ Bash: echo hello; echo two; false\n")
	if _, err := f.WriteString(strings.Join(lines[3:], "")); err != nil {
		t.Fatal(err)
	}
	waitOutput("outcome success: exit status 0 ===\n")
	if err := os.Remove(path); err != nil { // archived: following ends
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f did not end once the log was archived")
	}
	if strings.Contains(out.String(), `{"type"`) {
		t.Fatalf("JSON in the rendered output:\n%s", out.String())
	}
}

// recordSessions writes sessions to the repo's swarm.db through the journal,
// as the daemon does.
func recordSessions(t *testing.T, repo string, ss ...store.SessionRecord) {
	t.Helper()
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(repo, ".swarm"), 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := mailbox.Open(ctx, filepath.Join(repo, ".swarm", "swarm.db"), store.Options{}, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	j := db.Store().NewJournal(store.JournalOptions{})
	j.Start()
	for _, s := range ss {
		if s.Ended == nil {
			j.SessionStarted(s)
		} else {
			j.SessionEnded(s)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

func sessionsFixture(t *testing.T, repo string) time.Time {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	end := func(d time.Duration) *time.Time { e := t0.Add(d); return &e }
	recordSessions(t, repo,
		store.SessionRecord{SessionID: "alice-1", Agent: "alice", Seq: 1, Started: t0, Ended: end(90 * time.Second),
			Duration: 90 * time.Second, Outcome: store.OutcomeSuccess, TokensIn: 12000, TokensOut: 345, CostUSD: 0.0123,
			ToolCalls: 4, Commits: 2, ResultText: "Committed the parser.\nAll tests pass."},
		store.SessionRecord{SessionID: "alice-2", Agent: "alice", Seq: 2, Started: t0.Add(2 * time.Minute), Ended: end(3 * time.Minute),
			Duration: time.Minute, Outcome: store.OutcomeInterrupted, AbortReason: "urgent_message", Signal: "SIGINT",
			Reason: "killed by SIGINT (cancelled)", TokensIn: 100, CostUSD: 0.5},
		store.SessionRecord{SessionID: "bob-1", Agent: "bob", Seq: 1, Started: t0.Add(time.Minute), Ended: end(2 * time.Minute),
			Duration: time.Minute, Outcome: store.OutcomeError, ExitCode: 1, Reason: "exit status 1: \x1b[31mboom\x1b[0m\nsecond line " + strings.Repeat("x", 200)},
		store.SessionRecord{SessionID: "alice-3", Agent: "alice", Seq: 3, Started: time.Now().Add(-time.Minute)},
	)
	return t0
}

func TestSessionsCommand(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, operatorConfig)
	if _, err := runWith(t, io.Discard, "sessions", "-c", cfg); !isUsage(err) || !strings.Contains(err.Error(), "swarm.db") {
		t.Fatalf("sessions without a database: %v", err)
	}
	sessionsFixture(t, repo)

	var out bytes.Buffer
	if _, err := runWith(t, &out, "sessions", "alice", "-c", cfg); err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(rows) != 4 || !strings.HasPrefix(rows[0], "AGENT") {
		t.Fatalf("sessions alice:\n%s", out.String())
	}
	for i, want := range [][]string{
		{"alice", " 1 ", "1m30s", "success", "12.3k", "$0.0123", " 2 ", "Committed the parser. All tests pass."},
		{"alice", " 2 ", "1m0s", "interrupted", "urgent_message", "100", "$0.5000", "killed by SIGINT (cancelled)"},
		{"alice", " 3 ", "running"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[i+1], w) {
				t.Errorf("row %d lacks %q:\n%s", i+1, w, out.String())
			}
		}
	}

	// Every agent's, oldest first; a reason is one line, cut, without escapes.
	out.Reset()
	if _, err := runWith(t, &out, "sessions", "--limit", "2", "-c", cfg); err != nil {
		t.Fatal(err)
	}
	rows = strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(rows) != 3 || !strings.HasPrefix(rows[1], "alice ") || !strings.Contains(rows[1], "interrupted") || !strings.HasPrefix(rows[2], "alice ") {
		t.Fatalf("sessions --limit 2, want alice's latest two:\n%s", out.String())
	}
	out.Reset()
	if _, err := runWith(t, &out, "sessions", "bob", "-c", cfg); err != nil {
		t.Fatal(err)
	}
	if row := strings.Split(out.String(), "\n")[1]; strings.Contains(row, "\x1b") || !strings.Contains(row, "exit status 1: [31mboom[0m second line xx") ||
		!strings.HasSuffix(row, "…") || len([]rune(row)) > 160 {
		t.Fatalf("bob's row: %q", row)
	}

	out.Reset()
	if _, err := runWith(t, &out, "sessions", "alice", "--json", "-n", "0", "-c", cfg); err != nil {
		t.Fatal(err)
	}
	var got []cli.SessionJSON
	dec := json.NewDecoder(&out)
	for dec.More() {
		var s cli.SessionJSON
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if len(got) != 3 || got[1].Outcome != "interrupted" || got[1].AbortReason != "urgent_message" || got[0].Commits != 2 ||
		got[0].TokensIn != 12000 || got[0].CostUSD != 0.0123 || got[0].DurationMS != 90000 || got[2].Ended != nil || got[2].Outcome != "" {
		t.Fatalf("sessions --json: %+v", got)
	}
	if _, err := runWith(t, io.Discard, "sessions", "--limit", "-1", "-c", cfg); !isUsage(err) {
		t.Fatalf("--limit -1: %v", err)
	}
}

// fakeAPI is a daemon's control API with fixed agents.
type fakeAPI struct{ agents []control.AgentStatus }

func (f fakeAPI) Agents() []control.AgentStatus { return f.agents }
func (f fakeAPI) Agent(string) (control.AgentStatus, error) {
	return control.AgentStatus{}, control.ErrUnknownAgent
}
func (fakeAPI) StopAgent(context.Context, string) error  { return nil }
func (fakeAPI) StartAgent(context.Context, string) error { return nil }
func (fakeAPI) PauseAgent(context.Context, string, control.PauseRequest) (control.PauseResult, error) {
	return control.PauseResult{}, nil
}
func (fakeAPI) ResumeAgent(context.Context, string) (control.ResumeResult, error) {
	return control.ResumeResult{}, nil
}
func (fakeAPI) Events(context.Context, string, int64, int) ([]control.Event, error) {
	return nil, nil
}

// swarmd status shows each agent's spend, summed from swarm.db.
func TestStatusShowsSpend(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, operatorConfig)
	sessionsFixture(t, repo)
	now := time.Now()
	srv, err := control.Listen(filepath.Join(repo, ".swarm", "swarmd.sock"), fakeAPI{agents: []control.AgentStatus{
		{Name: "alice", State: "Running", Seq: 3, Since: now}, {Name: "bob", State: "CoolingDown", Seq: 1, Since: now},
		{Name: "carol", State: "Running", Since: now},
	}}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	var out bytes.Buffer
	if _, err := runWith(t, &out, "status", "-c", cfg); err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(rows) != 4 || !strings.Contains(rows[0], "TOKENS") || !strings.Contains(rows[0], "COST") {
		t.Fatalf("status:\n%s", out.String())
	}
	if !regexp.MustCompile(`alice .* 12\.4k +\$0\.5123 `).MatchString(rows[1]) || strings.Contains(rows[2], "$") || strings.Contains(rows[3], "$") {
		t.Errorf("status, want alice's spend only:\n%s", out.String())
	}
	out.Reset()
	if _, err := runWith(t, &out, "status", "--json", "-c", cfg); err != nil {
		t.Fatal(err)
	}
	var got []cli.StatusRow
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 3 {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	if sp := got[0].Spend; got[0].Name != "alice" || sp == nil || sp.Sessions != 3 || sp.TokensIn != 12100 || sp.TokensOut != 345 || math.Abs(sp.CostUSD-0.5123) > 1e-9 {
		t.Errorf("alice's spend: %+v", sp)
	}
	if got[1].Spend == nil || got[1].Spend.CostUSD != 0 || got[2].Spend != nil || !strings.Contains(out.String(), `"state": "Running"`) {
		t.Errorf("status --json:\n%s", out.String())
	}
}
