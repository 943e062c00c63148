package merge

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The gate runs code from the branch under test in the queue's worktree,
// and writes that checkout, its .git link included. The queue's git
// there goes by the worktree's registration, not by the link: a link to
// an agent's git directory does not make the next reset move that agent's
// HEAD, one to a git directory of the gate's making (its core.fsmonitor a
// program) runs nothing, and the link is put back as git wrote it.
func TestQueueWorktreeGoesByItsRegistration(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r, err := openRepo(ctx, e.repo, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	alice := e.worker("alice")
	aliceHead := gitT(t, alice, "symbolic-ref", "HEAD")
	wt := filepath.Join(e.stateDir, "worktrees", ".merge")
	main := e.main()
	if err := r.ensureWorktree(ctx, wt, main); err != nil {
		t.Fatal(err)
	}
	link, err := os.ReadFile(filepath.Join(wt, ".git"))
	if err != nil {
		t.Fatal(err)
	}

	// The gate points the link at alice's git directory.
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: "+filepath.Join(r.commonDir, "worktrees", "alice")+"\n")
	if err := r.ensureWorktree(ctx, wt, main); err != nil {
		t.Fatalf("reset after the link moved to alice's: %v", err)
	}
	if got := gitT(t, alice, "symbolic-ref", "HEAD"); got != aliceHead {
		t.Errorf("alice's HEAD is %q after the queue's reset, want %q", got, aliceHead)
	}
	if got, _ := os.ReadFile(filepath.Join(wt, ".git")); string(got) != string(link) {
		t.Errorf("the link is %q, want it put back: %q", got, link)
	}

	// The gate makes a git directory of its own, with a core.fsmonitor.
	ran := filepath.Join(t.TempDir(), "ran")
	evil := filepath.Join(wt, ".evil")
	gitT(t, wt, "init", "-q", "--bare", evil)
	gitT(t, wt, "--git-dir="+evil, "config", "core.bare", "false")
	writeFile(t, filepath.Join(evil, "fsmonitor"), "#!/bin/sh\necho ran >> "+ran+"\n")
	if err := os.Chmod(filepath.Join(evil, "fsmonitor"), 0o755); err != nil {
		t.Fatal(err)
	}
	gitT(t, wt, "--git-dir="+evil, "config", "core.fsmonitor", filepath.Join(evil, "fsmonitor"))
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: .evil\n")
	if err := r.ensureWorktree(ctx, wt, main); err != nil {
		t.Fatalf("reset after the link moved to the gate's git directory: %v", err)
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Errorf("the queue's git ran the gate's fsmonitor: %s", b)
	}
	if got := gitT(t, wt, "rev-parse", "HEAD"); got != main {
		t.Errorf("the queue's worktree is at %s, want %s", got, main)
	}
}
