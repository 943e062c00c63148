package worktree

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// StartLine puts the agent's branch on a new line at the target's tip, or
// back where a line stood; leftovers are stashed, never lost; a switch to
// where the branch is does nothing.
func TestStartLine(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// Task 1's line: one commit on the agent's branch.
	writeFile(t, filepath.Join(wt.Path, "one.txt"), "one\n")
	one := commitAll(t, wt.Path, "task 1")
	// main moves on meanwhile (another task merged).
	writeFile(t, filepath.Join(repo, "merged.txt"), "merged\n")
	target := commitAll(t, repo, "merged elsewhere")

	// Task 2 is new: its line starts at main's tip, without task 1's work;
	// task 1's uncommitted leftover is stashed.
	writeFile(t, filepath.Join(wt.Path, "leftover.txt"), "half done\n")
	got, err := m.StartLine(ctx, "alice", 2, "", "main")
	if err != nil {
		t.Fatal(err)
	}
	if got != target || gitT(t, wt.Path, "rev-parse", "HEAD") != target {
		t.Fatalf("task 2's line at %s (HEAD %s), want main's tip %s", got, gitT(t, wt.Path, "rev-parse", "HEAD"), target)
	}
	if b := gitT(t, wt.Path, "rev-parse", "--abbrev-ref", "HEAD"); b != "swarm/alice/work" {
		t.Fatalf("worktree on %q, want swarm/alice/work", b)
	}
	if st := gitT(t, wt.Path, "status", "--porcelain"); st != "" {
		t.Fatalf("worktree not clean on the new line: %q", st)
	}
	if list := gitT(t, wt.Path, "stash", "list"); !strings.Contains(list, "before task 2") {
		t.Fatalf("stash list %q: the leftover was not kept", list)
	}
	if s := gitT(t, wt.Path, "stash", "show", "--include-untracked", "--name-only"); !strings.Contains(s, "leftover.txt") {
		t.Fatalf("the stash holds %q, want leftover.txt", s)
	}

	// Back to task 1 (its review failed): where its line stood.
	if got, err = m.StartLine(ctx, "alice", 1, one, "main"); err != nil || got != one {
		t.Fatalf("back to task 1: %s, %v; want %s", got, err, one)
	}
	if readFile(t, filepath.Join(wt.Path, "one.txt")) != "one\n" {
		t.Fatal("task 1's work is not checked out")
	}
	// Continuing: nothing to do, nothing stashed.
	before := gitT(t, wt.Path, "stash", "list")
	if got, err = m.StartLine(ctx, "alice", 1, one, "main"); err != nil || got != one {
		t.Fatalf("continue task 1: %s, %v", got, err)
	}
	if after := gitT(t, wt.Path, "stash", "list"); after != before {
		t.Fatalf("a switch to where the branch is stashed something: %q", after)
	}
	if _, err := m.StartLine(ctx, "alice", 3, "", "no-such-branch"); err == nil || !strings.Contains(err.Error(), "task 3") {
		t.Fatalf("a target that does not resolve: %v", err)
	}
}

// BenchmarkStartLine is the cost of the per-task branch switch between two
// sessions on different tasks, in a worktree of 5,000 files: two lines
// that differ in one file each, switched back and forth (what the prompt
// builder does when an agent's next session is another task's); and the
// check alone when the next session continues the same task.
//
//	go test -run '^$' -bench StartLine ./internal/worktree/
func BenchmarkStartLine(b *testing.B) {
	ctx := context.Background()
	repo := newBigRepo(b, 5000)
	m := openT(b, repo, func(o *Options) { o.Log = nil })
	wt, err := m.Ensure(ctx, "a")
	if err != nil {
		b.Fatal(err)
	}
	writeFile(b, filepath.Join(wt.Path, "one.txt"), "one\n")
	one := commitAll(b, wt.Path, "task 1")
	gitT(b, wt.Path, "reset", "-q", "--hard", "main")
	writeFile(b, filepath.Join(wt.Path, "two.txt"), "two\n")
	two := commitAll(b, wt.Path, "task 2")
	b.Run("switch", func(b *testing.B) {
		heads := [2]string{one, two}
		i := 0
		for b.Loop() {
			if _, err := m.StartLine(ctx, "a", int64(i%2+1), heads[i%2], "main"); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("same", func(b *testing.B) {
		cur := gitT(b, wt.Path, "rev-parse", "HEAD")
		for b.Loop() {
			if _, err := m.StartLine(ctx, "a", 1, cur, "main"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
