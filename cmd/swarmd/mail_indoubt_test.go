package main

import (
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
)

// TestMailSendCommitAnswerLost runs `swarmd mail send` against a
// PostgreSQL server whose answer to the message's COMMIT is lost: the
// message is committed, the command cannot know it, and it retries while
// the store is away. The recipient gets the message once.
func TestMailSendCommitAnswerLost(t *testing.T) {
	srv := pgtest.Require(t)
	if err := srv.CreateDB("mailcut"); err != nil {
		t.Fatal(err)
	}
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	env := []string{"SWARM_DB_PATH=" + p.URL("mailcut"), "SWARM_AGENT_ID=alice"}
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
	got, err := srv.Query("mailcut", `SELECT string_agg(body, ',' ORDER BY id) FROM messages WHERE recipient = 'bob'`)
	if err != nil {
		t.Fatal(err)
	}
	if got != "first,second" {
		t.Fatalf("bob's messages: %s, want first,second (each once)", strings.ReplaceAll(got, "\n", " "))
	}
}
