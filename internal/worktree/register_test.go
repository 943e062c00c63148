package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRegisteredWorktreeIsGits: what register writes is a worktree git
// itself lists, reads and can remove.
func TestRegisteredWorktreeIsGits(t *testing.T) {
	repo := newRepo(t)
	m := openT(t, repo)
	ctx := context.Background()
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	list := gitT(t, repo, "worktree", "list", "--porcelain")
	if !strings.Contains(list, "worktree "+wt.Path+"\nHEAD "+wt.Head+"\nbranch refs/heads/swarm/alice/work") {
		t.Fatalf("git worktree list:\n%s", list)
	}
	if strings.Contains(list, "locked") {
		t.Fatalf("worktree still locked after Ensure:\n%s", list)
	}
	if got := gitT(t, wt.Path, "status", "--porcelain"); got != "" {
		t.Fatalf("git status in the new worktree: %q", got)
	}
	if got := gitT(t, wt.Path, "rev-parse", "--abbrev-ref", "HEAD"); got != "swarm/alice/work" {
		t.Fatalf("HEAD = %q", got)
	}
	if got := gitT(t, repo, "rev-parse", "swarm/alice/work"); got != m.BaseCommit() {
		t.Fatalf("branch at %s, want the base %s", got, m.BaseCommit())
	}
	// git accepts a commit there and removes the worktree.
	writeFile(t, filepath.Join(wt.Path, "new.txt"), "x\n")
	commitAll(t, wt.Path, "work")
	gitT(t, repo, "worktree", "remove", wt.Path)
	if got := gitT(t, repo, "worktree", "list", "--porcelain"); strings.Contains(got, wt.Path) {
		t.Fatalf("still listed after git worktree remove:\n%s", got)
	}
}

// TestPostCheckoutHookRuns: as after "git worktree add", the repository's
// post-checkout hook runs in the new worktree with git's arguments,
// wherever core.hooksPath puts it; a hook that is not executable does not
// run (git ignores it too).
func TestPostCheckoutHookRuns(t *testing.T) {
	for _, hooksPath := range []string{"", "custom-hooks"} {
		t.Run("hooksPath="+hooksPath, func(t *testing.T) {
			repo := newRepo(t)
			dir := filepath.Join(repo, ".git", "hooks")
			if hooksPath != "" {
				gitT(t, repo, "config", "core.hooksPath", hooksPath)
				dir = filepath.Join(repo, hooksPath)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			hook := "#!/bin/sh\necho \"$PWD $*\" > ran.txt\n"
			if err := os.WriteFile(filepath.Join(dir, "post-checkout"), []byte(hook), 0o755); err != nil {
				t.Fatal(err)
			}
			m := openT(t, repo)
			wt, err := m.Ensure(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(wt.Path, "ran.txt"))
			if want := wt.Path + " " + zeroOID + " " + wt.Head + " 1\n"; err != nil || string(got) != want {
				t.Fatalf("hook wrote %q, %v; want %q", got, err, want)
			}

			if err := os.Chmod(filepath.Join(dir, "post-checkout"), 0o644); err != nil {
				t.Fatal(err)
			}
			wt, err = m.Ensure(context.Background(), "bob")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(wt.Path, "ran.txt")); !os.IsNotExist(err) {
				t.Fatalf("a hook that is not executable ran: %v", err)
			}
		})
	}
}

// TestEnsureFinishesCreationCutShort: a worktree whose creation a crash
// cut short (registered, still locked "initializing", files half checked
// out) is not taken for a ready one: Ensure and Verify make it again.
func TestEnsureFinishesCreationCutShort(t *testing.T) {
	repo := newBigRepo(t, 50)
	for _, verify := range []bool{false, true} {
		m := openT(t, repo)
		ctx := context.Background()
		wt := Worktree{Agent: "alice", Path: m.Path("alice"), Branch: m.Branch("alice"), Head: m.BaseCommit()}
		if _, has, _ := m.branchTip("alice"); !has {
			if err := m.createBranchRef("alice", m.base); err != nil {
				t.Fatal(err)
			}
		}
		admin, err := m.claim(wt)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.link(wt, admin); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(wt.Path, "pkg000", "f0000.go"), "half written")

		if verify {
			_, err = m.Verify(ctx, "alice")
		} else {
			_, err = m.Ensure(ctx, "alice")
		}
		if err != nil {
			t.Fatalf("verify=%v: %v", verify, err)
		}
		if got := gitT(t, wt.Path, "status", "--porcelain"); got != "" {
			t.Fatalf("verify=%v: worktree not clean after Ensure: %q", verify, got)
		}
		if n := countFiles(t, wt.Path); n != 51 {
			t.Fatalf("verify=%v: %d files, want 50 and .git", verify, n)
		}
		regs, _ := os.ReadDir(filepath.Join(m.commonDir, "worktrees"))
		if len(regs) != 1 {
			t.Fatalf("verify=%v: %d registrations, want 1", verify, len(regs))
		}
		gitT(t, repo, "worktree", "remove", "--force", wt.Path)
	}
}

// TestEnsureRemovesLeftoverRegistration: a registration of the agent's
// path whose .git file was never written (a creation cut short earlier)
// does not hold the branch.
func TestEnsureRemovesLeftoverRegistration(t *testing.T) {
	repo := newRepo(t)
	m := openT(t, repo)
	admin := filepath.Join(m.commonDir, "worktrees", "alice")
	if err := os.MkdirAll(admin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"locked": "initializing\n", "commondir": "../..\n", "HEAD": "ref: refs/heads/swarm/alice/work\n",
		"gitdir": filepath.Join(m.Path("alice"), ".git") + "\n",
	} {
		writeFile(t, filepath.Join(admin, name), data)
	}
	wt, err := m.Ensure(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	list := gitT(t, repo, "worktree", "list", "--porcelain")
	if strings.Count(list, "branch refs/heads/swarm/alice/work") != 1 || !strings.Contains(list, wt.Path) {
		t.Fatalf("git worktree list:\n%s", list)
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNewWorktreeOfEmptyTreeCostsNoGit: a new agent on a repository whose
// base is the empty tree gets its worktree and its first status (what the
// first prompt shows) without one git process; anything in the worktree
// after that is reported by git as usual.
func TestNewWorktreeOfEmptyTreeCostsNoGit(t *testing.T) {
	ctx := context.Background()
	repo := t.TempDir()
	gitT(t, repo, "init", "-q", "-b", "main")
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "empty")
	git, count := countingGit(t)
	m := openT(t, repo, func(o *Options) { o.Git = git })
	runs := count()
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Status(ctx, "alice")
	if err != nil || st.Dirty {
		t.Fatalf("Status = %+v, %v; want clean", st, err)
	}
	if got := count() - runs; got != 0 {
		t.Errorf("Ensure and Status of a new worktree ran git %d times, want 0", got)
	}
	writeFile(t, filepath.Join(wt.Path, "new.txt"), "x\n")
	if st, err = m.Status(ctx, "alice"); err != nil || !st.Dirty || len(st.DirtyFiles) != 1 || st.DirtyFiles[0] != "new.txt" {
		t.Fatalf("after adding a file: Status = %+v, %v; want new.txt untracked", st, err)
	}
	if err := os.Remove(filepath.Join(wt.Path, "new.txt")); err != nil {
		t.Fatal(err)
	}
	// Staged and then removed from the worktree: an index now exists and
	// says the file is staged, however empty the directory looks.
	writeFile(t, filepath.Join(wt.Path, "staged.txt"), "x\n")
	gitT(t, wt.Path, "add", "staged.txt")
	if err := os.Remove(filepath.Join(wt.Path, "staged.txt")); err != nil {
		t.Fatal(err)
	}
	if st, err = m.Status(ctx, "alice"); err != nil || !st.Dirty {
		t.Fatalf("with a staged file: Status = %+v, %v; want dirty", st, err)
	}
}

// readSmall reads a line-sized file in its buffer and a longer one whole,
// and reports a missing file as such.
func TestReadSmall(t *testing.T) {
	dir := t.TempDir()
	var buf [smallFile]byte
	for _, n := range []int{0, 41, smallFile - 1, smallFile, 3 * smallFile} {
		want := strings.Repeat("x", n)
		path := filepath.Join(dir, fmt.Sprint(n))
		writeFile(t, path, want)
		if got, err := readSmall(path, &buf); err != nil || string(got) != want {
			t.Errorf("readSmall of %d bytes = %d bytes, %v", n, len(got), err)
		}
		// A worktree's gitdir under a deep path is long: read whole too.
		if got, err := readSmallFile(path, &buf); err != nil || string(got) != want {
			t.Errorf("readSmallFile of %d bytes = %d bytes, %v", n, len(got), err)
		}
	}
	if _, err := readSmall(filepath.Join(dir, "missing"), &buf); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readSmall of a missing file: %v, want fs.ErrNotExist", err)
	}
}

// The registrations' HEAD cache answers from memory while HEAD is as it
// was, and sees a switch of branch (git renames a new HEAD into place).
func TestRegHeadCacheSeesSwitch(t *testing.T) {
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	head := filepath.Join(gitT(t, wt.Path, "rev-parse", "--absolute-git-dir"), "HEAD")
	time.Sleep(2 * racyWindow) // older than the racy window: remembered
	if got, ok := m.regHeads.read(head); !ok || got != "ref: refs/heads/swarm/alice/work" {
		t.Fatalf("HEAD = %q, %v", got, ok)
	}
	if _, hit := m.regHeads.heads[head]; !hit {
		t.Fatal("a settled HEAD was not remembered")
	}
	gitT(t, wt.Path, "switch", "-q", "-c", "elsewhere")
	if got, ok := m.regHeads.read(head); !ok || got != "ref: refs/heads/elsewhere" {
		t.Fatalf("HEAD after a switch = %q, %v", got, ok)
	}
	if err := os.Remove(head); err != nil {
		t.Fatal(err)
	}
	if got, ok := m.regHeads.read(head); ok {
		t.Fatalf("a removed HEAD read as %q", got)
	}
	if _, kept := m.regHeads.heads[head]; kept {
		t.Error("a removed HEAD is still remembered")
	}
}
