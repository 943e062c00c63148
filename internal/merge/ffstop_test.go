package merge

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A fast-forward of a person's checkout runs to its end when the daemon
// stops: git stopped midway leaves the checkout half moved (the new files
// written, the index and branch not) or its index.lock behind, and the
// queue waits on that checkout for good (TestChaosSQLite: a SIGTERM of the
// daemon during the fast-forward of task 100's merge left
// .git/index.lock, seed 480600719; another left t139.txt as a local
// change, seed 403343567).
func TestFastForwardNotCutOffByStop(t *testing.T) {
	e := newEnv(t)
	gitT(t, e.repo, "checkout", "-q", "main")
	gitT(t, e.repo, "checkout", "-q", "-b", "next")
	next := commitFile(t, e.repo, "n.txt", "next\n", "next")
	gitT(t, e.repo, "checkout", "-q", "main")
	r, err := openRepo(context.Background(), e.repo, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the daemon's stop
	if err := r.fastForward(ctx, e.repo, next, "swarmd merge queue: test"); err != nil {
		t.Fatalf("fast-forward during the stop: %v", err)
	}
	if got := e.main(); got != next {
		t.Fatalf("main at %s, want %s", got, next)
	}
	if st := gitT(t, e.repo, "status", "--porcelain"); strings.TrimSpace(st) != "" {
		t.Fatalf("checkout not clean after the fast-forward: %q", st)
	}
}

// git merge (the fast-forward of a person's checkout), git rebase and git
// fetch end with git gc --auto once the repository has enough loose
// objects or packs, and the objects a sandbox writes reach the repository
// when its session ends: an agent could have the daemon's git start a
// gc, in the background, as the daemon, outside every process tree of
// the swarm, whenever it liked. That gc lists every ref and every
// worktree's HEAD, which a running session writes (a FIFO there held it
// for good, with packed-refs.lock taken: no ref could be deleted after).
// The daemon's git starts no repository maintenance; that is the
// operator's.
func TestTheDaemonsGitStartsNoGC(t *testing.T) {
	e := newEnv(t)
	gitT(t, e.repo, "checkout", "-q", "main")
	for i := range 2 { // two packs
		commitFile(t, e.repo, fmt.Sprintf("p%d.txt", i), "p\n", "pack")
		gitT(t, e.repo, "repack", "-q")
	}
	gitT(t, e.repo, "checkout", "-q", "-b", "next")
	next := commitFile(t, e.repo, "n.txt", "next\n", "next")
	gitT(t, e.repo, "checkout", "-q", "main")
	// One pack too many, and a gc in the foreground: it would have
	// repacked them into one before the merge ended.
	gitT(t, e.repo, "config", "gc.autoPackLimit", "1")
	gitT(t, e.repo, "config", "gc.autoDetach", "false")
	packs := func() []string {
		ps, err := filepath.Glob(filepath.Join(e.repo, ".git", "objects", "pack", "*.pack"))
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	before := packs()
	if len(before) != 2 {
		t.Fatalf("%d packs, want 2", len(before))
	}
	r, err := openRepo(context.Background(), e.repo, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.fastForward(context.Background(), e.repo, next, "swarmd merge queue: test"); err != nil {
		t.Fatal(err)
	}
	if got := e.main(); got != next {
		t.Fatalf("main at %s, want %s", got, next)
	}
	if after := packs(); !slices.Equal(after, before) {
		t.Errorf("packs %q after the fast-forward, were %q: the daemon's git ran a gc", after, before)
	}
}
