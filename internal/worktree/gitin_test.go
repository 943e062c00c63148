package worktree

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The daemon's git in an agent's worktree goes by the git directory
// registered for it, never by what the worktree says of itself: here its
// .git link (the sandbox's to write) names a git directory of its making
// whose config runs a core.fsmonitor program, and the repository's
// relative core.hooksPath (husky's) names hooks in the worktree. Neither
// runs, for git status, a stash, a reset, a checkout or a ref update, and
// the answers are the worktree's own.
func TestGitInAWorktreeRunsNothingOfTheWorktrees(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	gitT(t, repo, "config", "core.hooksPath", ".husky/_")
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	in, err := m.inspect("alice")
	if err != nil || in.adminDir == "" {
		t.Fatalf("inspect: %+v, %v", in, err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	script := "#!/bin/sh\necho \"$0 $*\" >> " + ran + "\n"
	writeExec := func(path string) {
		writeFile(t, path, script)
		if err := os.Chmod(path, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, hook := range []string{"post-checkout", "reference-transaction", "post-index-change", "pre-auto-gc"} {
		writeExec(filepath.Join(wt.Path, ".husky", "_", hook))
	}
	evil := filepath.Join(wt.Path, ".evil")
	gitT(t, wt.Path, "init", "-q", "--bare", evil)
	gitT(t, wt.Path, "--git-dir="+evil, "config", "core.bare", "false")
	writeExec(filepath.Join(evil, "fsmonitor"))
	gitT(t, wt.Path, "--git-dir="+evil, "config", "core.fsmonitor", filepath.Join(evil, "fsmonitor"))
	writeFile(t, filepath.Join(wt.Path, "dirty.txt"), "x\n")
	writeFile(t, filepath.Join(wt.Path, ".git"), "gitdir: .evil\n")

	dirty, err := m.dirtyFiles(ctx, wt.Path, in.adminDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"stash", "push", "--include-untracked", "--message", "t"},
		{"reset", "--quiet", "--hard", "HEAD"},
		{"checkout", "--quiet", "--detach"},
		{"checkout", "--quiet", m.Branch("alice")},
		{"update-ref", "refs/heads/swarm/alice/other", "HEAD"},
	} {
		if _, err := m.gitIn(ctx, wt.Path, in.adminDir, args...); err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Fatalf("the daemon's git ran the worktree's programs:\n%s", b)
	}
	if len(dirty) == 0 {
		t.Errorf("git status of the worktree saw nothing dirty: it read another git directory")
	}
	if got := gitT(t, repo, "stash", "list"); got == "" {
		t.Errorf("the stash is not in the repository: git wrote another git directory")
	}
}
