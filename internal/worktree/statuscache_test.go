package worktree

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestStatusCacheNeverStale changes a worktree in every way that changes
// git status, checking right after each change (no waiting: a racy change
// must not be answered from memory) that Status says what git status
// says, and that an unchanged worktree costs no git process.
func TestStatusCacheNeverStale(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	git, count := countingGit(t)
	m := openT(t, repo, func(o *Options) { o.Git = git })
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	p := func(name string) string { return filepath.Join(wt.Path, name) }
	writeFile(t, p(".gitignore"), "build/\n*.log\n")
	writeFile(t, p("src/main.go"), "package main\n")
	commitAll(t, wt.Path, "tree")
	writeFile(t, p("build/out.bin"), "x")
	writeFile(t, p("only-ignored/a.log"), "x")

	check := func(step string, want ...string) {
		t.Helper()
		st, err := m.Status(ctx, "alice")
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		in, err := m.inspect("alice")
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := m.dirtyFiles(ctx, wt.Path, in.adminDir)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.DirtyFiles, fresh) || !slices.Equal(st.DirtyFiles, want) || st.Dirty != (len(want) > 0) {
			t.Fatalf("%s: Status.DirtyFiles = %q (dirty %v), git status says %q, want %q", step, st.DirtyFiles, st.Dirty, fresh, want)
		}
	}
	// settle checks until an answer comes from memory: the files' times
	// must get older than the racy window first.
	settle := func(step string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			check(step, want...)
			n := count()
			check(step, want...)
			if count() == n+1 { // only the uncached git status of check ran
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: an unchanged worktree still runs git status", step)
			}
		}
	}

	settle("clean")
	writeFile(t, p("README.md"), "hellp\n") // same size, same second
	check("tracked file edited", "README.md")
	writeFile(t, p("README.md"), "hello\n")
	check("edit undone")
	settle("edit undone")

	writeFile(t, p("build/more.bin"), "x")
	n := count()
	check("file added in an ignored directory")
	if count() != n+1 {
		t.Errorf("a file added in an ignored directory ran git status again")
	}

	writeFile(t, p("new.txt"), "x")
	check("untracked file", "new.txt")
	writeFile(t, p("only-ignored/b.txt"), "x")
	check("untracked file in a directory of ignored files", "new.txt", "only-ignored/")
	settle("settled with untracked files", "new.txt", "only-ignored/")

	commitAll(t, wt.Path, "more")
	check("committed")
	settle("committed")
	gitT(t, wt.Path, "reset", "-q", "--soft", "HEAD~1")
	check("soft reset: staged again", "new.txt", "only-ignored/b.txt")
	gitT(t, wt.Path, "reset", "-q", "--hard", "HEAD")
	check("hard reset: staged new files are gone")
	settle("hard reset")
	writeFile(t, p("new.txt"), "x")
	writeFile(t, p("only-ignored/b.txt"), "x")
	check("untracked again", "new.txt", "only-ignored/")

	exclude := filepath.Join(m.commonDir, "info", "exclude")
	writeFile(t, exclude, readFile(t, exclude)+"new.txt\n")
	check("excluded in info/exclude", "only-ignored/")
	writeFile(t, p(".gitignore"), "*.log\n")
	check("directory no longer ignored", ".gitignore", "build/", "only-ignored/")
	settle("directory no longer ignored", ".gitignore", "build/", "only-ignored/")

	if err := os.Chmod(p("src/main.go"), 0o755); err != nil {
		t.Fatal(err)
	}
	check("mode changed", ".gitignore", "src/main.go", "build/", "only-ignored/")
	if err := os.RemoveAll(p("src")); err != nil {
		t.Fatal(err)
	}
	check("directory deleted", ".gitignore", "src/main.go", "build/", "only-ignored/")

	// Another branch's commit checked out with the same files: HEAD moved.
	gitT(t, wt.Path, "checkout", "-q", "--", "src")
	settle("restored", ".gitignore", "build/", "only-ignored/")
	gitT(t, wt.Path, "commit", "-q", "--allow-empty", "-m", "empty")
	gitT(t, wt.Path, "update-ref", "refs/heads/swarm/alice/work", "HEAD~2")
	// The index still holds .gitignore and src/main.go, not in that commit.
	check("branch moved back", ".gitignore", "src/main.go", "build/", "only-ignored/")
}
