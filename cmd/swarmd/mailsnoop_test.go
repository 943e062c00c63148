package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// snooper answers message 1, someone else's mail, and keeps what the
// answer says about it.
const snooper = `p=$(cat)
if echo "$p" | grep -q 'Your task: #[0-9]*: snoop'; then
  swarmd mail reply --json 1 'hi' > "$REPORT/reply.out" 2>&1; echo "exit $?" >> "$REPORT/reply.out"
  echo end >> "$REPORT/reply.out"
fi
printf 'idle\nDONE\n'`

// A session answers only its own mail: mallory's reply to the operator's
// message to bob was sent, in bob's thread, and its answer told her that
// message's sender and subject.
func TestASessionAnswersOnlyItsOwnMail(t *testing.T) {
	requireBwrap(t)
	repo := gitRepo(t)
	report := t.TempDir()
	cfg := escapeConfig(t, repo, report, "", "", map[string]string{"worker": `cat >/dev/null; printf 'idle\nDONE\n'`, "hostile": snooper},
		"name: bob, role: works, backend: worker", "name: mallory, role: works, backend: hostile")
	d := startDaemon(t, cfg)
	d.waitLine("bob idle", idleLine("bob"))
	d.waitLine("mallory idle", idleLine("mallory"))
	b, mb := openBoardAt(t, filepath.Join(repo, ".swarm"))
	ctx := context.Background()
	const secret = "the staging password is hunter2"
	if _, err := mb.Send(ctx, mailbox.Draft{From: mailbox.Operator, To: "bob", Subject: secret, Body: "for bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Add(ctx, taskboard.NewTask{Title: "snoop", Assignee: "mallory"}); err != nil {
		t.Fatal(err)
	}
	out := waitFileLine(t, filepath.Join(report, "reply.out"), "end", 60*time.Second, d)
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "exit 2") {
		t.Errorf("mallory's reply to bob's mail: %q, want refused, telling nothing of it", out)
	}
	sent, err := mb.Inbox(ctx, mailbox.Operator, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range sent {
		if m.From == "mallory" {
			t.Errorf("mallory's reply #%d to bob's mail was sent to %s: %q", m.ID, m.To, m.Subject)
		}
	}
}
