package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPushAndFetch: an agent's branch is force-pushed to a bare remote (a
// rewritten history replaces the remote's); another clone fetches it into
// FetchedPrefix, leaving its own refs/heads alone, and then holds the commit.
func TestPushAndFetch(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	bare := filepath.Join(t.TempDir(), "remote.git")
	gitT(t, repo, "init", "-q", "--bare", bare)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// The remote has alice's branch of the old layout (swarm/alice, a
	// file where the new one needs a directory): the push replaces it.
	gitT(t, repo, "push", "-q", bare, "main:refs/heads/swarm/alice")
	writeFile(t, filepath.Join(wt.Path, "a.txt"), "a\n")
	first := commitAll(t, wt.Path, "work")
	if err := m.Push(ctx, "alice", bare); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, bare, "rev-parse", "refs/heads/swarm/alice/work"); got != first {
		t.Fatalf("remote swarm/alice/work = %s, want %s", got, first)
	}
	if _, err := gitOut(bare, "rev-parse", "--verify", "-q", "refs/heads/swarm/alice"); err == nil {
		t.Fatal("the remote's old swarm/alice is still there")
	}
	// A rewritten branch (not a descendant) replaces the remote's.
	gitT(t, wt.Path, "commit", "-q", "--amend", "-m", "work, amended")
	amended := gitT(t, wt.Path, "rev-parse", "HEAD")
	if err := m.Push(ctx, "alice", bare); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, bare, "rev-parse", "refs/heads/swarm/alice/work"); got != amended {
		t.Fatalf("remote swarm/alice/work after an amend = %s, want %s", got, amended)
	}

	// Another machine's clone, whose own swarm/alice/work is stale.
	other := newRepo(t)
	gitT(t, other, "branch", "swarm/alice/work")
	stale := gitT(t, other, "rev-parse", "swarm/alice/work")
	om := openT(t, other)
	if ok, err := om.HasCommit(ctx, amended); err != nil || ok {
		t.Fatalf("HasCommit before the fetch = %v, %v; want false", ok, err)
	}
	got, err := om.FetchBranch(ctx, "swarm/alice/work", bare)
	if err != nil || got != amended {
		t.Fatalf("FetchBranch = %s, %v; want %s", got, err, amended)
	}
	if ok, err := om.HasCommit(ctx, amended); err != nil || !ok {
		t.Fatalf("HasCommit after the fetch = %v, %v; want true", ok, err)
	}
	if now := gitT(t, other, "rev-parse", "swarm/alice/work"); now != stale {
		t.Errorf("the fetch moved the local branch to %s", now)
	}
	if _, err := om.FetchBranch(ctx, "swarm/nobody/work", bare); err == nil {
		t.Error("fetching a branch the remote lacks succeeded")
	}

	// Pushing the target never forces.
	writeFile(t, filepath.Join(repo, "c.txt"), "c\n")
	commitAll(t, repo, "merged here")
	writeFile(t, filepath.Join(other, "b.txt"), "b\n")
	commitAll(t, other, "diverged")
	if err := m.PushBranch(ctx, "main", bare); err != nil {
		t.Fatal(err)
	}
	if err := om.PushBranch(ctx, "main", bare); err == nil {
		t.Error("a push that does not fast-forward main succeeded")
	}
}

// TestFastForward: a branch checked out nowhere moves by compare-and-swap;
// one checked out in a clean working tree moves there, files and all; a
// local change, or a commit that is not a descendant, refuses.
func TestFastForward(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	base := gitT(t, repo, "rev-parse", "HEAD")
	gitT(t, repo, "branch", "side")
	gitT(t, repo, "checkout", "-q", "-b", "ahead")
	writeFile(t, filepath.Join(repo, "new.txt"), "new\n")
	ahead := commitAll(t, repo, "ahead")
	gitT(t, repo, "checkout", "-q", "main")

	if err := m.FastForward(ctx, "side", ahead); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, repo, "rev-parse", "side"); got != ahead {
		t.Fatalf("side = %s, want %s", got, ahead)
	}
	writeFile(t, filepath.Join(repo, "README.md"), "changed\n")
	if err := m.FastForward(ctx, "main", ahead); err == nil {
		t.Fatal("fast-forward over a local change succeeded")
	}
	gitT(t, repo, "checkout", "--", "README.md")
	if err := m.FastForward(ctx, "main", ahead); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(repo, "new.txt")); got != "new\n" {
		t.Fatalf("main's checkout has new.txt = %q", got)
	}
	if err := m.FastForward(ctx, "main", base); err == nil {
		t.Fatal("moving main back succeeded")
	}
}

// TestSetAsideThatFailsKeepsNothing: a set-aside git refuses (the branch
// checked out with local changes, or moved meanwhile) leaves no ref under
// keep's name: the daemon tries again every few seconds while it waits,
// and each try left a ref that names a commit set aside when none was.
func TestSetAsideThatFailsKeepsNothing(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	base := gitT(t, repo, "rev-parse", "HEAD")
	writeFile(t, filepath.Join(repo, "lost.txt"), "lost\n")
	lost := commitAll(t, repo, "uncounted")
	kept := func() string {
		return gitT(t, repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/swarmd/set-aside/")
	}

	writeFile(t, filepath.Join(repo, "README.md"), "changed\n")
	for i := range 2 {
		if err := m.SetAside(ctx, "main", lost, base, fmt.Sprintf("refs/swarmd/set-aside/main/%d", i)); err == nil {
			t.Fatal("set aside over a local change")
		}
	}
	if got := kept(); got != "" {
		t.Fatalf("set-asides that failed left refs:\n%s", got)
	}
	gitT(t, repo, "checkout", "--", "README.md")
	if err := m.SetAside(ctx, "main", base, base, "refs/swarmd/set-aside/main/2"); err == nil {
		t.Fatal("set aside from a commit the branch is not at")
	}
	gitT(t, repo, "checkout", "-q", "-b", "elsewhere")
	if err := m.SetAside(ctx, "main", base, base, "refs/swarmd/set-aside/main/3"); err == nil {
		t.Fatal("set aside from a commit the branch is not at (not checked out)")
	}
	if got := kept(); got != "" {
		t.Fatalf("set-asides that failed left refs:\n%s", got)
	}
	if err := m.SetAside(ctx, "main", lost, base, "refs/swarmd/set-aside/main/4"); err != nil {
		t.Fatal(err)
	}
	if got, want := kept(), "refs/swarmd/set-aside/main/4 "+lost; got != want {
		t.Fatalf("kept %q, want %q", got, want)
	}
	if got := gitT(t, repo, "rev-parse", "main"); got != base {
		t.Fatalf("main at %s, want %s", got, base)
	}
}

// TestRemoteEnvReachesTheSSH: the pushes and fetches run with RemoteEnv
// (the daemon's ssh that reads no user configuration, where sessions
// write it): here an ssh command that says it ran.
func TestRemoteEnvReachesTheSSH(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	ssh := filepath.Join(dir, "ssh")
	writeFile(t, ssh, fmt.Sprintf("#!/bin/sh\necho \"$@\" >> %s\nexit 1\n", ran))
	if err := os.Chmod(ssh, 0o755); err != nil {
		t.Fatal(err)
	}
	m := openT(t, repo, func(o *Options) { o.RemoteEnv = []string{"GIT_SSH_COMMAND=" + ssh} })
	remote := "ssh://swarmd.invalid/repo.git"
	if err := m.PushBranch(ctx, "main", remote); err == nil {
		t.Fatalf("a push to %s succeeded", remote)
	}
	if _, err := m.FetchBranch(ctx, "main", remote); err == nil {
		t.Fatalf("a fetch from %s succeeded", remote)
	}
	got, err := os.ReadFile(ran)
	if err != nil || strings.Count(string(got), "swarmd.invalid") != 2 {
		t.Errorf("the ssh of RemoteEnv ran for the push and the fetch: %q, %v", got, err)
	}
}

// TestPruneRemoteLines: the lines of merged tasks are deleted on the
// remote, each at the head the listing gave: one pushed again since stays,
// one another daemon deleted first is no error; the merge queue's fetched
// copies of other daemons' lines go locally with PruneLines.
func TestPruneRemoteLines(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	bare := filepath.Join(t.TempDir(), "remote.git")
	gitT(t, repo, "init", "-q", "--bare", bare)
	head := gitT(t, repo, "rev-parse", "HEAD")
	for _, id := range []int64{1, 2, 3, 4} {
		if err := m.KeepLine(ctx, id, head); err != nil {
			t.Fatal(err)
		}
		if err := m.PushLine(ctx, id, bare); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(repo, "more.txt"), "more\n")
	moved := commitAll(t, repo, "more")
	var asked []int64
	n, err := m.PruneRemoteLines(ctx, bare, func(_ context.Context, ids []int64) (map[int64]bool, error) {
		asked = append(asked, ids...)
		// Between the listing and the deletes: task 2's line is pushed
		// again, task 3's deleted by another daemon.
		gitT(t, repo, "push", "-q", "-f", bare, moved+":refs/heads/swarm/task/2")
		gitT(t, repo, "push", "-q", bare, ":refs/heads/swarm/task/3")
		return map[int64]bool{1: true, 2: true, 3: true}, nil
	})
	if err != nil || n != 1 || len(asked) != 4 {
		t.Fatalf("PruneRemoteLines = %d, %v after asking about %v; want task 1's deleted alone", n, err, asked)
	}
	if refs := gitT(t, bare, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/swarm/task/"); refs != "swarm/task/2 "+moved+"\nswarm/task/4 "+head {
		t.Fatalf("the remote's lines: %q; want task 2's pushed again and task 4's", refs)
	}

	// The merge leader's copy of task 4's line, fetched from the remote,
	// goes with the task's own once it is merged.
	om := openT(t, newRepo(t))
	if _, err := om.FetchBranch(ctx, "swarm/task/4", bare); err != nil {
		t.Fatal(err)
	}
	removed, err := om.PruneLines(ctx, func(context.Context, []int64) (map[int64]bool, error) { return map[int64]bool{4: true}, nil })
	if err != nil || strings.Join(removed, " ") != FetchedPrefix+"swarm/task/4" {
		t.Fatalf("PruneLines on the leader = %v, %v; want its fetched copy of task 4's line", removed, err)
	}
	if n, err := m.PruneRemoteLines(ctx, "", nil); err == nil || n != 0 {
		t.Fatalf("no remote: %d, %v", n, err)
	}
}
