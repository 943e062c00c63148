package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
)

// mailEnv is the environment a session gives `swarmd mail`.
func mailEnv(db, self string) []string {
	return []string{"SWARM_DB_PATH=" + db, "SWARM_AGENTS=alice,bob,carol", "SWARM_AGENT_ID=" + self}
}

// newMailDB creates swarm.db as the daemon would.
func newMailDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db, err := mailbox.Open(context.Background(), path, store.Options{}, mailbox.Options{Agents: []string{"alice", "bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	return path
}

func TestMailCLI(t *testing.T) {
	db := newMailDB(t)
	out, stderr, code := runCLI(t, mailEnv(db, "alice"), "", "mail", "send", "--to", "bob", "--subject", "plan", "let us split the work")
	if code != 0 || !strings.HasPrefix(out, "sent #1 to bob") {
		t.Fatalf("send: %q %q %d", out, stderr, code)
	}
	// Body from stdin, JSON out.
	out, _, code = runCLI(t, mailEnv(db, "carol"), "line one\nline two\n", "mail", "send", "--to", "bob", "--urgent", "--json", "-")
	var sent []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &sent) != nil || len(sent) != 1 || sent[0]["body"] != "line one\nline two\n" || sent[0]["urgent"] != true {
		t.Fatalf("send stdin json: %q %d", out, code)
	}
	out, _, code = runCLI(t, mailEnv(db, "bob"), "", "mail", "inbox")
	if code != 0 || !strings.Contains(out, "plan") || !strings.Contains(out, "carol") {
		t.Fatalf("inbox: %q %d", out, code)
	}
	out, _, code = runCLI(t, mailEnv(db, "bob"), "", "mail", "read", "1")
	if code != 0 || !strings.Contains(out, "let us split the work") || !strings.Contains(out, "Subject: plan") {
		t.Fatalf("read: %q %d", out, code)
	}
	out, _, code = runCLI(t, mailEnv(db, "bob"), "", "mail", "reply", "#1", "ok, I take the parser")
	if code != 0 || !strings.Contains(out, "to alice (thread #1)") {
		t.Fatalf("reply: %q %d", out, code)
	}
	out, _, code = runCLI(t, mailEnv(db, "alice"), "", "mail", "send", "--all", "--json", "standup in 5")
	if code != 0 || strings.Count(out, `"to"`) != 2 {
		t.Fatalf("broadcast: %q %d", out, code)
	}
	// Outside a session the sender is the operator.
	out, _, code = runCLI(t, []string{"SWARM_DB_PATH=" + db, "SWARM_AGENTS=alice,bob,carol", "SWARM_AGENT_ID="}, "", "mail", "send", "--to", "alice", "--json", "hi")
	if code != 0 || !strings.Contains(out, `"from": "operator"`) {
		t.Fatalf("operator send: %q %d", out, code)
	}

	bad := []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"unknown recipient", []string{"mail", "send", "--to", "dave", "x"}, "", "alice, bob, carol"},
		{"self", []string{"mail", "send", "--to", "alice", "x"}, "", "itself"},
		{"empty body", []string{"mail", "send", "--to", "bob", ""}, "", "empty"},
		{"oversize", []string{"mail", "send", "--to", "bob", "-"}, strings.Repeat("x", 70000), "65536"},
		{"no recipient", []string{"mail", "send", "x"}, "", "--to"},
		{"both", []string{"mail", "send", "--to", "bob", "--all", "x"}, "", "--to"},
		{"bad id", []string{"mail", "read", "abc"}, "", "positive number"},
		{"missing id", []string{"mail", "read", "999"}, "", "not found"},
	}
	for _, c := range bad {
		_, stderr, code := runCLI(t, mailEnv(db, "alice"), c.stdin, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%s: exit %d stderr %q, want exit 2 and one line containing %q", c.name, code, stderr, c.want)
		}
	}
	// Nothing of the refused sends was stored.
	out, _, _ = runCLI(t, mailEnv(db, "bob"), "", "mail", "inbox", "--json")
	var inbox []map[string]any
	if err := json.Unmarshal([]byte(out), &inbox); err != nil {
		t.Fatal(err)
	}
	if len(inbox) != 2 { // carol's urgent, the broadcast: bob read the plan (#1)
		t.Errorf("bob's inbox has %d messages, want 2: %s", len(inbox), out)
	}
	// A database that does not exist is an error, not a new empty mailbox;
	// inside a session (SWARM_DB_PATH set) it can only have been deleted.
	_, stderr, code = runCLI(t, mailEnv(filepath.Join(t.TempDir(), "nope.db"), "alice"), "", "mail", "inbox")
	if code != 1 || !strings.Contains(stderr, "does not exist") || !strings.Contains(stderr, "deleted under the running daemon") {
		t.Errorf("missing db: exit %d %q", code, stderr)
	}
}

// TestMailConcurrentSendsWhileDaemonConsumes: 8 CLI processes × 50 sends
// while a real daemon's sessions consume mail into prompts: every message is
// delivered exactly once, in exactly one prompt.
func TestMailConcurrentSendsWhileDaemonConsumes(t *testing.T) {
	senders, per := 8, 50
	if testing.Short() {
		senders, per = 5, 20
	}
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
defaults:
  backend: quick
backends:
  quick:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; sleep 0.05"]
agents:
  - {name: alice, role: "consumes"}
  - {name: bob, role: "consumes"}
`)
	d := startDaemon(t, cfg, "--log-level", "info")
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	dbPath := filepath.Join(repo, ".swarm", "swarm.db")
	env := []string{"SWARM_DB_PATH=" + dbPath, "SWARM_AGENTS=alice,bob", "SWARM_AGENT_ID="}

	var wg sync.WaitGroup
	errs := make(chan string, senders*per)
	for p := 0; p < senders; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				to := []string{"alice", "bob"}[(p+i)%2]
				_, stderr, code := runCLI(t, env, "", "mail", "send", "--to", to, fmt.Sprintf("msg-%d-%d.", p, i))
				if code != 0 {
					errs <- stderr
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("send failed: %s", e)
	}
	total := senders * per

	sqldb, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var delivered int
		if err := sqldb.QueryRow(`SELECT COUNT(*) FROM messages WHERE delivered_at IS NOT NULL`).Scan(&delivered); err != nil {
			t.Fatal(err)
		}
		if delivered == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d delivered after 60s", delivered, total)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
	var count int
	if err := sqldb.QueryRow(`SELECT COUNT(*) FROM messages`).Scan(&count); err != nil || count != total {
		t.Fatalf("stored %d messages (%v), want %d", count, err, total)
	}
	// Every body appears in exactly one stored prompt (live after the
	// daemon's stop, or archived by an agent's stop).
	seen := make(map[string]int)
	for _, a := range []string{"alice", "bob"} {
		for name, b := range sessionFiles(t, filepath.Join(repo, ".swarm"), a) {
			if !strings.HasSuffix(name, ".prompt.md") {
				continue
			}
			for _, line := range bytes.Split(b, []byte("\n")) {
				if s := string(line); strings.HasPrefix(s, "> msg-") {
					seen[strings.TrimPrefix(s, "> ")]++
				}
			}
		}
	}
	for p := 0; p < senders; p++ {
		for i := 0; i < per; i++ {
			if n := seen[fmt.Sprintf("msg-%d-%d.", p, i)]; n != 1 {
				t.Errorf("msg-%d-%d is in %d prompts, want 1", p, i, n)
			}
		}
	}
}

// TestUrgentMailInterruptsRecipientEndToEnd: alice's session runs
// `swarmd mail send --urgent` (found on PATH); bob's running session gets
// the cancel signal, and bob's next prompt holds the message.
func TestUrgentMailInterruptsRecipientEndToEnd(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
backends:
  sender:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; sleep 0.3; swarmd mail send --to bob --urgent --subject 'stop now' 'rebase on main first'; sleep 3600"]
  waiter:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; exec sleep 3600"]
agents:
  - {name: alice, role: "sends", backend: sender}
  - {name: bob, role: "waits", backend: waiter}
`)
	d := startDaemon(t, cfg)
	d.waitNext("bob interrupted", func(m map[string]any) bool {
		return transitionTo("bob", "Interrupting")(m) && m["event"] == "UrgentMessage"
	})
	d.waitNext("bob back to BuildingPrompt", func(m map[string]any) bool {
		return transitionTo("bob", "BuildingPrompt")(m) && m["from"] == "Interrupting"
	})
	d.waitNext("bob running again", transitionTo("bob", "Running"))
	// The interrupted session was seq 1; the next one, seq 2, has a prompt of its own.
	prompt, err := os.ReadFile(filepath.Join(repo, ".swarm", "logs", "bob", "2.prompt.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"URGENT from alice: stop now", "> rebase on main first", "interrupted by urgent mail"} {
		if !bytes.Contains(prompt, []byte(want)) {
			t.Errorf("bob's next prompt lacks %q:\n%s", want, prompt)
		}
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// FuzzMailArgs runs the mail CLI in-process on arbitrary arguments and
// bodies: it never panics, exits 0, 1 or 2, and an error is one line.
func FuzzMailArgs(f *testing.F) {
	for _, seed := range []string{
		"send\x00--to\x00bob\x00hello",
		"send\x00--all\x00--urgent\x00--subject\x00s\x00-",
		"reply\x00#1\x00yes",
		"read\x00-5",
		"inbox\x00--json\x00--all",
		"send\x00--to\x00../../etc\x00x",
		"send\x00--to\x00bob\x00\xff\xfe",
	} {
		f.Add(seed, "stdin body")
	}
	db := filepath.Join(f.TempDir(), "swarm.db")
	m, err := mailbox.Open(context.Background(), db, store.Options{}, mailbox.Options{Agents: []string{"alice", "bob", "carol"}})
	if err != nil {
		f.Fatal(err)
	}
	m.Close()
	env := map[string]string{"SWARM_DB_PATH": db, "SWARM_AGENTS": "alice,bob,carol", "SWARM_AGENT_ID": "alice"}
	f.Fuzz(func(t *testing.T, args, stdin string) {
		var out, errb bytes.Buffer
		argv := append([]string{"mail"}, strings.Split(args, "\x00")...)
		code := Main(context.Background(), argv, streams{
			in: strings.NewReader(stdin), out: &out, err: &errb,
			getenv: func(k string) string { return env[k] },
		})
		if code < 0 || code > 2 {
			t.Fatalf("exit code %d", code)
		}
		if code != 0 {
			msg := strings.TrimSuffix(errb.String(), "\n")
			if msg == "" || strings.Contains(msg, "\n") {
				t.Fatalf("error output is not one line: %q", errb.String())
			}
		}
	})
}

// sessionFiles reads every session file of agent under stateDir: those in
// its log directory and those in its archives.
func sessionFiles(t *testing.T, stateDir, agent string) map[string][]byte {
	t.Helper()
	out := make(map[string][]byte)
	live, _ := filepath.Glob(filepath.Join(stateDir, "logs", agent, "*"))
	for _, p := range live {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out["live/"+filepath.Base(p)] = b
	}
	archives, _ := filepath.Glob(filepath.Join(stateDir, "archive", agent, "*.tar.gz"))
	if len(archives)+len(live) == 0 {
		t.Fatalf("no session file of %s, live or archived", agent)
	}
	for _, a := range archives {
		f, err := os.Open(a)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Base(a)+"/"+h.Name] = b
		}
		f.Close()
	}
	return out
}
