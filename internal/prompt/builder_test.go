package prompt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/worktree"
)

func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "initial commit"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// TestBuilderWithRealMailboxAndWorktree: the prompt shows the branch's
// commits, dirty files and pending mail (urgent first); its mail is marked
// delivered; Release makes it pending again, as when the session never
// started.
func TestBuilderWithRealMailboxAndWorktree(t *testing.T) {
	ctx := context.Background()
	repo := gitRepo(t)
	state := filepath.Join(repo, ".swarm")
	trees, err := worktree.Open(ctx, worktree.Options{Repo: repo, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := trees.Ensure(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt.Path, "notes.txt"), []byte("wip"), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := mailbox.Open(ctx, filepath.Join(state, "swarm.db"), mailbox.Options{Agents: []string{"alice", "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	normal, _ := db.Send(ctx, mailbox.Draft{From: "alice", To: "bob", Subject: "fyi", Body: "docs moved"})
	urgent, _ := db.Send(ctx, mailbox.Draft{From: "alice", To: "bob", Subject: "halt", Body: "main is broken", Urgent: true})

	b := &Builder{Mail: db, Git: trees, Agents: []string{"alice", "bob"}}
	p, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", Role: "You review.", SessionID: "bob-1-aaaa", Seq: 1, Worktree: wt,
		Why: runner.Why{Kind: runner.WhyAfterInterrupt}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"initial commit", "notes.txt", "Other agents: `alice`", "You review.", `interrupted by urgent mail ("halt")`} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	if i, j := strings.Index(p.Text, "main is broken"), strings.Index(p.Text, "docs moved"); i < 0 || j < 0 || i > j {
		t.Errorf("urgent mail not first: %d, %d", i, j)
	}
	if p.Watermark != max(normal.ID, urgent.ID) {
		t.Errorf("watermark %d", p.Watermark)
	}
	if p.Mail != 2 {
		t.Errorf("prompt carries %d messages, want 2", p.Mail)
	}
	if pending, _ := db.Inbox(ctx, "bob", false); len(pending) != 2 || pending[0].ClaimedSession != "bob-1-aaaa" {
		t.Errorf("after the prompt: %+v, want 2 pending, claimed by the session", pending)
	}
	if err := b.Release(ctx, "bob-1-aaaa"); err != nil {
		t.Fatal(err)
	}
	if pending, _ := db.Inbox(ctx, "bob", false); len(pending) != 2 || pending[0].ClaimedSession != "" {
		t.Errorf("after Release %+v, want 2 pending, unclaimed", pending)
	}

	// A session that did not complete: the next prompt shows the mail again
	// and says why; a completed one acknowledges it.
	if _, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-2-bbbb", Seq: 2}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := b.Settle(ctx, runner.Settlement{Agent: "bob", SessionID: "bob-2-bbbb", Seq: 2, Started: now, Ended: now,
		Note: "that session timed out"}); err != nil {
		t.Fatal(err)
	}
	p3, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-3-cccc", Seq: 3})
	if err != nil || p3.Mail != 2 || !strings.Contains(p3.Text, "Shown before, but that session timed out: it is still unread.") {
		t.Fatalf("prompt after an incomplete session (%v):\n%s", err, p3.Text)
	}
	if err := b.Settle(ctx, runner.Settlement{Agent: "bob", SessionID: "bob-3-cccc", Seq: 3, Started: now, Ended: now,
		Completed: true}); err != nil {
		t.Fatal(err)
	}
	if pending, _ := db.Inbox(ctx, "bob", false); len(pending) != 0 {
		t.Errorf("%d messages pending after a completed session", len(pending))
	}
	p4, err := b.Build(ctx, runner.PromptRequest{Agent: "bob", SessionID: "bob-4-dddd", Seq: 4})
	if err != nil || p4.Mail != 0 {
		t.Fatalf("prompt after completion carries %d messages (%v)", p4.Mail, err)
	}
}
