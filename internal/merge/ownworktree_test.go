package merge

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// The gate runs code from the branch under test in the queue's worktree,
// and writes that checkout, its .git link included. The queue's git
// there goes by the worktree's registration, not by the link: a link to
// an agent's git directory does not make the next reset move that agent's
// HEAD, one to a git directory of the gate's making (its core.fsmonitor a
// program) runs nothing, and the link is put back as git wrote it.
func TestQueueWorktreeGoesByItsRegistration(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r, err := openRepo(ctx, e.repo, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	alice := e.worker("alice")
	aliceHead := gitT(t, alice, "symbolic-ref", "HEAD")
	wt := filepath.Join(e.stateDir, "worktrees", ".merge")
	main := e.main()
	if err := r.ensureWorktree(ctx, wt, main); err != nil {
		t.Fatal(err)
	}
	link, err := os.ReadFile(filepath.Join(wt, ".git"))
	if err != nil {
		t.Fatal(err)
	}

	// The gate points the link at alice's git directory.
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: "+filepath.Join(r.commonDir, "worktrees", "alice")+"\n")
	if err := r.ensureWorktree(ctx, wt, main); err != nil {
		t.Fatalf("reset after the link moved to alice's: %v", err)
	}
	if got := gitT(t, alice, "symbolic-ref", "HEAD"); got != aliceHead {
		t.Errorf("alice's HEAD is %q after the queue's reset, want %q", got, aliceHead)
	}
	if got, _ := os.ReadFile(filepath.Join(wt, ".git")); string(got) != string(link) {
		t.Errorf("the link is %q, want it put back: %q", got, link)
	}

	// The gate makes a git directory of its own, with a core.fsmonitor.
	ran := filepath.Join(t.TempDir(), "ran")
	evil := filepath.Join(wt, ".evil")
	gitT(t, wt, "init", "-q", "--bare", evil)
	gitT(t, wt, "--git-dir="+evil, "config", "core.bare", "false")
	writeFile(t, filepath.Join(evil, "fsmonitor"), "#!/bin/sh\necho ran >> "+ran+"\n")
	if err := os.Chmod(filepath.Join(evil, "fsmonitor"), 0o755); err != nil {
		t.Fatal(err)
	}
	gitT(t, wt, "--git-dir="+evil, "config", "core.fsmonitor", filepath.Join(evil, "fsmonitor"))
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: .evil\n")
	if err := r.ensureWorktree(ctx, wt, main); err != nil {
		t.Fatalf("reset after the link moved to the gate's git directory: %v", err)
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Errorf("the queue's git ran the gate's fsmonitor: %s", b)
	}
	if got := gitT(t, wt, "rev-parse", "HEAD"); got != main {
		t.Errorf("the queue's worktree is at %s, want %s", got, main)
	}
}

// A branch can bring a gitlink (an embedded repository, as "git add" of
// one records it) and a .gitmodules entry that says to look into it; the
// gate, which runs that branch's code in the queue's worktree, can make
// the gitlink's directory that repository again (the branch can carry
// it), with a config that names a filter, and it stays there (git clean
// leaves a submodule alone). The queue's git diff after a rebase's
// conflict ran a git status in it: the filter ran as the daemon, outside
// the gate's sandbox. The queue's git looks into no submodule.
func TestQueueGitRunsNothingOfANestedRepository(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r, err := openRepo(ctx, e.repo, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	alice := e.worker("alice")
	sub := filepath.Join(alice, "sub")
	gitT(t, alice, "init", "-q", sub)
	writeFile(t, filepath.Join(sub, ".gitattributes"), "* filter=x\n")
	writeFile(t, filepath.Join(sub, "s.txt"), "s\n")
	gitT(t, sub, "add", ".")
	gitT(t, sub, "commit", "-q", "-m", "nested")
	writeFile(t, filepath.Join(alice, ".gitmodules"), "[submodule \"sub\"]\n\tpath = sub\n\turl = ./sub\n\tignore = none\n")
	gitT(t, alice, "add", "sub", ".gitmodules")
	gitT(t, alice, "commit", "-q", "-m", "a nested repository")
	base := gitT(t, alice, "rev-parse", "HEAD")
	head := commitFile(t, alice, "f.txt", "alice\n", "alice's f")
	gitT(t, alice, "checkout", "-q", "--detach", base)
	onto := commitFile(t, alice, "f.txt", "the target's\n", "the target's f")

	wt := filepath.Join(e.stateDir, "worktrees", ".merge")
	if err := r.ensureWorktree(ctx, wt, base); err != nil {
		t.Fatal(err)
	}
	// The gate's doing: the nested repository at the commit the gitlink
	// names, its config naming the filter, a file whose stat data the
	// nested index no longer matches (git reads it again, through the
	// filter, to tell whether it changed).
	ran := filepath.Join(t.TempDir(), "ran")
	nested := filepath.Join(wt, "sub")
	if out, err := exec.Command("cp", "-a", filepath.Join(sub, ".git"), nested).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	gitT(t, nested, "checkout", "-q", "-f")
	prog := "sh -c 'echo ran >> " + ran + "; cat'"
	gitT(t, nested, "config", "filter.x.clean", prog)
	gitT(t, nested, "config", "filter.x.smudge", prog)
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(nested, "s.txt"), old, old); err != nil {
		t.Fatal(err)
	}

	_, conflicts, err := r.rebase(ctx, wt, onto, head)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(conflicts, []string{"f.txt"}) {
		t.Errorf("conflicts %q, want f.txt", conflicts)
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Errorf("the queue's git ran the filter of a repository the gate made:\n%s", b)
	}
}

// A gate runs the change's code in the queue's worktree, and can leave a
// repository there whose HEAD is a FIFO: git clean reads a nested
// repository's HEAD to tell it is one, and waited on it for good, and with
// it every merge of the swarm. The queue removes what a gate left without
// asking git: the next merge goes on.
func TestGateLeavingAFIFORepositoryDoesNotHoldTheQueue(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	q := e.open(e.options(`mkdir -p nest/.git deep/er/.git && mkfifo nest/.git/HEAD deep/er/.git/HEAD && printf 'gitdir: nowhere\n' > .git-not`))
	alice, bob := e.worker("alice"), e.worker("bob")
	commitFile(t, alice, "a.txt", "alice\n", "alice: work")
	commitFile(t, bob, "b.txt", "bob\n", "bob: work")
	for i, w := range []string{"alice", "bob"} {
		if _, err := q.Enqueue(ctx, int64(i+1), w, "swarm/"+w+"/work", ""); err != nil {
			t.Fatal(err)
		}
	}
	step(t, q, OutcomeMerged) // alice's gate leaves the FIFOs
	wt := filepath.Join(e.stateDir, "worktrees", ".merge")
	fifos := []string{filepath.Join(wt, "nest", ".git", "HEAD"), filepath.Join(wt, "deep", "er", ".git", "HEAD")}
	for _, f := range fifos {
		if fi, err := os.Lstat(f); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("the gate left no FIFO at %s (%v): the test proves nothing", f, err)
		}
	}
	done := make(chan error, 1)
	go func() {
		out, err := q.Step(ctx)
		if err == nil && out != OutcomeMerged {
			err = fmt.Errorf("Step = %s, want merged", out)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		// Let the git that waits go, FIFO after FIFO, then fail.
		for {
			for _, f := range fifos {
				if fd, err := syscall.Open(f, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					syscall.Close(fd)
				}
			}
			select {
			case <-done:
				t.Fatalf("the queue's next merge waited %s on a FIFO a gate left", waitLimit)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// The gate writes its checkout, the .git link at its top included: one it
// made a FIFO (or a link to one) held the queue's read of that link, at
// the next candidate's reset, and every merge of the swarm with it, for
// good. The queue reads the link without waiting, and never through a
// link.
func TestGateLeavingAFIFOLinkDoesNotHoldTheQueue(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	elsewhere := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(elsewhere, 0o644); err != nil {
		t.Fatal(err)
	}
	q := e.open(e.options(`if [ -e gate-ran ]; then rm -f .git && ln -s ` + elsewhere + ` .git; else rm -f .git && mkfifo .git; fi`))
	alice, bob, carol := e.worker("alice"), e.worker("bob"), e.worker("carol")
	commitFile(t, alice, "a.txt", "alice\n", "alice: work")
	commitFile(t, bob, "b.txt", "bob\n", "bob: work")
	commitFile(t, bob, "gate-ran", "\n", "bob: the gate's second way")
	commitFile(t, carol, "c.txt", "carol\n", "carol: work")
	for i, w := range []string{"alice", "bob", "carol"} {
		if _, err := q.Enqueue(ctx, int64(i+1), w, "swarm/"+w+"/work", ""); err != nil {
			t.Fatal(err)
		}
	}
	wt := filepath.Join(e.stateDir, "worktrees", ".merge")
	step(t, q, OutcomeMerged) // alice's gate leaves the FIFO; bob's, the link to one
	for i, fifo := range []string{filepath.Join(wt, ".git"), elsewhere} {
		if fi, err := os.Stat(filepath.Join(wt, ".git")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("run %d: the gate left no FIFO at .git (%v): the test proves nothing", i, err)
		}
		done := make(chan error, 1)
		go func() {
			out, err := q.Step(ctx)
			if err == nil && out != OutcomeMerged {
				err = fmt.Errorf("Step = %s, want merged", out)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitLimit):
			for {
				if fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					syscall.Close(fd)
				}
				select {
				case <-done:
					t.Fatalf("run %d: the queue's next merge waited %s on a FIFO a gate left as the worktree's .git", i, waitLimit)
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}
}

// A directory at a gitlink's path is the submodule's to git: git clean
// leaves what is in it alone, a repository or not. What a gate left
// there (a build cache, a stale result) was in the next candidate's
// checkout when its gate ran, whatever that candidate's change, as the
// ignored files were before they were cleaned. Every candidate's gate
// finds such a directory empty, as a new checkout has it.
func TestGateLeavesNothingInASubmodulesDirectory(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	gitT(t, e.repo, "checkout", "-q", "main")
	gitT(t, e.repo, "update-index", "--add", "--cacheinfo", "160000,"+e.main()+",sub")
	writeFile(t, filepath.Join(e.repo, ".gitmodules"), "[submodule \"sub\"]\n\tpath = sub\n\turl = ./nowhere\n")
	gitT(t, e.repo, "add", ".gitmodules")
	gitT(t, e.repo, "commit", "-q", "-m", "a submodule")
	gitT(t, e.repo, "checkout", "-q", "--detach")
	q := e.open(e.options(`test ! -e sub/left && test ! -e sub/deep/left && mkdir -p sub/deep && echo stale > sub/left && echo stale > sub/deep/left`))
	for i, w := range []string{"alice", "bob"} {
		commitFile(t, e.worker(w), w+".txt", w+"\n", w+": work")
		if _, err := q.Enqueue(ctx, int64(i+1), w, "swarm/"+w+"/work", ""); err != nil {
			t.Fatal(err)
		}
		step(t, q, OutcomeMerged)
	}
	if _, err := os.Lstat(filepath.Join(e.stateDir, "worktrees", ".merge", "sub", "left")); err != nil {
		t.Fatalf("the gate left nothing in the submodule's directory (%v): the test proves nothing", err)
	}
}
