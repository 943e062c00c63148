package worktree

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A session that checks out another branch does not cost the agent its
// worktree: Verify (between sessions) and Ensure (at a restart) switch back,
// keeping the other branch, its commits and the uncommitted work.
func TestRestoreBranchAfterCheckout(t *testing.T) {
	for _, op := range []struct {
		name string
		call func(*Manager, context.Context, string) (Worktree, error)
	}{{"Verify", (*Manager).Verify}, {"Ensure", (*Manager).Ensure}} {
		t.Run(op.name, func(t *testing.T) {
			ctx := context.Background()
			repo := newRepo(t)
			m := openT(t, repo)
			wt, err := m.Ensure(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			gitT(t, wt.Path, "checkout", "-q", "-b", "feature")
			writeFile(t, filepath.Join(wt.Path, "feature.txt"), "feature\n")
			feature := commitAll(t, wt.Path, "feature work")
			writeFile(t, filepath.Join(wt.Path, "notes.txt"), "uncommitted\n")
			writeFile(t, filepath.Join(wt.Path, "README.md"), "edited\n")

			got, err := op.call(m, ctx, "alice")
			if err != nil {
				t.Fatalf("%s = %v, want the branch switched back", op.name, err)
			}
			if b := gitT(t, wt.Path, "symbolic-ref", "--short", "HEAD"); b != "swarm/alice/work" {
				t.Fatalf("worktree on %s", b)
			}
			if got.Head != gitT(t, repo, "rev-parse", "swarm/alice/work") || got.Head == feature {
				t.Errorf("Head = %s", got.Head)
			}
			if gitT(t, repo, "rev-parse", "feature") != feature {
				t.Error("the other branch moved")
			}
			if readFile(t, filepath.Join(wt.Path, "notes.txt")) != "uncommitted\n" || readFile(t, filepath.Join(wt.Path, "README.md")) != "edited\n" {
				t.Error("uncommitted work was not carried along")
			}
			if st, err := m.Status(ctx, "alice"); err != nil || !st.Exists || !st.Dirty {
				t.Errorf("Status = %+v, %v", st, err)
			}
		})
	}
}

// Commits made on a detached HEAD that no branch holds are kept on a
// branch of their own before switching back.
func TestRestoreBranchFromDetachedHead(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	gitT(t, wt.Path, "checkout", "-q", "--detach")
	writeFile(t, filepath.Join(wt.Path, "lost.txt"), "would be lost\n")
	orphan := commitAll(t, wt.Path, "on a detached HEAD")
	if _, err := m.Verify(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if b := gitT(t, wt.Path, "symbolic-ref", "--short", "HEAD"); b != "swarm/alice/work" {
		t.Fatalf("worktree on %s", b)
	}
	rescue := "swarmd-rescue/alice/" + orphan[:12]
	if got := gitT(t, repo, "rev-parse", rescue); got != orphan {
		t.Fatalf("%s = %s, want %s", rescue, got, orphan)
	}

	// A detached HEAD on a commit some branch holds needs no rescue.
	gitT(t, wt.Path, "checkout", "-q", "--detach", "main")
	if _, err := m.Verify(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if n := gitT(t, repo, "for-each-ref", "--count=5", "--format=%(refname)", "refs/heads/swarmd-rescue/"); strings.Count(n, "\n") != 0 {
		t.Errorf("rescue branches: %s", n)
	}
}

// When uncommitted changes block the switch, the error gives commands that
// keep them and switch back; after them Verify succeeds.
func TestRestoreBranchBlockedGivesWorkingAdvice(t *testing.T) {
	for _, detached := range []bool{false, true} {
		name := map[bool]string{false: "branch", true: "detached"}[detached]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			repo := newRepo(t)
			m := openT(t, repo)
			wt, err := m.Ensure(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if detached {
				gitT(t, wt.Path, "checkout", "-q", "--detach")
			} else {
				gitT(t, wt.Path, "checkout", "-q", "-b", "feature")
			}
			writeFile(t, filepath.Join(wt.Path, "README.md"), "committed elsewhere\n")
			commitAll(t, wt.Path, "change README")
			writeFile(t, filepath.Join(wt.Path, "README.md"), "uncommitted\n")

			_, err = m.Verify(ctx, "alice")
			var oe *OffBranchError
			if !errors.As(err, &oe) || !errors.Is(err, ErrOffBranch) || len(oe.Fix) == 0 {
				t.Fatalf("Verify = %v, want an OffBranchError with a fix", err)
			}
			if !strings.Contains(err.Error(), "swarmd start alice") || strings.Contains(err.Error(), "\n") {
				t.Errorf("message: %q", err)
			}
			if readFile(t, filepath.Join(wt.Path, "README.md")) != "uncommitted\n" {
				t.Fatal("the refused switch touched the work")
			}
			// The advice, run as the operator would.
			cmd := exec.Command("/bin/sh", "-c", strings.Join(oe.Fix, " && "))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("advice %q failed: %v\n%s", oe.Fix, err, out)
			}
			if _, err := m.Verify(ctx, "alice"); err != nil {
				t.Fatalf("Verify after the advice: %v", err)
			}
			if b := gitT(t, wt.Path, "symbolic-ref", "--short", "HEAD"); b != "swarm/alice/work" {
				t.Fatalf("worktree on %s", b)
			}
			parked := gitT(t, repo, "for-each-ref", "--format=%(refname:short)", "--contains", gitT(t, repo, "log", "--all", "-1", "--format=%H", "--grep=uncommitted work left"))
			if parked == "" {
				t.Fatal("the uncommitted work is on no branch")
			}
			if got := gitT(t, repo, "show", parked+":README.md"); got != "uncommitted" {
				t.Errorf("%s:README.md = %q", parked, got)
			}
		})
	}
}

// A git killed inside "git commit -a" (here with SIGKILL while its editor
// runs, as a force stop does: it holds index.lock then) leaves index.lock behind; every later commit
// fails until ClearStaleLocks removes it. Other agents' locks stay.
func TestClearStaleLocksAfterKilledCommit(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := m.Ensure(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	editor := filepath.Join(dir, "editor")
	writeFile(t, editor, "#!/bin/sh\ntouch "+filepath.Join(dir, "ready")+"\nexec sleep 3600\n")
	if err := os.Chmod(editor, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "README.md"), "changed\n")
	cmd := exec.Command("git", "-C", wt.Path, "commit", "-a")
	cmd.Env = append(os.Environ(), "GIT_EDITOR="+editor)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("git commit never ran its editor")
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()

	admin := gitT(t, wt.Path, "rev-parse", "--absolute-git-dir")
	if _, err := os.Stat(filepath.Join(admin, "index.lock")); err != nil {
		t.Fatalf("the killed commit left no index.lock: %v", err)
	}
	writeFile(t, filepath.Join(admin, "HEAD.lock"), "")
	bobLock := filepath.Join(gitT(t, bob.Path, "rev-parse", "--absolute-git-dir"), "index.lock")
	writeFile(t, bobLock, "")
	branchLock := filepath.Join(repo, ".git", "refs", "heads", "swarm", "alice", "work.lock")
	writeFile(t, branchLock, "")
	if _, err := gitOut(wt.Path, "commit", "-q", "-a", "-m", "a"); err == nil {
		t.Fatal("commit succeeded with index.lock in place")
	}

	removed, err := m.ClearStaleLocks(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 3 {
		t.Errorf("removed %q, want index.lock, HEAD.lock and the branch lock", removed)
	}
	if _, err := os.Stat(bobLock); err != nil {
		t.Errorf("another agent's lock was touched: %v", err)
	}
	gitT(t, wt.Path, "commit", "-q", "-a", "-m", "a")
	if again, err := m.ClearStaleLocks(ctx, "alice"); err != nil || len(again) != 0 {
		t.Errorf("second ClearStaleLocks = %q, %v", again, err)
	}
	if got, err := m.ClearStaleLocks(ctx, "carol"); err != nil || got != nil {
		t.Errorf("ClearStaleLocks without a worktree = %q, %v", got, err)
	}
}

// A daemon killed while it created an agent's branch (between
// createBranchRef's lock and its rename) leaves the branch's lock and no
// worktree. Ensure alone takes that for another git creating the branch;
// ClearStaleLocks, which the runner calls before Ensure at the agent's
// start, removes it, so the next daemon's Ensure creates the worktree
// instead of stopping the agent for good (found by TestChaosPostgres).
func TestClearStaleLocksOfABranchCreationCutShort(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	head := gitT(t, repo, "rev-parse", "HEAD")
	branchLock := filepath.Join(repo, ".git", "refs", "heads", "swarm", "alice", "work.lock")
	if err := os.MkdirAll(filepath.Dir(branchLock), 0o777); err != nil {
		t.Fatal(err)
	}
	writeFile(t, branchLock, head+"\n")
	if _, err := m.Ensure(ctx, "alice"); err == nil || !strings.Contains(err.Error(), "another git is creating it") {
		t.Fatalf("Ensure with the branch's lock left = %v, want another git is creating it", err)
	}
	removed, err := m.ClearStaleLocks(ctx, "alice")
	if err != nil || len(removed) != 1 || removed[0] != branchLock {
		t.Fatalf("ClearStaleLocks without a worktree = %q, %v; want the branch's lock removed", removed, err)
	}
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatalf("Ensure after ClearStaleLocks: %v", err)
	}
	if got := gitT(t, wt.Path, "rev-parse", "--abbrev-ref", "HEAD"); got != "swarm/alice/work" {
		t.Errorf("alice's worktree is on %q", got)
	}
}

// VerifyClean clears the stale locks and verifies in one call: a fine
// worktree comes back with its locks gone, one switched to another branch
// is switched back (by Verify) after its locks went.
func TestVerifyCleanClearsThenVerifies(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	admin := gitT(t, wt.Path, "rev-parse", "--absolute-git-dir")
	writeFile(t, filepath.Join(admin, "index.lock"), "")
	got, removed, err := m.VerifyClean(ctx, "alice")
	if err != nil || got != wt || len(removed) != 1 || filepath.Base(removed[0]) != "index.lock" {
		t.Fatalf("VerifyClean = %+v, %q, %v; want %+v and index.lock removed", got, removed, err, wt)
	}

	gitT(t, wt.Path, "checkout", "-q", "-b", "elsewhere")
	writeFile(t, filepath.Join(admin, "HEAD.lock"), "")
	got, removed, err = m.VerifyClean(ctx, "alice")
	if err != nil || got.Branch != wt.Branch || len(removed) != 1 {
		t.Fatalf("VerifyClean off its branch = %+v, %q, %v", got, removed, err)
	}
	if b := gitT(t, wt.Path, "rev-parse", "--abbrev-ref", "HEAD"); b != wt.Branch {
		t.Errorf("worktree on %q after VerifyClean, want %q", b, wt.Branch)
	}
	if _, _, err := m.VerifyClean(ctx, "carol"); err == nil {
		t.Error("VerifyClean of an agent without a worktree succeeded")
	}
}
