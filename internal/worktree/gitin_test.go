package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The daemon's git in an agent's worktree goes by the git directory
// registered for it, never by what the worktree says of itself: here its
// .git link (the sandbox's to write) names a git directory of its making
// whose config runs a core.fsmonitor program, and the repository's
// relative core.hooksPath (husky's) names hooks in the worktree. Neither
// runs, for git status, a stash, a reset, a checkout or a ref update, and
// the answers are the worktree's own.
func TestGitInAWorktreeRunsNothingOfTheWorktrees(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	gitT(t, repo, "config", "core.hooksPath", ".husky/_")
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	in, err := m.inspect("alice")
	if err != nil || in.adminDir == "" {
		t.Fatalf("inspect: %+v, %v", in, err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	script := "#!/bin/sh\necho \"$0 $*\" >> " + ran + "\n"
	writeExec := func(path string) {
		writeFile(t, path, script)
		if err := os.Chmod(path, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, hook := range []string{"post-checkout", "reference-transaction", "post-index-change", "pre-auto-gc"} {
		writeExec(filepath.Join(wt.Path, ".husky", "_", hook))
	}
	evil := filepath.Join(wt.Path, ".evil")
	gitT(t, wt.Path, "init", "-q", "--bare", evil)
	gitT(t, wt.Path, "--git-dir="+evil, "config", "core.bare", "false")
	writeExec(filepath.Join(evil, "fsmonitor"))
	gitT(t, wt.Path, "--git-dir="+evil, "config", "core.fsmonitor", filepath.Join(evil, "fsmonitor"))
	writeFile(t, filepath.Join(wt.Path, "dirty.txt"), "x\n")
	writeFile(t, filepath.Join(wt.Path, ".git"), "gitdir: .evil\n")

	dirty, err := m.dirtyFiles(ctx, wt.Path, in.adminDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"stash", "push", "--include-untracked", "--message", "t"},
		{"reset", "--quiet", "--hard", "HEAD"},
		{"checkout", "--quiet", "--detach"},
		{"checkout", "--quiet", m.Branch("alice")},
		{"update-ref", "refs/heads/swarm/alice/other", "HEAD"},
	} {
		if _, err := m.gitIn(ctx, wt.Path, in.adminDir, args...); err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Fatalf("the daemon's git ran the worktree's programs:\n%s", b)
	}
	if len(dirty) == 0 {
		t.Errorf("git status of the worktree saw nothing dirty: it read another git directory")
	}
	if got := gitT(t, repo, "stash", "list"); got == "" {
		t.Errorf("the stash is not in the repository: git wrote another git directory")
	}
}

// plantNested makes dir/sub a repository of its own with a committed file
// and commits it to the worktree at dir as a gitlink (an embedded
// repository, as "git add" of one records it). The nested repository's
// config then names a program, which appends to the returned file, as a
// filter of every file there (its own .gitattributes selects it): git
// runs it when a status in the nested repository rereads a file whose
// stat data changed.
func plantNested(t *testing.T, dir string) (ran string) {
	t.Helper()
	ran = filepath.Join(t.TempDir(), "ran")
	sub := filepath.Join(dir, "sub")
	gitT(t, dir, "init", "-q", sub)
	writeFile(t, filepath.Join(sub, ".gitattributes"), "* filter=x\n")
	writeFile(t, filepath.Join(sub, "s.txt"), "s\n")
	commitAll(t, sub, "nested")
	gitT(t, dir, "add", "sub")
	gitT(t, dir, "commit", "-q", "-m", "an embedded repository")
	prog := "sh -c 'echo ran >> " + ran + "; cat'"
	gitT(t, sub, "config", "filter.x.clean", prog)
	gitT(t, sub, "config", "filter.x.smudge", prog)
	// The file's stat data no longer what the nested index says: git
	// must read it again, through the filter, to tell.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(sub, "s.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	return ran
}

// A sandbox writes its worktree, a repository nested in it included, and
// that repository's config. git status recursed into a nested repository
// the worktree's index records as a gitlink (as "git add" of one does),
// and ran a status there, by that repository's config: its filter ran as
// the daemon, at the status of the agent's next prompt, outside the
// sandbox. The daemon's git looks into no submodule.
func TestGitInAWorktreeRunsNothingOfANestedRepository(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ran := plantNested(t, wt.Path)
	// .gitmodules says to look into it, whatever the default.
	writeFile(t, filepath.Join(wt.Path, ".gitmodules"), "[submodule \"sub\"]\n\tpath = sub\n\turl = ./sub\n\tignore = none\n")
	writeFile(t, filepath.Join(wt.Path, "dirty.txt"), "x\n")

	st, err := m.Status(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.VerifyClean(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	gitT(t, wt.Path, "checkout", "-q", "--detach")
	if _, err := m.Ensure(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StartLine(ctx, "alice", 1, "", "main"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Fatalf("the daemon's git ran the nested repository's filter:\n%s", b)
	}
	if !slices.Contains(st.DirtyFiles, "dirty.txt") {
		t.Errorf("dirty files %q: want dirty.txt among them", st.DirtyFiles)
	}
	if got := gitT(t, repo, "stash", "list"); !strings.Contains(got, "before task 1") {
		t.Errorf("stash list %q: the line's start stashed nothing", got)
	}
}

// With extensions.worktreeConfig in the repository's config (git
// sparse-checkout sets it), git reads the config.worktree file of each
// worktree's own git directory, which a sandbox writes: a filter it named
// there ran as the daemon at the daemon's next git status in its
// worktree (core.fsmonitor and core.hooksPath the daemon sets itself).
// The sandbox is given that file read-only (Access: Pinned), an empty
// file of the daemon's, whatever a session wrote there before.
func TestAccessPinsAnEmptyWorktreeConfig(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// swarmd opens no repository with an extension (go-git's refusal):
	// the operator turns it on while the daemon runs.
	gitT(t, repo, "config", "core.repositoryformatversion", "1")
	gitT(t, repo, "config", "extensions.worktreeConfig", "true")
	acc, err := m.Access("alice")
	if err != nil {
		t.Fatal(err)
	}
	in, err := m.inspect("alice")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(in.adminDir, "config.worktree")
	if !slices.Contains(acc.Pinned, cfg) {
		t.Fatalf("pinned %v: want %s", acc.Pinned, cfg)
	}
	if fi, err := os.Lstat(cfg); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("%s: %v, %v: want an empty file to pin", cfg, fi, err)
	}

	// What a session wrote there before it was pinned (or through a link).
	ran := filepath.Join(t.TempDir(), "ran")
	writeFile(t, filepath.Join(wt.Path, ".gitattributes"), "* filter=x\n")
	commitAll(t, wt.Path, "attributes")
	gitT(t, wt.Path, "config", "--worktree", "filter.x.clean", "sh -c 'echo clean >> "+ran+"; cat'")
	gitT(t, wt.Path, "config", "--worktree", "filter.x.smudge", "sh -c 'echo smudge >> "+ran+"; cat'")
	if got := readFile(t, cfg); !strings.Contains(got, "filter") {
		t.Fatalf("git config --worktree wrote elsewhere: %s holds %q", cfg, got)
	}
	outside := filepath.Join(t.TempDir(), "operators")
	writeFile(t, outside, "[user]\n\tname = the operator\n")
	for _, plant := range []string{"content", "link"} {
		if plant == "link" {
			if err := os.Remove(cfg); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, cfg); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := m.Access("alice"); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(cfg); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
			t.Errorf("%s after Access (%s planted): %v, %v: want an empty file", cfg, plant, fi, err)
		}
	}
	if got := readFile(t, outside); got != "[user]\n\tname = the operator\n" {
		t.Errorf("Access wrote through the link: %q", got)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(wt.Path, "README.md"), later, later); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Status(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Errorf("the daemon's git ran a filter of the worktree's config:\n%s", b)
	}
}

// core.preferSymlinkRefs makes git write HEAD as a symbolic link, which
// the daemon does not read (a link is followed nowhere, so one is taken
// for what a sandbox planted): with it in the repository's config, the
// daemon's own switch back to the agent's branch made the agent's HEAD
// one, and the agent was stopped for it. The daemon's git writes HEAD as
// a file whatever the repository's config says.
func TestTheDaemonsGitWritesHEADAsAFile(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	gitT(t, repo, "config", "core.preferSymlinkRefs", "true")
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	gitT(t, wt.Path, "checkout", "-q", "--detach")
	if _, err := m.Ensure(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	in, err := m.inspect("alice")
	if err != nil || in.state != wtOK {
		t.Fatalf("inspect after the switch back: %+v, %v", in, err)
	}
	if fi, err := os.Lstat(filepath.Join(in.adminDir, "HEAD")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("HEAD after the switch back: %v, %v: want a file", fi, err)
	}
}

// A sandbox writes its branch directory and its worktree's own git
// directory: a FIFO there (in a ref's place, in HEAD's, or at the end of
// a link) held every git that lists the refs or the worktrees (the
// operator's git gc, git log --all, git worktree list; the daemon's git
// switching any agent's worktree back to its branch) for good. Scrub, at
// a sandbox's end, removes what git would follow out of them or wait on,
// and a git already waiting on a FIFO it removes goes on; a branch that is
// a symbolic ref stays (it stops its agent, naming it), as does what git
// makes there.
func TestScrubLeavesNothingThatHoldsGitUp(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	in, err := m.inspect("alice")
	if err != nil {
		t.Fatal(err)
	}
	refs := filepath.Join(repo, ".git", "refs", "heads", "swarm", "alice")
	gitT(t, wt.Path, "branch", "swarm/alice/kept")
	head := filepath.Join(in.adminDir, "HEAD")
	if err := os.Remove(head); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for _, p := range []string{filepath.Join(refs, "fifo"), head, filepath.Join(outside, "fifo"), filepath.Join(outside, "dir", "x")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A git that reads them all, waiting already (in the kernel's wait
	// for a FIFO's writer) on one of the sandbox's, as the daemon's for
	// another agent would while the session runs.
	waiting := make(chan error, 1)
	started := make(chan int, 1)
	go func() {
		_, err := gitWithinStarted(repo, 30*time.Second, started, "log", "--all", "--oneline")
		waiting <- err
	}()
	pid := <-started
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid)); string(b) == "wait_for_partner" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("git log --all is not waiting on a FIFO")
		}
	}
	for link, target := range map[string]string{
		"link": filepath.Join(outside, "fifo"), "dir": filepath.Join(outside, "dir"),
		"dots": "refs/../../../../../" + filepath.Join(outside, "fifo")[1:], "alias": "refs/heads/main",
	} {
		if err := os.Symlink(target, filepath.Join(refs, link)); err != nil {
			t.Fatal(err)
		}
	}

	if err := m.Scrub(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil && strings.Contains(err.Error(), "still running") {
		t.Errorf("the git waiting on a FIFO before the scrub: %v", err)
	}
	for _, args := range [][]string{{"for-each-ref"}, {"worktree", "list"}, {"gc", "--quiet"}} {
		if out, err := gitWithin(repo, 30*time.Second, args...); err != nil {
			t.Errorf("git %s after the scrub: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ents, err := os.ReadDir(refs)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	// git gc packed the branches: what is left loose is the alias.
	if !slices.Equal(left, []string{"alias"}) {
		t.Errorf("the branch directory holds %q, want the symbolic ref alias only", left)
	}
	for _, b := range []string{"swarm/alice/work", "swarm/alice/kept"} {
		if _, err := gitOut(repo, "rev-parse", "--verify", "-q", b); err != nil {
			t.Errorf("branch %s: %v", b, err)
		}
	}
	if _, err := os.Lstat(head); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("HEAD's FIFO: %v, want it gone", err)
	}
}

// gitWithin runs git in dir in a process group of its own, which it kills
// if git has not ended within limit (a git waiting on a FIFO, and the
// gits it started).
func gitWithin(dir string, limit time.Duration, args ...string) ([]byte, error) {
	return gitWithinStarted(dir, limit, nil, args...)
}

// gitWithinStarted is gitWithin that sends git's pid on started.
func gitWithinStarted(dir string, limit time.Duration, started chan<- int, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		if started != nil {
			close(started)
		}
		return nil, err
	}
	if started != nil {
		started <- cmd.Process.Pid
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-time.After(limit):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return out.Bytes(), fmt.Errorf("still running after %s", limit)
	}
}

// With submodule.recurse in the repository's config (the operator's, as
// git's documentation suggests to whoever uses submodules) and a
// submodule active there (its url recorded, as "git submodule init" in
// the main checkout does), git reset --hard and git checkout recurse into
// the submodule of an agent's worktree, by that submodule's config, which
// the sandbox writes (its git directory is in the worktree, or in the
// worktree's own git directory once absorbed): a filter named there ran as
// the daemon, outside the sandbox, at the reset that puts the branch on a
// task's line. The daemon's git recurses into no submodule.
func TestGitInAWorktreeRecursesIntoNoSubmodule(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ran := plantNested(t, wt.Path)
	writeFile(t, filepath.Join(wt.Path, ".gitmodules"), "[submodule \"sub\"]\n\tpath = sub\n\turl = ./sub\n")
	line := commitAll(t, wt.Path, "the submodule's entry")
	sub := filepath.Join(wt.Path, "sub")
	writeFile(t, filepath.Join(sub, "s.txt"), "s, again\n")
	commitAll(t, sub, "nested, moved on")
	commitAll(t, wt.Path, "the submodule moved on")
	gitT(t, repo, "config", "submodule.sub.url", "./sub")
	gitT(t, repo, "config", "submodule.recurse", "true")
	if err := os.Remove(ran); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}

	if _, err := m.StartLine(ctx, "alice", 1, line, ""); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Fatalf("the daemon's git ran the submodule's filter:\n%s", b)
	}
	if got := gitT(t, wt.Path, "rev-parse", "HEAD"); got != line {
		t.Errorf("HEAD at %s, want the line at %s", got, line)
	}
}

// An agent's own git submodule update, from a url that is a local path,
// clones the submodule into the worktree's own git directory
// (modules/NAME), its objects hard links to the source's, as git clone
// of a local path makes them. The daemon's cleaning of that directory,
// after each session and at a sandbox's end, removed every hard link in
// it, and the submodule lost its objects. What is under modules is the
// submodules' repositories, which the daemon's git never reads (it
// recurses into none): the cleaning leaves it alone.
func TestCleaningAGitDirectoryKeepsItsSubmodules(t *testing.T) {
	ctx := context.Background()
	src := newRepo(t)
	repo := newRepo(t)
	gitT(t, repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", src, "sub")
	commitAll(t, repo, "a submodule")
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	gitT(t, wt.Path, "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init")
	linked := 0
	filepath.WalkDir(filepath.Join(repo, ".git", "worktrees"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil && fi.Sys().(*syscall.Stat_t).Nlink > 1 {
				linked++
			}
		}
		return nil
	})
	if linked == 0 {
		t.Fatal("the submodule's clone made no hard link: the test proves nothing")
	}

	if err := m.Scrub(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StartLine(ctx, "alice", 1, "", "main"); err != nil {
		t.Fatal(err)
	}
	if out, err := gitOut(filepath.Join(wt.Path, "sub"), "fsck", "--no-dangling"); err != nil {
		t.Fatalf("the submodule lost its objects: %v\n%s", err, out)
	}
}

// git 2.20 to 2.30 (swarmd's minimum is 2.20; Debian 11 has 2.30) has no
// GIT_CONFIG_COUNT: a task line's start in a worktree with a submodule
// and something uncommitted failed there, and the agent did not run
// again. Such a git is kept out of the submodules with "-c", and stashes.
func TestALineStartsWithSubmodulesOnAnOlderGit(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	m.git.major, m.git.minor = 2, 30 // what "-c" would do is the same in 2.39
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ran := plantNested(t, wt.Path)
	writeFile(t, filepath.Join(wt.Path, ".gitmodules"), "[submodule \"sub\"]\n\tpath = sub\n\turl = ./sub\n\tignore = none\n")
	writeFile(t, filepath.Join(wt.Path, "dirty.txt"), "x\n")

	if _, err := m.StartLine(ctx, "alice", 1, "", "main"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Fatalf("the daemon's git ran the nested repository's filter:\n%s", b)
	}
	if got := gitT(t, repo, "stash", "list"); !strings.Contains(got, "before task 1") {
		t.Errorf("stash list %q: the line's start stashed nothing", got)
	}
}
