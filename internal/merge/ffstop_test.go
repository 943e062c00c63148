package merge

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
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

// The queue's move of a target checked out nowhere (git update-ref) runs
// to its end when the daemon stops: git ended between its write of the
// ref and its exit had moved the target, the queue took its move for one
// not made, and a look then reported the queue's own merge as someone
// else's.
func TestUpdateRefNotCutOffByStop(t *testing.T) {
	// git, but for the queue's update-ref, which holds on once it has
	// moved the ref, until the test lets it go or the stop ends it.
	bin := t.TempDir()
	moved, hold := filepath.Join(bin, "moved"), filepath.Join(bin, "hold")
	if err := syscall.Mkfifo(hold, 0o600); err != nil {
		t.Fatal(err)
	}
	q, before := updateRefQueue(t, bin, fmt.Sprintf(`|| exit; : > '%s'; exec cat '%s'`, moved, hold))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := q.Step(ctx)
		done <- err
	}()
	waitForFile(t, moved)
	cancel() // the daemon's stop
	// Let git go once it reads the hold; a git the stop ended reads
	// nothing, and the step is over.
	deadline := time.Now().Add(waitLimit)
	for released := false; !released; {
		select {
		case <-done:
			released = true
			done <- nil
		default:
			if f, err := os.OpenFile(hold, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
				released = true
			} else if time.Now().After(deadline) {
				t.Fatal("the queue's git neither held nor ended")
			} else {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	<-done
	s, err := q.Sight(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Tip == before || !s.Own {
		t.Fatalf("after the stop: main at %.12s (before %.12s), the queue's own: %v; want the merge, known as the queue's", s.Tip, before, s.Own)
	}
}

// A queue's update-ref that fails after it wrote the ref (git ended at
// the bound, say) moved the target to the queue's candidate: that is the
// queue's move, not someone else's (errMoved) to rebuild on and report.
func TestUpdateRefFailedAfterItsWriteIsTheQueuesMove(t *testing.T) {
	q, before := updateRefQueue(t, t.TempDir(), "; exit 1")
	step(t, q, OutcomeMerged)
	s, err := q.Sight(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Tip == before || !s.Own {
		t.Fatalf("main at %.12s (before %.12s), the queue's own: %v; want the merge, known as the queue's", s.Tip, before, s.Own)
	}
}

// updateRefQueue is a queue with alice's task enqueued, whose git (put in
// bin, first on PATH) runs the queue's update-ref followed by then (a shell
// command line's tail); before is main's tip.
func updateRefQueue(t *testing.T, bin, then string) (q *Queue, before string) {
	t.Helper()
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(bin, "git"), fmt.Sprintf(`#!/bin/sh
case " $* " in
*" update-ref -m swarmd merge queue"*) '%[1]s' "$@" %[2]s;;
esac
exec '%[1]s' "$@"
`, real, then))
	if err := os.Chmod(filepath.Join(bin, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	e := newEnv(t)
	q = e.open(e.options())
	commitFile(t, e.worker("alice"), "a.txt", "a\n", "work")
	if _, err := q.Enqueue(context.Background(), 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	return q, e.main()
}
