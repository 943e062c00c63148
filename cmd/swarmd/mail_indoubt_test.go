package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
)

// TestMailSendCommitAnswerLost runs `swarmd mail send` against a
// PostgreSQL server whose answer to the message's COMMIT is lost: the
// message is committed, the command cannot know it, and it retries while
// the store is away. The recipient gets the message once.
func TestMailSendCommitAnswerLost(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "mailcut")
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	env := []string{"SWARM_DB_PATH=" + p.URL(dbName), "SWARM_AGENT_ID=alice"}
	send := func(body string) string {
		t.Helper()
		out, errOut, code := runCLI(t, env, "", "mail", "send", "--to", "bob", "--subject", "s", body)
		if code != 0 {
			t.Fatalf("mail send exit %d: %s%s", code, out, errOut)
		}
		return out
	}
	send("first") // the schema, and a message
	p.CutNextCommitAfter("INSERT INTO messages")
	if out := send("second"); out != "sent #2 to bob\n" {
		t.Errorf("mail send said %q, want the message it stored, #2", out)
	}
	if p.Cuts() != 1 {
		t.Fatalf("%d commits cut, want 1", p.Cuts())
	}
	got, err := srv.Query(dbName, `SELECT string_agg(body, ',' ORDER BY id) FROM messages WHERE recipient = 'bob'`)
	if err != nil {
		t.Fatal(err)
	}
	if got != "first,second" {
		t.Fatalf("bob's messages: %s, want first,second (each once)", strings.ReplaceAll(got, "\n", " "))
	}
}

// TestMailSendWaitsForTheStoreToOpen: `swarmd mail send` from outside a
// session, started while the PostgreSQL server cannot be reached, waits
// for it (--store-wait) instead of failing at its first connection.
func TestMailSendWaitsForTheStoreToOpen(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "mailopen")
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	env := []string{"SWARM_DB_PATH=" + p.URL(dbName), "SWARM_AGENT_ID=alice"}
	if _, errOut, code := runCLI(t, env, "", "mail", "send", "--to", "bob", "--subject", "s", "first"); code != 0 {
		t.Fatalf("mail send: exit %d: %s", code, errOut)
	}
	p.SetDown(true)
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	cmd := exec.Command(swarmdBin, "mail", "send", "--to", "bob", "--subject", "s", "--store-wait", "30s", "second")
	cmd.Env = append(os.Environ(), env...)
	go func() {
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		done <- result{string(out), code}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for p.Refused() < 2 { // its first try, and one more: it is waiting
		select {
		case r := <-done:
			t.Fatalf("mail send ended while the store was away: exit %d: %s", r.code, r.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("mail send never tried to connect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.SetDown(false)
	r := <-done
	if r.code != 0 || r.out != "sent #2 to bob\n" {
		t.Fatalf("mail send once the store is back: exit %d: %q", r.code, r.out)
	}
}

// TestMailSendGivingUpInDoubtSaysSo: `swarmd mail send` whose COMMIT's
// answer is lost, with the network down from then on, gives up after
// --store-wait. The message is stored: the command must not say that
// nothing was recorded and to run it again (the recipient would get it
// twice), but that it may have been recorded.
func TestMailSendGivingUpInDoubtSaysSo(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "maildoubt")
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	env := []string{"SWARM_DB_PATH=" + p.URL(dbName), "SWARM_AGENT_ID=alice"}
	if _, errOut, code := runCLI(t, env, "", "mail", "send", "--to", "bob", "--subject", "s", "first"); code != 0 {
		t.Fatalf("mail send: exit %d: %s", code, errOut)
	}
	p.CutNextCommitAfterAndGoDown("INSERT INTO messages")
	_, errOut, code := runCLI(t, env, "", "mail", "send", "--to", "bob", "--subject", "s", "--store-wait", "1s", "second")
	if p.Cuts() != 1 {
		t.Fatalf("%d commits cut, want 1", p.Cuts())
	}
	if code != 1 || strings.Contains(errOut, "nothing was recorded") || !strings.Contains(errOut, "may have been recorded") {
		t.Fatalf("mail send that gave up in doubt: exit %d: %s; want exit 1 saying it may have been recorded", code, errOut)
	}
	p.SetDown(false)
	got, err := srv.Query(dbName, `SELECT string_agg(body, ',' ORDER BY id) FROM messages WHERE recipient = 'bob'`)
	if err != nil {
		t.Fatal(err)
	}
	if got != "first,second" {
		t.Fatalf("bob's messages: %s, want first,second", got)
	}
}
