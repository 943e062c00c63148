package worktree

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestInspectCacheFollowsGit: a worktree found fine is answered from the
// cache until any file the answer came from changes: a commit (the branch
// ref), a switch of branch (HEAD), packing the refs, the directory removed.
func TestInspectCacheFollowsGit(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// settle waits out the racy window (a change younger than it is not
	// trusted to show in stat data), then inspects twice: the second must
	// come from the cache.
	settle := func(what string) inspection {
		t.Helper()
		time.Sleep(2 * racyWindow)
		in, err := m.inspect("alice")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if _, ok := m.cachedInspect("alice"); !ok && in.state == wtOK {
			t.Fatalf("%s: a worktree found fine is not remembered", what)
		}
		return in
	}
	in := settle("new worktree")
	if in.state != wtOK || in.head.String() != wt.Head {
		t.Fatalf("inspection = %+v, want wtOK at %s", in, wt.Head)
	}

	writeFile(t, filepath.Join(wt.Path, "f.txt"), "x\n")
	head := commitAll(t, wt.Path, "work")
	if _, ok := m.cachedInspect("alice"); ok {
		t.Fatal("a commit did not invalidate the cached inspection")
	}
	if in = settle("after a commit"); in.head.String() != head {
		t.Fatalf("after a commit: head %s, want %s", in.head, head)
	}

	gitT(t, repo, "pack-refs", "--all")
	if _, ok := m.cachedInspect("alice"); ok {
		t.Fatal("packing the refs did not invalidate the cached inspection")
	}
	if in = settle("after pack-refs"); in.state != wtOK || in.head.String() != head {
		t.Fatalf("after pack-refs: %+v", in)
	}
	// With the branch only in packed-refs, a change there alone (moved,
	// then packed again: no loose ref before or after) shows.
	gitT(t, repo, "update-ref", "refs/heads/swarm/alice/work", wt.Head)
	gitT(t, repo, "pack-refs", "--all")
	if _, ok := m.cachedInspect("alice"); ok {
		t.Fatal("a change of the packed ref did not invalidate the cached inspection")
	}
	if in = settle("after a packed move"); in.head.String() != wt.Head {
		t.Fatalf("after a packed move: head %s, want %s", in.head, wt.Head)
	}
	gitT(t, repo, "update-ref", "refs/heads/swarm/alice/work", head)
	settle("moved back")

	gitT(t, wt.Path, "switch", "-q", "-c", "elsewhere")
	if _, ok := m.cachedInspect("alice"); ok {
		t.Fatal("switching branch did not invalidate the cached inspection")
	}
	if in = settle("after a switch"); in.state != wtOffBranch {
		t.Fatalf("after a switch: state %v, want wtOffBranch", in.state)
	}
	gitT(t, wt.Path, "switch", "-q", "swarm/alice/work")
	settle("switched back")

	if err := os.RemoveAll(wt.Path); err != nil {
		t.Fatal(err)
	}
	if in, err = m.inspect("alice"); err != nil || in.state != wtMissing {
		t.Fatalf("after removing the directory: %+v, %v; want wtMissing", in, err)
	}
}

// TestOnBranchReadsLikeGit: the go-git-free read of a worktree on its
// branch gives git's answer for a loose and a packed ref, and declines
// (for the full inspection) a HEAD elsewhere or a branch gone.
func TestOnBranchReadsLikeGit(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "f.txt"), "x\n")
	head := commitAll(t, wt.Path, "work")
	admin := filepath.Join(m.commonDir, "worktrees", "alice")
	want := branchRef("alice")
	if h, ok := m.onBranch(admin, want); !ok || h.String() != head {
		t.Fatalf("loose ref: %s, %v; want %s", h, ok, head)
	}
	gitT(t, repo, "pack-refs", "--all")
	if h, ok := m.onBranch(admin, want); !ok || h.String() != head {
		t.Fatalf("packed ref: %s, %v; want %s", h, ok, head)
	}
	gitT(t, wt.Path, "switch", "-q", "--detach")
	if _, ok := m.onBranch(admin, want); ok {
		t.Fatal("a detached HEAD read as on the branch")
	}
	gitT(t, wt.Path, "switch", "-q", "-c", "other")
	if _, ok := m.onBranch(admin, want); ok {
		t.Fatal("another branch read as the agent's")
	}
	gitT(t, wt.Path, "switch", "-q", "swarm/alice/work")
	gitT(t, repo, "update-ref", "-d", "refs/heads/swarm/alice/work")
	if _, ok := m.onBranch(admin, want); ok {
		t.Fatal("a deleted branch read as a commit")
	}
}

// TestRememberKeepsAFreshWorktreesInspection: a worktree just made cannot be
// remembered by the look that made it (its files are too recent to trust);
// Remember, once they are older, leaves the next look to the stat data.
func TestRememberKeepsAFreshWorktreesInspection(t *testing.T) {
	repo := newRepo(t)
	m := openT(t, repo)
	if _, err := m.Ensure(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.cachedInspect("alice"); ok {
		t.Fatal("a worktree made within the racy window was remembered")
	}
	time.Sleep(2 * racyWindow)
	if _, ok := m.cachedInspect("alice"); ok {
		t.Fatal("remembered before Remember")
	}
	m.Remember("alice")
	if _, ok := m.cachedInspect("alice"); !ok {
		t.Fatal("Remember did not keep the inspection")
	}
	m.Remember("../x") // not an agent's name: nothing read, nothing kept
	if _, ok := m.cachedInspect("../x"); ok {
		t.Fatal("an invalid name was remembered")
	}
}
