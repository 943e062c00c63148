package merge

import (
	"context"
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
