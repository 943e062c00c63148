package worktree

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

func TestCommitsBetweenRemembersCountsUntilHistoryIsReplaced(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	git, count := countingGit(t)
	m := openT(t, repo, func(o *Options) { o.Git = git })
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	before := wt.Head
	var after string
	for i := range 3 {
		writeFile(t, filepath.Join(wt.Path, fmt.Sprintf("f%d.txt", i)), "x")
		after = commitAll(t, wt.Path, fmt.Sprintf("commit %d", i))
	}
	if n, err := m.CommitsBetween(ctx, before, after); err != nil || n != 3 {
		t.Fatalf("CommitsBetween = %d, %v; want 3", n, err)
	}
	runs := count()
	if n, err := m.CommitsBetween(ctx, before, after); err != nil || n != 3 {
		t.Fatalf("again: CommitsBetween = %d, %v; want 3", n, err)
	}
	if got := count() - runs; got != 0 {
		t.Errorf("the same question again ran git %d times, want 0", got)
	}

	// A replace ref makes git see another history: the answer must be git's.
	gitT(t, repo, "replace", "--graft", after, before)
	if n, err := m.CommitsBetween(ctx, before, after); err != nil || n != 1 {
		t.Errorf("with a graft: CommitsBetween = %d, %v; want 1", n, err)
	}
	gitT(t, repo, "pack-refs", "--all") // the replace ref now only in packed-refs
	if n, err := m.CommitsBetween(ctx, before, after); err != nil || n != 1 {
		t.Errorf("with a packed graft: CommitsBetween = %d, %v; want 1", n, err)
	}
	gitT(t, repo, "replace", "-d", after)
	if n, err := m.CommitsBetween(ctx, before, after); err != nil || n != 3 {
		t.Errorf("graft removed: CommitsBetween = %d, %v; want 3", n, err)
	}
}
