package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/cli"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// sessionScript is alice's one session: mail and task commands with no
// SWARM_DB_PATH (a shared store's sessions get none), each one's output and
// exit status kept in OUT for the test.
const sessionScript = `cat >/dev/null
echo "[$SWARM_DB_PATH]" > OUT/env
printf 'from the session' | swarmd mail send --to bob --subject hi > OUT/send 2>&1; echo "exit $?" >> OUT/send
printf 'task body' | swarmd task add 'session task' --plan --body - > OUT/add 2>&1; echo "exit $?" >> OUT/add
swarmd task approve 1 > OUT/approve 2>&1; echo "exit $?" >> OUT/approve
`

// TestSessionCommandsGoThroughTheDaemon: on a shared (PostgreSQL) store a
// session's `swarmd mail send` and `swarmd task add` reach the store through
// its daemon's control socket, as the session's agent; a process that is not
// one of the daemon's sessions is refused.
func TestSessionCommandsGoThroughTheDaemon(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "sessioncli")
	repo := gitRepo(t)
	out := t.TempDir()
	script := filepath.Join(out, "session.sh")
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(sessionScript, "OUT", out)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, repo, `
listen: ""
sandbox: {writable: [`+out+`]}
store: "`+srv.URL(dbName)+`"
backends:
  session:
    type: command
    command: sh
    args: [`+script+`]
  waiter:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; exec sleep 3600"]
agents:
  - {name: alice, role: "sends", backend: session, max_sessions: 1}
  - {name: bob, role: "waits", backend: waiter}
`)
	d := startDaemon(t, cfg)
	d.waitLine("alice Stopped after her session", transitionTo("alice", "Stopped"))

	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("the session wrote no %s: %v; log:\n%s", name, err, d.log())
		}
		return string(b)
	}
	if got := read("env"); got != "[]\n" {
		t.Fatalf("the session has SWARM_DB_PATH %s", got)
	}
	if got := read("send"); !strings.HasPrefix(got, "sent #") || !strings.HasSuffix(got, " to bob\nexit 0\n") {
		t.Errorf("mail send in the session: %q", got)
	}
	if got := read("add"); !strings.HasSuffix(got, "\nexit 0\n") {
		t.Errorf("task add in the session: %q", got)
	}
	// The daemon recognised a session, as a session's own command would.
	if got := read("approve"); !strings.Contains(got, "an operator command; agent alice's session may not run it") || !strings.HasSuffix(got, "exit 2\n") {
		t.Errorf("task approve in the session: %q", got)
	}

	// The store holds them, from alice.
	stdout, stderr, code := runCLI(t, []string{"SWARM_AGENT_ID=bob"}, "", "mail", "inbox", "--all", "--json", "-c", cfg)
	var inbox []cli.MessageJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &inbox) != nil {
		t.Fatalf("bob's inbox: exit %d %s %s", code, stdout, stderr)
	}
	if len(inbox) != 1 || inbox[0].From != "alice" || inbox[0].Subject != "hi" || inbox[0].Body != "from the session" {
		t.Errorf("bob's inbox %+v", inbox)
	}
	stdout, stderr, code = runCLI(t, nil, "", "task", "list", "--json", "-c", cfg)
	var tasks []taskboard.Task
	if code != 0 || json.Unmarshal([]byte(stdout), &tasks) != nil {
		t.Fatalf("task list: exit %d %s %s", code, stdout, stderr)
	}
	if len(tasks) != 1 || tasks[0].Title != "session task" || tasks[0].Body != "task body" || tasks[0].CreatedBy != "agent:alice" || tasks[0].StateName != "PLANNED" {
		t.Errorf("tasks %+v", tasks)
	}

	// Not a session: the test itself on the socket, and a process whose
	// marker claims a session this daemon never ran.
	stateDir := filepath.Join(repo, ".swarm")
	_, err := control.NewClient(filepath.Join(stateDir, "swarmd.sock")).SessionCLI(context.Background(),
		control.SessionCLIRequest{Args: []string{"mail", "send", "--to", "bob", "forged"}})
	if !errors.Is(err, control.ErrForbidden) || !strings.Contains(err.Error(), "only a session of this daemon's agents") {
		t.Errorf("a request from outside every session: %v, want forbidden", err)
	}
	forged := proc.Caller{Owner: stateDir, Instance: "1.2.3", TreeID: "alice-1-0123456789ab"}
	_, stderr, code = runCLI(t, []string{proc.MarkerEnv + "=" + forged.String()}, "", "mail", "send", "--to", "bob", "forged")
	if code != 1 || !strings.Contains(stderr, "only a session of this daemon's agents") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("a forged session: exit %d %q", code, stderr)
	}
	if stdout, _, _ := runCLI(t, []string{"SWARM_AGENT_ID=bob"}, "", "mail", "inbox", "--all", "--json", "-c", cfg); strings.Contains(stdout, "forged") {
		t.Errorf("a refused message was stored: %s", stdout)
	}

	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(15 * time.Second); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
	// No daemon: one line naming the socket.
	_, stderr, code = runCLI(t, []string{proc.MarkerEnv + "=" + forged.String()}, "", "mail", "inbox")
	if code != 1 || !strings.Contains(stderr, filepath.Join(stateDir, "swarmd.sock")) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("no daemon: exit %d %q", code, stderr)
	}
}

// TestReadsStdin: a forwarded command sends standard input only when it
// would read it.
func TestReadsStdin(t *testing.T) {
	s := streams{getenv: func(string) string { return "" }}
	for args, want := range map[string]bool{
		"mail send --to bob":              true,
		"mail send --to bob -":            true,
		"mail send --to bob hello":        false,
		"mail reply 3":                    true,
		"mail reply 3 --urgent -":         true,
		"mail reply 3 yes":                false,
		"mail inbox":                      false,
		"task add title --body -":         true,
		"task add title --body=-":         true,
		"task add title --body text":      false,
		"task add title":                  false,
		"task claim":                      false,
		"mail send --frob":                false,
		"mail send -c other.yaml --to bo": true,
	} {
		if got := readsStdin(strings.Fields(args), s); got != want {
			t.Errorf("readsStdin(%s) = %v, want %v", args, got, want)
		}
	}
}

// TestRunSessionCLIUsesTheDaemonsStore: the daemon runs a session's command
// on its own open store, not opening SWARM_DB_PATH again (its environment
// no longer holds the store's password), and leaves that store open.
func TestRunSessionCLIUsesTheDaemonsStore(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "swarm.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	env := map[string]string{"SWARM_DB_PATH": "postgres://swarm@unreachable.invalid/swarm", "SWARM_AGENTS": "alice,bob", "SWARM_AGENT_ID": "alice"}
	for i, args := range [][]string{{"mail", "send", "--to", "bob", "--subject", "hi"}, {"mail", "send", "--to", "bob", "again"}} {
		stdout, stderr, code := runSessionCLI(ctx, daemon.CLIRequest{Args: args, Stdin: "from stdin", Env: env, Store: db})
		if code != 0 || stdout != fmt.Sprintf("sent #%d to bob\n", i+1) {
			t.Fatalf("%v: exit %d %q %q", args, code, stdout, stderr)
		}
	}
	mb, err := mailbox.New(ctx, db, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	ms, err := mb.Inbox(ctx, "bob", true)
	if err != nil || len(ms) != 2 || ms[0].From != "alice" || ms[0].Body != "from stdin" || ms[1].Body != "again" {
		t.Fatalf("bob's inbox %+v, %v", ms, err)
	}
}

// TestRunSessionCLIUsesTheDaemonsMailLimit: a session's `swarmd mail`, run
// by the daemon, is bound by that daemon's mailbox.max_body, not by the
// one the store recorded, which on a shared store is whichever daemon
// started last.
func TestRunSessionCLIUsesTheDaemonsMailLimit(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "swarm.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := mailbox.New(ctx, db, mailbox.Options{MaxBodyBytes: 100}) // another daemon's, recorded last
	if err != nil {
		t.Fatal(err)
	}
	if err := other.RecordLimits(ctx); err != nil {
		t.Fatal(err)
	}
	other.Close()
	env := map[string]string{"SWARM_DB_PATH": db.Path(), "SWARM_AGENTS": "alice,bob", "SWARM_AGENT_ID": "alice"}
	for _, c := range []struct {
		limit, body int
		sent        bool
	}{
		{limit: 10, body: 50, sent: false},  // under the store's 100, over the daemon's 10
		{limit: 10, body: 10, sent: true},   // the daemon's limit itself
		{limit: 500, body: 200, sent: true}, // over the store's 100, under the daemon's 500
	} {
		args := []string{"mail", "send", "--to", "bob", strings.Repeat("x", c.body)}
		stdout, stderr, code := runSessionCLI(ctx, daemon.CLIRequest{Args: args, Env: env, Store: db, MailMaxBody: c.limit})
		if sent := code == 0; sent != c.sent {
			t.Errorf("a %d-byte body from a session of a daemon whose max_body is %d (the store's 100): sent %v, want %v; exit %d %q %q",
				c.body, c.limit, sent, c.sent, code, stdout, stderr)
		}
		if !c.sent && !strings.Contains(stderr, "over the 10-byte limit") {
			t.Errorf("the refusal of a %d-byte body does not name the daemon's limit, %d: %q", c.body, c.limit, stderr)
		}
	}
}

// TestRunSessionCLIUsesTheDaemonsBoard: a session's `swarmd task` command,
// run by the daemon, claims and reports on the daemon's own board, by the
// config of the daemon that runs its agent, not by what the store's
// settings say another daemon sharing the store recorded. Here the store
// says no merge queue closes the tasks (a DONE would be CLOSED at once);
// the daemon's board waits for its merge queue, and starts the review its
// config gives alice's tasks.
func TestRunSessionCLIUsesTheDaemonsBoard(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "swarm.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.SetSetting(ctx, "merge.into", ""); err != nil {
		t.Fatal(err)
	}
	board := taskboard.New(db, taskboard.Options{ReviewerOf: func(agent string) (string, int) {
		if agent == "alice" {
			return "rita", 2
		}
		return "", 0
	}})
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "the work"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SWARM_DB_PATH": "postgres://swarm@unreachable.invalid/swarm", "SWARM_AGENTS": "alice,rita", "SWARM_AGENT_ID": "alice"}
	for _, args := range [][]string{{"task", "claim"}, {"task", "done", "--summary", "did it"}} {
		if stdout, stderr, code := runSessionCLI(ctx, daemon.CLIRequest{Args: args, Env: env, Store: db, Board: board}); code != 0 {
			t.Fatalf("%v: exit %d %q %q", args, code, stdout, stderr)
		}
	}
	got, err := board.Get(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.StateName != "DONE" || got.Reviewer != "rita" {
		t.Errorf("task %d after alice's claim and done: %s, reviewer %q; want DONE, waiting for rita's review", tk.ID, got.StateName, got.Reviewer)
	}
}

// forgerScript is alice's one session: once OUT/go is there, mail and task
// commands that name bob in SWARM_AGENT_ID, then honest ones; each one's
// output and exit status in OUT/NAME, and OUT/done at the end. It stays
// running so that nothing it holds is released before the test looks.
const forgerScript = `cat >/dev/null
while [ ! -e OUT/go ]; do sleep 0.05; done
try() { n=$1; shift; "$@" > OUT/$n 2>&1; echo "exit $?" >> OUT/$n; }
try claim env SWARM_AGENT_ID=bob swarmd task claim
try send env SWARM_AGENT_ID=bob swarmd mail send --to bob --subject forged hello
try inbox env SWARM_AGENT_ID=bob swarmd mail inbox
try report env SWARM_AGENT_ID=bob swarmd task done
try honest env SWARM_AGENT_ID=alice swarmd mail send --to bob --subject honest hello
echo done > OUT/done
exec sleep 3600
`

// TestAForgedAgentIDIsRefused: where the daemon knows a session by the
// kernel (its sandbox's socket; its cgroup, on a shared store whose
// sessions' commands go through the daemon), a command whose
// SWARM_AGENT_ID names another agent is refused with exit 2 and one line,
// as it is where the session runs the command itself (isolation: off): it
// acts neither as the agent it names (bob's task claimed, mail from bob)
// nor, silently, as the session's (the free task claimed by alice).
func TestAForgedAgentIDIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// config is the isolation, sandbox and store lines; it skips
		// the case where this host lacks what it needs.
		config func(t *testing.T, out string) string
	}{
		{"sandbox", func(t *testing.T, out string) string {
			requireBwrap(t)
			return fmt.Sprintf("isolation: strict\nsandbox: {writable: [%q]}\n", out)
		}},
		{"cgroup on a shared store", func(t *testing.T, out string) string {
			srv := pgtest.Shared(t)
			return fmt.Sprintf("isolation: auto\nsandbox: {bwrap: %q}\nstore: %q\n", filepath.Join(out, "no-bwrap"), srv.URL(srv.NewDB(t, "forged")))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := gitRepo(t)
			out := t.TempDir()
			script := filepath.Join(out, "session.sh")
			if err := os.WriteFile(script, []byte(strings.ReplaceAll(forgerScript, "OUT", out)), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
%s
defaults:
  grace_period: 1s
backends:
  forger: {type: command, command: sh, args: [%q]}
  waiter: {type: command, command: sh, args: [-c, "cat >/dev/null; exec sleep 3600"]}
agents:
  - {name: alice, role: x, backend: forger, env: {HOME: %q}}
  - {name: bob, role: x, backend: waiter, env: {HOME: %q}}
`, tc.config(t, out), script, t.TempDir(), t.TempDir()))
			d := startDaemon(t, cfg)
			d.waitLine("alice Running", transitionTo("alice", "Running"))
			d.waitLine("bob Running", transitionTo("bob", "Running"))
			st, _, _ := runCLI(t, nil, "", "status", "-c", cfg)
			if tc.name != "sandbox" && !strings.Contains(st, "a cgroup per process tree") {
				t.Skipf("no cgroups on this host:\n%s", st)
			}
			// Added while both sessions run: neither prompt claimed them.
			mustCLI(t, nil, "task", "add", "bob's task", "--to", "bob", "-c", cfg)
			mustCLI(t, nil, "task", "add", "anyone's task", "-c", cfg)
			if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			waitFileLine(t, filepath.Join(out, "done"), "done", 60*time.Second, d)
			read := func(name string) string {
				b, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatalf("the session wrote no %s: %v", name, err)
				}
				return string(b)
			}
			for _, name := range []string{"claim", "send", "inbox", "report"} {
				verb := map[string]string{"claim": "task", "send": "mail", "inbox": "mail", "report": "task"}[name]
				want := "swarmd: " + verb + ": SWARM_AGENT_ID is bob, but this session is alice's\nexit 2\n"
				if got := read(name); got != want {
					t.Errorf("%s with SWARM_AGENT_ID=bob in alice's session: %q, want %q", name, got, want)
				}
			}
			if got := read("honest"); !strings.HasSuffix(got, " to bob\nexit 0\n") {
				t.Errorf("mail send naming alice, in alice's session: %q", got)
			}

			stdout, stderr, code := runCLI(t, []string{"SWARM_AGENT_ID=bob"}, "", "mail", "inbox", "--all", "--json", "-c", cfg)
			var inbox []cli.MessageJSON
			if code != 0 || json.Unmarshal([]byte(stdout), &inbox) != nil {
				t.Fatalf("bob's inbox: exit %d %s %s", code, stdout, stderr)
			}
			if len(inbox) != 1 || inbox[0].From != "alice" || inbox[0].Subject != "honest" {
				t.Errorf("bob's inbox %+v: want alice's honest mail alone", inbox)
			}
			stdout, stderr, code = runCLI(t, nil, "", "task", "list", "--json", "-c", cfg)
			var tasks []taskboard.Task
			if code != 0 || json.Unmarshal([]byte(stdout), &tasks) != nil {
				t.Fatalf("task list: exit %d %s %s", code, stdout, stderr)
			}
			if len(tasks) != 2 {
				t.Fatalf("tasks %+v", tasks)
			}
			for _, tk := range tasks {
				if tk.Claimant != "" {
					t.Errorf("task %q claimed by %s", tk.Title, tk.Claimant)
				}
			}
			if !strings.Contains(d.log(), "a session's command named another agent in SWARM_AGENT_ID") {
				t.Errorf("the daemon did not log the forgery:\n%s", d.log())
			}
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			if code := d.wait(15 * time.Second); code != 0 {
				t.Fatalf("daemon exit %d", code)
			}
		})
	}
}

// TestSessionCommandsKeepNoMemory: the daemon's heap does not grow with the
// commands it runs for sessions. It grew about 4 KB a `swarmd task` when
// each command's flags registered completions in cobra's map of the whole
// process (a soak run: 62% of the daemon's live heap after 20 minutes).
func TestSessionCommandsKeepNoMemory(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "swarm.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	env := map[string]string{"SWARM_DB_PATH": filepath.Join(t.TempDir(), "unused.db"), "SWARM_AGENTS": "alice,bob", "SWARM_AGENT_ID": "alice"}
	run := func(n int) {
		for range n {
			if _, stderr, code := runSessionCLI(ctx, daemon.CLIRequest{Args: []string{"task", "list", "--state", "open"}, Env: env, Store: db}); code != 0 {
				t.Fatalf("task list: exit %d: %s", code, stderr)
			}
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	run(200) // the store's statements, the pools: warmed up
	before := heap()
	const commands = 2000
	run(commands)
	if grew := int64(heap()) - int64(before); grew > 1<<20 {
		t.Errorf("the heap grew %d KB over %d session commands (%d bytes each)", grew>>10, commands, grew/commands)
	}
}
