package worktree

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// A new line that starts where the agent's branch already is (the target
// has not moved since its last task began) is still started clean: a
// change staged by a session cut off between its git add and its commit
// (an earlier task's, or an earlier attempt's, fenced off) went into the
// next task's first commit, and that task's merge then conflicted with
// the change's own task, again at every rework (TestChaosPostgres).
func TestStartLineNewLineWhereTheBranchIsStartsClean(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	base := gitT(t, wt.Path, "rev-parse", "HEAD")
	writeFile(t, filepath.Join(wt.Path, "t1.txt"), "task 1, never committed\n")
	gitT(t, wt.Path, "add", "t1.txt")
	got, err := m.StartLine(ctx, "alice", 17, "", "main")
	if err != nil || got != base {
		t.Fatalf("task 17's new line = %s, %v; want main's tip %s", got, err, base)
	}
	if st := gitT(t, wt.Path, "status", "--porcelain"); st != "" {
		t.Fatalf("task 17's new line starts with %q left by another task", st)
	}
	if s := gitT(t, wt.Path, "stash", "show", "--include-untracked", "--name-only"); !strings.Contains(s, "t1.txt") {
		t.Fatalf("the stash holds %q, want t1.txt kept", s)
	}
	// Continuing task 17 where it stands keeps its own uncommitted work.
	writeFile(t, filepath.Join(wt.Path, "t17.txt"), "task 17, in progress\n")
	if got, err = m.StartLine(ctx, "alice", 17, base, "main"); err != nil || got != base {
		t.Fatalf("continue task 17: %s, %v", got, err)
	}
	if st := gitT(t, wt.Path, "status", "--porcelain"); !strings.Contains(st, "t17.txt") {
		t.Fatalf("continuing task 17 lost its uncommitted work: status %q", st)
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

// A sandbox writes its agent's branch directory: it made its branch a
// symbolic ref to main (or a link git takes for one), and the reset that
// puts the branch on a task's line, run by the daemon outside the
// sandbox, moved main to the agent's unreviewed commit. A branch that is
// not a ref of its own is refused; nothing else moves.
func TestStartLineMovesNoBranchASymbolicRefNames(t *testing.T) {
	ctx := context.Background()
	for name, plant := range map[string]func(t *testing.T, repo, ref string){
		"text": func(t *testing.T, repo, ref string) {
			writeFile(t, ref, "ref: refs/heads/main\n")
		},
		// git reads a link into refs/ as a symbolic ref; a plain reader
		// follows it to a file the sandbox wrote beside it.
		"link": func(t *testing.T, repo, ref string) {
			decoy := filepath.Join(filepath.Dir(ref), "refs", "heads", "main")
			if err := os.MkdirAll(filepath.Dir(decoy), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, decoy, gitT(t, repo, "rev-parse", "main")+"\n")
			if err := os.Remove(ref); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("refs/heads/main", ref); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t)
			m := openT(t, repo)
			wt, err := m.Ensure(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(wt.Path, "one.txt"), "one\n")
			one := commitAll(t, wt.Path, "task 1, unreviewed")
			main0 := gitT(t, repo, "rev-parse", "main")
			plant(t, repo, filepath.Join(repo, ".git", "refs", "heads", "swarm", "alice", "work"))
			if got := gitT(t, repo, "rev-parse", "swarm/alice/work"); got != main0 {
				t.Fatalf("git reads the planted branch at %s, want main's %s", got, main0)
			}

			if _, err := m.StartLine(ctx, "alice", 1, one, "main"); err == nil {
				t.Error("StartLine put a symbolic branch on a line")
			}
			if _, err := m.Ensure(ctx, "alice"); err == nil {
				t.Error("Ensure took a symbolic branch for the agent's")
			}
			if got := gitT(t, repo, "rev-parse", "main"); got != main0 {
				t.Fatalf("main moved to %s (the agent's commit is %s), was %s", got, one, main0)
			}
		})
	}
}

// A sandbox writes its worktree's reflogs and its branch's: it replaced
// them with links to a file of the operator's, and the daemon's git, the
// switch back to the agent's branch and a task line's reset, appended to
// that file outside the sandbox, a line naming the branch the session
// left checked out ("$(...)" in it, for a shell that reads the file).
// The daemon's git writes only reflogs that are the worktree's own files.
func TestTheDaemonsGitAppendsToNoFileAReflogLinksTo(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "one.txt"), "one\n")
	one := commitAll(t, wt.Path, "task 1")
	admin := gitT(t, wt.Path, "rev-parse", "--absolute-git-dir")
	outside := t.TempDir()
	plant := func(reflog, name string) string {
		target := filepath.Join(outside, name)
		writeFile(t, target, "# the operator's\n")
		if err := os.Remove(reflog); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, reflog); err != nil {
			t.Fatal(err)
		}
		return target
	}
	// Off its branch, on one whose name is a command, its HEAD's reflog a
	// link; its branch's a link too.
	gitT(t, wt.Path, "checkout", "-q", "-b", "swarm/alice/x;$(touch${IFS}pwned)")
	headLog := plant(filepath.Join(admin, "logs", "HEAD"), "bashrc")
	branchLog := plant(filepath.Join(repo, ".git", "logs", "refs", "heads", "swarm", "alice", "work"), "profile")

	if _, err := m.Ensure(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if b := gitT(t, wt.Path, "rev-parse", "--abbrev-ref", "HEAD"); b != "swarm/alice/work" {
		t.Fatalf("not switched back: on %q", b)
	}
	if _, err := m.StartLine(ctx, "alice", 2, "", "main"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StartLine(ctx, "alice", 1, one, "main"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{headLog, branchLog} {
		if got := readFile(t, f); got != "# the operator's\n" {
			t.Errorf("the daemon's git wrote %s through a reflog's link:\n%s", f, got)
		}
	}
}

// A FIFO where git appends a reflog, or reads the index, held the daemon's
// git (and the agent's lock) until it was killed.
func TestTheDaemonsGitWaitsOnNoReflogFIFO(t *testing.T) {
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "one.txt"), "one\n")
	one := commitAll(t, wt.Path, "task 1")
	admin := gitT(t, wt.Path, "rev-parse", "--absolute-git-dir")
	for _, f := range []string{filepath.Join("logs", "ORIG_HEAD"), "index"} {
		_ = os.Remove(filepath.Join(admin, f))
		if err := syscall.Mkfifo(filepath.Join(admin, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := m.StartLine(ctx, "alice", 2, "", "main"); err != nil {
		t.Fatalf("a new line: %v", err)
	}
	if _, err := m.StartLine(ctx, "alice", 1, one, "main"); err != nil {
		t.Fatalf("back to task 1: %v", err)
	}
}

// A FIFO in the place of the worktree's HEAD held the daemon's reading of
// it for good: the agent's runner, its stop and the daemon's.
func TestAnInspectionWaitsOnNoFIFO(t *testing.T) {
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	admin := gitT(t, wt.Path, "rev-parse", "--absolute-git-dir")
	head := filepath.Join(admin, "HEAD")
	if err := os.Remove(head); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(head, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.Head(context.Background(), "alice")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO for HEAD read as a commit")
		}
	case <-time.After(10 * time.Second):
		t.Error("the inspection waits on the FIFO")
		// Let it go: a writer opens the FIFO and closes it, as often as
		// a reader waits there.
		for {
			if f, err := os.OpenFile(head, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// A FIFO a session left as its worktree's .gitmodules held the next line's
// start (git config --file read it, waiting for a writer), and with it the
// agent's prompt and its admission slot, for good. Git's own commands pass
// over a .gitmodules that is no regular file, and so does the line's start.
func TestStartLineWaitsOnNoFIFO(t *testing.T) {
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "notes.txt"), "half done\n")
	if err := syscall.Mkfifo(filepath.Join(wt.Path, ".gitmodules"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := m.StartLine(ctx, "alice", 2, "", "main"); err != nil {
		t.Fatalf("start a line over a FIFO .gitmodules: %v", err)
	}
	if s := gitT(t, wt.Path, "stash", "show", "--include-untracked", "--name-only"); !strings.Contains(s, "notes.txt") {
		t.Fatalf("the stash holds %q, want notes.txt", s)
	}
}

// PruneLines asks once about every task with a line and deletes the lines
// of those it says are done, in one go; a line kept again at another head
// after the listing is not deleted, and the others still are.
func TestPruneLines(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	head := gitT(t, repo, "rev-parse", "HEAD")
	for _, id := range []int64{1, 2, 3, 4} {
		if err := m.KeepLine(ctx, id, head); err != nil {
			t.Fatal(err)
		}
	}
	var asked []int64
	done := func(_ context.Context, ids []int64) (map[int64]bool, error) {
		asked = append(asked, ids...)
		return map[int64]bool{1: true, 3: true}, nil
	}
	removed, err := m.PruneLines(ctx, done)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(removed, " ") != "swarm/task/1 swarm/task/3" || len(asked) != 4 {
		t.Fatalf("removed %v after asking about %v; want tasks 1 and 3 of 1-4", removed, asked)
	}
	if refs := gitT(t, repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/swarm/task/"); refs != "swarm/task/2\nswarm/task/4" {
		t.Fatalf("lines left: %q", refs)
	}

	// Task 2's line moves between the listing and the delete (a session's
	// end keeps it again): it stays, task 4's goes.
	writeFile(t, filepath.Join(repo, "more.txt"), "more\n")
	moved := commitAll(t, repo, "more")
	removed, err = m.PruneLines(ctx, func(ctx context.Context, ids []int64) (map[int64]bool, error) {
		if err := m.KeepLine(ctx, 2, moved); err != nil {
			t.Fatal(err)
		}
		return map[int64]bool{2: true, 4: true}, nil
	})
	if err == nil || strings.Join(removed, " ") != "swarm/task/4" {
		t.Fatalf("removed %v, %v; want task 4's line, and an error for task 2's", removed, err)
	}
	if got := gitT(t, repo, "rev-parse", "refs/heads/swarm/task/2"); got != moved {
		t.Fatalf("task 2's line at %s, want %s where it was kept again", got, moved)
	}
	if removed, err := m.PruneLines(ctx, func(context.Context, []int64) (map[int64]bool, error) { return nil, nil }); err != nil || removed != nil {
		t.Fatalf("nothing done: removed %v, %v", removed, err)
	}
}
