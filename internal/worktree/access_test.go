package worktree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A sandbox writes its own branch directory and no other: not the
// directory all the agents' branches share (a sandbox could create or
// replace a peer's ref there), not a peer's.
func TestAccessIsTheAgentsOwnBranchDirectory(t *testing.T) {
	ctx := context.Background()
	m := openT(t, newRepo(t))
	for _, a := range []string{"alice", "bob"} {
		if _, err := m.Ensure(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	acc, err := m.Access("alice")
	if err != nil {
		t.Fatal(err)
	}
	heads := filepath.Join(m.commonDir, "refs", "heads")
	if want := filepath.Join(heads, "swarm", "alice"); !slices.Contains(acc.Writable, want) {
		t.Errorf("writable %v: want alice's branch directory %s", acc.Writable, want)
	}
	if want := filepath.Join(m.commonDir, "objects"); acc.Objects != want {
		t.Errorf("objects %s, want %s", acc.Objects, want)
	}
	for _, w := range acc.Writable {
		for _, not := range []string{heads, filepath.Join(heads, "swarm"), filepath.Join(heads, "swarm", "bob"), acc.Objects} {
			if w == not {
				t.Errorf("writable holds %s", w)
			}
		}
	}
	if got, want := filepath.Join(m.commonDir, filepath.FromSlash(branchRef("alice").String())), filepath.Join(heads, "swarm", "alice", "work"); got != want {
		t.Errorf("alice's ref is %s, want %s (inside her directory)", got, want)
	}
}

// A repository of the layout before the branch directories (swarm/AGENT)
// is moved at Open: the branch keeps its commit, the worktree its checkout.
func TestOpenMovesOldBranchesIntoTheirDirectories(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	if _, err := m.Ensure(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	wt := m.Path("alice")
	writeFile(t, filepath.Join(wt, "a.txt"), "a\n")
	head := commitAll(t, wt, "alice's work")
	// Back to the old layout, as an earlier swarmd left it.
	gitT(t, repo, "branch", "-m", "swarm/alice/work", "swarm/alice/work")
	gitT(t, repo, "branch", "swarm/bob/work", "main")

	m = openT(t, repo)
	for agent, want := range map[string]string{"alice": head, "bob": gitT(t, repo, "rev-parse", "main")} {
		if got := gitT(t, repo, "rev-parse", "swarm/"+agent+"/work"); got != want {
			t.Errorf("swarm/%s/work at %s, want %s", agent, got, want)
		}
	}
	if got := gitT(t, wt, "symbolic-ref", "HEAD"); got != "refs/heads/swarm/alice/work" {
		t.Errorf("alice's worktree on %s", got)
	}
	w, err := m.Verify(ctx, "alice")
	if err != nil || w.Head != head {
		t.Errorf("alice's worktree after the move: %+v, %v", w, err)
	}
}

// A session rewrites its worktree's .git (the worktree is writable) to
// name a peer's admin directory: its next sandbox, or its hooks', must not
// be given that directory to write.
func TestAccessIgnoresARewrittenDotGit(t *testing.T) {
	ctx := context.Background()
	m := openT(t, newRepo(t))
	for _, a := range []string{"alice", "bob"} {
		if _, err := m.Ensure(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	bobAdmin := filepath.Join(m.commonDir, "worktrees", "bob")
	if err := os.WriteFile(filepath.Join(m.Path("alice"), ".git"), []byte("gitdir: "+bobAdmin+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	acc, err := m.Access("alice")
	if err == nil && slices.Contains(acc.Writable, bobAdmin) {
		t.Errorf("alice's sandbox may write bob's admin directory: %v", acc.Writable)
	}
	if err == nil {
		t.Errorf("access to alice's worktree with a .git naming bob's: %+v, want an error", acc)
	}
}

// While a sandboxed session runs, its new commits wait in its agent's
// quarantine: the branch names a commit the repository does not have yet.
// The status says so, and a listing of every worktree still works.
func TestStatusOfABranchAheadOfTheRepository(t *testing.T) {
	ctx := context.Background()
	m := openT(t, newRepo(t))
	for _, a := range []string{"alice", "bob"} {
		if _, err := m.Ensure(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	elsewhere := t.TempDir()
	cmd := exec.Command("git", "-C", m.Path("alice"), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
		"commit", "-q", "--allow-empty", "-m", "in the quarantine")
	cmd.Env = append(os.Environ(), "GIT_OBJECT_DIRECTORY="+elsewhere, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+filepath.Join(m.commonDir, "objects"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	st, err := m.Status(ctx, "alice")
	if err != nil || !strings.Contains(st.Problem, "not in the repository yet") {
		t.Errorf("status: %+v, %v; want the problem said", st, err)
	}
	if st, err := m.Look(ctx, "alice"); err != nil || !strings.Contains(st.Problem, "not in the repository yet") {
		t.Errorf("look: %+v, %v; want the problem said", st, err)
	}
	sts, err := m.List(ctx)
	if err != nil || len(sts) != 2 {
		t.Errorf("list: %d worktrees, %v; want both", len(sts), err)
	}
}

// Look is Status without the counts against the base commit: the same
// HEAD and uncommitted files, and no git rev-list, whose walk grew with
// every commit merged since the start.
func TestLookCountsNothing(t *testing.T) {
	ctx := context.Background()
	m := openT(t, newRepo(t))
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "one.txt"), "one\n")
	commitAll(t, wt.Path, "one")
	writeFile(t, filepath.Join(wt.Path, "dirty.txt"), "dirty\n")
	st, err := m.Status(ctx, "alice")
	if err != nil || st.Ahead != 1 {
		t.Fatalf("status %+v, %v; want one commit ahead", st, err)
	}
	m.counts.mu.Lock()
	m.counts.counts = nil // nothing remembered: a count would put one back
	m.counts.mu.Unlock()
	look, err := m.Look(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if look.Head != st.Head || !slices.Equal(look.DirtyFiles, st.DirtyFiles) || look.Ahead != 0 || look.Behind != 0 {
		t.Fatalf("look %+v, want status %+v without its counts", look, st)
	}
	if n := len(m.counts.counts); n != 0 {
		t.Fatalf("look counted %d times", n)
	}
}
