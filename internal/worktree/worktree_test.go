package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestEnsureCreatesWorktree(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	base := gitT(t, repo, "rev-parse", "HEAD")
	if m.BaseCommit() != base {
		t.Fatalf("BaseCommit = %s, want %s", m.BaseCommit(), base)
	}

	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	want := Worktree{Agent: "alice", Path: filepath.Join(repo, ".swarm", "worktrees", "alice"), Branch: "swarm/alice/work", Head: base}
	if wt != want {
		t.Fatalf("Ensure = %+v, want %+v", wt, want)
	}
	if got := gitT(t, wt.Path, "symbolic-ref", "HEAD"); got != "refs/heads/swarm/alice/work" {
		t.Fatalf("worktree HEAD = %s", got)
	}
	if got := gitT(t, repo, "rev-parse", "swarm/alice/work"); got != base {
		t.Fatalf("branch at %s, want %s", got, base)
	}
	if got := readFile(t, filepath.Join(wt.Path, "README.md")); got != "hello\n" {
		t.Fatalf("README in worktree = %q", got)
	}
	// The state dir is excluded: the main worktree stays clean.
	if got := gitT(t, repo, "status", "--porcelain", "--untracked-files=all"); got != "" {
		t.Fatalf("main worktree not clean: %q", got)
	}
	if head, err := m.Head(ctx, "alice"); err != nil || head != base {
		t.Fatalf("Head = %s, %v; want %s", head, err, base)
	}
	st, err := m.Status(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists || st.Dirty || st.Ahead != 0 || st.Behind != 0 || st.Head != base || st.Problem != "" {
		t.Fatalf("Status = %+v", st)
	}
}

func TestEnsureReusesWorktreeAfterRestart(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	wt, err := openT(t, repo).Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "work.txt"), "done\n")
	c1 := commitAll(t, wt.Path, "work 1")
	writeFile(t, filepath.Join(wt.Path, "README.md"), "edited, not committed\n")
	writeFile(t, filepath.Join(wt.Path, "notes.txt"), "untracked\n")

	m2 := openT(t, repo) // a daemon restart
	wt2, err := m2.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if wt2.Head != c1 || wt2.Path != wt.Path {
		t.Fatalf("Ensure after restart = %+v, want head %s at %s", wt2, c1, wt.Path)
	}
	if got := readFile(t, filepath.Join(wt.Path, "README.md")); got != "edited, not committed\n" {
		t.Fatalf("uncommitted change lost: README = %q", got)
	}
	if got := readFile(t, filepath.Join(wt.Path, "notes.txt")); got != "untracked\n" {
		t.Fatalf("untracked file lost: %q", got)
	}
	st, err := m2.Status(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(st.DirtyFiles)
	if !st.Dirty || !slices.Equal(st.DirtyFiles, []string{"README.md", "notes.txt"}) || st.Ahead != 1 || st.Head != c1 {
		t.Fatalf("Status = %+v", st)
	}
	if got := worktreePaths(t, repo); len(got) != 1 {
		t.Fatalf("worktrees = %v, want one", got)
	}
}

func TestEnsureConcurrent32(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			agent := fmt.Sprintf("agent-%02d", i)
			wt, err := m.Ensure(ctx, agent)
			if err == nil && wt.Branch != "swarm/"+agent+"/work" {
				err = fmt.Errorf("%s: branch %s", agent, wt.Branch)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	paths := worktreePaths(t, repo)
	if len(paths) != n {
		t.Fatalf("git worktree list shows %d linked worktrees, want %d: %v", len(paths), n, paths)
	}
	for i := range n {
		agent := fmt.Sprintf("agent-%02d", i)
		if got := gitT(t, m.Path(agent), "symbolic-ref", "--short", "HEAD"); got != "swarm/"+agent+"/work" {
			t.Errorf("%s is on %s", agent, got)
		}
	}
	list, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("List has %d entries, want %d", len(list), n)
	}
}

// Two Managers on one repository (two daemons with different state dirs)
// exclude each other through the flock on the git directory.
func TestEnsureConcurrentManagersShareRepoLock(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m1 := openT(t, repo)
	m2 := openT(t, repo, func(o *Options) { o.StateDir = filepath.Join(t.TempDir(), "state") })
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		for _, m := range []*Manager{m1, m2} {
			wg.Go(func() {
				_, err := m.Ensure(ctx, fmt.Sprintf("a%d", i))
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			// Both managers use the branch swarm/a/workN: exactly one of each
			// pair may check it out; the other must fail cleanly.
			if !strings.Contains(err.Error(), "already checked out") && !strings.Contains(err.Error(), "already used by worktree") {
				t.Errorf("unexpected error: %v", err)
			}
			failed++
		}
	}
	if failed != 8 {
		t.Fatalf("%d Ensure calls failed, want 8 (one per shared branch)", failed)
	}
	if got := len(worktreePaths(t, repo)); got != 8 {
		t.Fatalf("%d worktrees registered, want 8", got)
	}
	// No half-written registrations: every admin dir is complete.
	entries, err := os.ReadDir(filepath.Join(repo, ".git", "worktrees"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		for _, f := range []string{"gitdir", "HEAD", "commondir"} {
			if _, err := os.Stat(filepath.Join(repo, ".git", "worktrees", e.Name(), f)); err != nil {
				t.Errorf("registration %s incomplete: %v", e.Name(), err)
			}
		}
	}
}

func TestVerifyRecreatesDeletedWorktree(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	wt, err := openT(t, repo).Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "work.txt"), "committed work\n")
	c1 := commitAll(t, wt.Path, "work")
	if err := os.RemoveAll(wt.Path); err != nil {
		t.Fatal(err)
	}

	m := openT(t, repo)
	got, err := m.Verify(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.Head != c1 {
		t.Fatalf("recreated at %s, want %s", got.Head, c1)
	}
	if s := readFile(t, filepath.Join(wt.Path, "work.txt")); s != "committed work\n" {
		t.Fatalf("work.txt = %q", s)
	}
	if paths := worktreePaths(t, repo); len(paths) != 1 {
		t.Fatalf("worktrees = %v, want exactly the recreated one", paths)
	}

	// A healthy worktree is left as it is.
	writeFile(t, filepath.Join(wt.Path, "scratch"), "x")
	if _, err := m.Verify(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, filepath.Join(wt.Path, "scratch")); s != "x" {
		t.Fatal("Verify touched a healthy worktree")
	}
}

func TestVerifyFailsWhenBranchIsGoneToo(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(wt.Path); err != nil {
		t.Fatal(err)
	}
	gitT(t, repo, "worktree", "prune")
	gitT(t, repo, "branch", "-D", "swarm/alice/work")
	_, err = m.Verify(ctx, "alice")
	if !errors.Is(err, ErrBranchMissing) {
		t.Fatalf("Verify = %v, want ErrBranchMissing", err)
	}
	if _, err := os.Stat(wt.Path); !os.IsNotExist(err) {
		t.Fatalf("Verify recreated the worktree from nothing: %v", err)
	}
}

// An agent killed in the middle of a rebase leaves HEAD detached; the
// worktree is still the agent's, and Prune must not drop it.
func TestRebaseInProgressIsTheAgentsWorktree(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "README.md"), "agent\n")
	commitAll(t, wt.Path, "agent edit")
	writeFile(t, filepath.Join(repo, "README.md"), "main\n")
	commitAll(t, repo, "main edit")
	if _, err := gitOut(wt.Path, "rebase", "main"); err == nil {
		t.Fatal("rebase should stop on the conflict")
	}

	if _, err := m.Verify(ctx, "alice"); err != nil {
		t.Fatalf("Verify during a rebase: %v", err)
	}
	err = m.Prune(ctx, "alice")
	if !errors.Is(err, ErrHasWork) || !strings.Contains(err.Error(), "rebase") {
		t.Fatalf("Prune during a rebase = %v, want ErrHasWork", err)
	}
	gitT(t, wt.Path, "rebase", "--abort")
}

func TestPruneOnlyWithoutWork(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}

	writeFile(t, filepath.Join(wt.Path, "work.txt"), "wip\n")
	err = m.Prune(ctx, "alice")
	var hw *HasWorkError
	if !errors.As(err, &hw) || !errors.Is(err, ErrHasWork) || hw.DirtyFiles != 1 || hw.Unmerged != 0 {
		t.Fatalf("Prune on a dirty worktree = %v", err)
	}
	if !strings.Contains(err.Error(), "1 uncommitted file") {
		t.Fatalf("message does not say why: %v", err)
	}
	if s := readFile(t, filepath.Join(wt.Path, "work.txt")); s != "wip\n" {
		t.Fatal("dirty file lost")
	}

	c1 := commitAll(t, wt.Path, "work")
	err = m.Prune(ctx, "alice")
	if !errors.As(err, &hw) || hw.DirtyFiles != 0 || hw.Unmerged != 1 ||
		!strings.Contains(err.Error(), "1 commit not merged into base_ref HEAD") {
		t.Fatalf("Prune with an unmerged commit = %v", err)
	}
	if !branchExists(repo, "swarm/alice/work") || len(worktreePaths(t, repo)) != 1 {
		t.Fatal("Prune removed unmerged work")
	}

	// Merged into the base after Open: nothing left to lose.
	gitT(t, repo, "merge", "-q", "--ff-only", "swarm/alice/work")
	if err := m.Prune(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(wt.Path); !os.IsNotExist(err) {
		t.Fatalf("worktree dir still there: %v", err)
	}
	if branchExists(repo, "swarm/alice/work") || len(worktreePaths(t, repo)) != 0 {
		t.Fatal("branch or registration left behind")
	}
	if got := gitT(t, repo, "rev-parse", "HEAD"); got != c1 {
		t.Fatalf("main at %s, want the merged %s", got, c1)
	}
	if err := m.Prune(ctx, "alice"); !errors.Is(err, ErrNoWorktree) {
		t.Fatalf("second Prune = %v, want ErrNoWorktree", err)
	}

	// A fresh agent has nothing to lose.
	if _, err := m.Ensure(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	if err := m.Prune(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
}

func TestPruneKeepsUnmergedBranchOfDeletedWorktree(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt.Path, "b.txt"), "b\n")
	c := commitAll(t, wt.Path, "bob's work")
	if err := os.RemoveAll(wt.Path); err != nil {
		t.Fatal(err)
	}
	if err := m.Prune(ctx, "bob"); !errors.Is(err, ErrHasWork) {
		t.Fatalf("Prune = %v, want ErrHasWork", err)
	}
	if got := gitT(t, repo, "rev-parse", "swarm/bob/work"); got != c {
		t.Fatalf("branch at %s, want %s", got, c)
	}
}

func TestOpenErrors(t *testing.T) {
	fakeGit := func(t *testing.T, version string) string {
		p := filepath.Join(t.TempDir(), "git")
		writeFile(t, p, "#!/bin/sh\necho 'git version "+version+"'\n")
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name  string
		setup func(t *testing.T) Options
		want  error
		msg   string // substring; "<repo>" is replaced by the repo path
	}{
		{"not a repo", func(t *testing.T) Options { return Options{Repo: t.TempDir()} },
			ErrNotRepo, "<repo> is not a git repository"},
		{"missing dir", func(t *testing.T) Options { return Options{Repo: filepath.Join(t.TempDir(), "nope")} },
			ErrNotRepo, "<repo> is not a git repository: no such directory"},
		{"bare", func(t *testing.T) Options {
			d := t.TempDir()
			gitT(t, d, "init", "-q", "--bare")
			return Options{Repo: d}
		}, ErrBareRepo, "<repo> is a bare repository"},
		{"no commits", func(t *testing.T) Options {
			d := t.TempDir()
			gitT(t, d, "init", "-q")
			return Options{Repo: d}
		}, ErrNoCommits, "<repo> has no commits yet"},
		{"no commits with base_ref", func(t *testing.T) Options {
			d := t.TempDir()
			gitT(t, d, "init", "-q")
			return Options{Repo: d, BaseRef: "main"}
		}, ErrNoCommits, "no commits"},
		{"detached HEAD", func(t *testing.T) Options {
			d := newRepo(t)
			gitT(t, d, "checkout", "-q", "--detach")
			return Options{Repo: d}
		}, ErrDetachedHead, "detached HEAD at "},
		{"unborn HEAD", func(t *testing.T) Options {
			d := newRepo(t)
			gitT(t, d, "checkout", "-q", "--orphan", "fresh")
			return Options{Repo: d}
		}, ErrUnbornHead, "branch fresh has no commits"},
		{"base_ref not found", func(t *testing.T) Options {
			return Options{Repo: newRepo(t), BaseRef: "releases/v9"}
		}, ErrBaseRefNotFound, `"releases/v9"`},
		{"git missing", func(t *testing.T) Options {
			return Options{Repo: newRepo(t), Git: filepath.Join(t.TempDir(), "no-git")}
		}, ErrGitMissing, "install git 2.20 or newer"},
		{"git too old", func(t *testing.T) Options {
			return Options{Repo: newRepo(t), Git: fakeGit(t, "2.19.1")}
		}, ErrGitTooOld, "found 2.19.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.setup(t)
			opts.StateDir = filepath.Join(t.TempDir(), "state")
			m, err := Open(context.Background(), opts)
			if m != nil || !errors.Is(err, tt.want) {
				t.Fatalf("Open = %v, %v; want %v", m, err, tt.want)
			}
			if msg := strings.ReplaceAll(tt.msg, "<repo>", opts.Repo); !strings.Contains(err.Error(), msg) {
				t.Fatalf("error %q does not contain %q", err, msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestOpenResolvesBaseRefOnce(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	first := gitT(t, repo, "rev-parse", "HEAD")
	gitT(t, repo, "tag", "-a", "-m", "release", "v1")
	writeFile(t, filepath.Join(repo, "two.txt"), "2\n")
	second := commitAll(t, repo, "second")

	m := openT(t, repo, func(o *Options) { o.BaseRef = "v1" }) // annotated tag: peeled to the commit
	if m.BaseCommit() != first {
		t.Fatalf("BaseCommit = %s, want %s", m.BaseCommit(), first)
	}
	m = openT(t, repo)
	writeFile(t, filepath.Join(repo, "three.txt"), "3\n")
	commitAll(t, repo, "third") // after Open: new branches still start at second
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if wt.Head != second {
		t.Fatalf("new branch at %s, want the base resolved at Open %s", wt.Head, second)
	}
	st, err := m.Status(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ahead != 0 || st.Behind != 0 {
		t.Fatalf("ahead/behind vs base commit = %d/%d, want 0/0", st.Ahead, st.Behind)
	}
}

func TestForeignDirLeftAlone(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		make   func(t *testing.T, repo, path string)
		reason string
	}{
		{"plain directory", func(t *testing.T, repo, path string) {
			writeFile(t, filepath.Join(path, "precious.txt"), "keep me\n")
		}, "not a git worktree"},
		{"regular file", func(t *testing.T, repo, path string) {
			writeFile(t, path, "a file\n")
		}, "not a directory"},
		{"repository of its own", func(t *testing.T, repo, path string) {
			writeFile(t, filepath.Join(path, "x.txt"), "x\n")
			gitT(t, path, "init", "-q")
		}, "a repository of its own"},
		{"worktree of another repository", func(t *testing.T, repo, path string) {
			other := newRepo(t)
			gitT(t, other, "worktree", "add", "-q", "-b", "swarm/alice/work", path)
		}, "a worktree of another repository"},
		{"worktree on another branch", func(t *testing.T, repo, path string) {
			gitT(t, repo, "worktree", "add", "-q", "-b", "feature", path)
		}, "on branch feature, want swarm/alice/work"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := newRepo(t)
			m := openT(t, repo)
			path := m.Path("alice")
			tt.make(t, repo, path)
			before := snapshot(t, path)

			_, err := m.Ensure(ctx, "alice")
			var fe *ForeignDirError
			if !errors.As(err, &fe) || !errors.Is(err, ErrForeignDir) || fe.Path != path || !strings.Contains(fe.Reason, tt.reason) {
				t.Fatalf("Ensure = %v, want ErrForeignDir (%s)", err, tt.reason)
			}
			if _, err := m.Verify(ctx, "alice"); !errors.Is(err, ErrForeignDir) {
				t.Fatalf("Verify = %v, want ErrForeignDir", err)
			}
			if err := m.Prune(ctx, "alice"); !errors.Is(err, ErrForeignDir) {
				t.Fatalf("Prune = %v, want ErrForeignDir", err)
			}
			if after := snapshot(t, path); !mapsEqual(before, after) {
				t.Fatalf("directory changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// An empty directory holds nothing to lose: git fills it.
func TestEnsureUsesEmptyDir(t *testing.T) {
	repo := newRepo(t)
	m := openT(t, repo)
	if err := os.MkdirAll(m.Path("alice"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, filepath.Join(m.Path("alice"), "README.md")); s != "hello\n" {
		t.Fatalf("README = %q", s)
	}
}

func TestExcludeAddedOnce(t *testing.T) {
	repo := newRepo(t)
	exclude := filepath.Join(repo, ".git", "info", "exclude")
	writeFile(t, exclude, "# user's\n*.log") // no trailing newline
	openT(t, repo)
	openT(t, repo)
	if got, want := readFile(t, exclude), "# user's\n*.log\n# swarmd state directory\n/.swarm/\n"; got != want {
		t.Fatalf("exclude = %q, want %q", got, want)
	}

	nested := newRepo(t)
	openT(t, nested, func(o *Options) { o.StateDir = filepath.Join(nested, "var", "swarm") })
	if got := readFile(t, filepath.Join(nested, ".git", "info", "exclude")); !strings.HasSuffix(got, "\n/var/swarm/\n") {
		t.Fatalf("exclude = %q", got)
	}

	outside := newRepo(t)
	before := readFile(t, filepath.Join(outside, ".git", "info", "exclude"))
	openT(t, outside, func(o *Options) { o.StateDir = filepath.Join(t.TempDir(), "state") })
	if after := readFile(t, filepath.Join(outside, ".git", "info", "exclude")); after != before {
		t.Fatalf("exclude changed for a state dir outside the repo: %q", after)
	}
}

func TestBadAgentName(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	for _, name := range []string{"../x", "", "Alice", "a/b", "-a", "1a", "a b", "a.", strings.Repeat("a", 33)} {
		if _, err := m.Ensure(ctx, name); !errors.Is(err, ErrBadName) {
			t.Errorf("Ensure(%q) = %v, want ErrBadName", name, err)
		}
		if _, err := m.Verify(ctx, name); !errors.Is(err, ErrBadName) {
			t.Errorf("Verify(%q) = %v", name, err)
		}
		if _, err := m.Status(ctx, name); !errors.Is(err, ErrBadName) {
			t.Errorf("Status(%q) = %v", name, err)
		}
		if _, err := m.Head(ctx, name); !errors.Is(err, ErrBadName) {
			t.Errorf("Head(%q) = %v", name, err)
		}
		if _, err := m.RecentCommits(ctx, name, 3); !errors.Is(err, ErrBadName) {
			t.Errorf("RecentCommits(%q) = %v", name, err)
		}
		if err := m.Prune(ctx, name); !errors.Is(err, ErrBadName) {
			t.Errorf("Prune(%q) = %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(repo, ".swarm", "x")); !os.IsNotExist(err) {
		t.Fatalf("path traversal created %v", err)
	}
	if _, err := m.Ensure(ctx, "a"+strings.Repeat("-", 31)); err != nil {
		t.Fatalf("32-character name refused: %v", err)
	}
}

func TestStatusListAndRecentCommits(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	writeFile(t, filepath.Join(repo, "two.txt"), "2\n")
	commitAll(t, repo, "second")
	gitT(t, repo, "branch", "swarm/old/work", "HEAD~1") // started from an older base
	gitT(t, repo, "branch", "swarm/Not_An_Agent")
	m := openT(t, repo)

	alice, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var hashes []string
	for _, s := range []string{"one", "two", "three"} {
		writeFile(t, filepath.Join(alice.Path, s), s)
		hashes = append(hashes, commitAll(t, alice.Path, s+"\n\nbody of "+s))
	}
	commits, err := m.RecentCommits(ctx, "alice", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []Commit{{hashes[2], "three"}, {hashes[1], "two"}}
	if !slices.Equal(commits, want) {
		t.Fatalf("RecentCommits = %v, want %v", commits, want)
	}

	bob, err := m.Ensure(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(bob.Path); err != nil {
		t.Fatal(err)
	}

	list, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range list {
		got = append(got, fmt.Sprintf("%s exists=%v ahead=%d behind=%d", st.Agent, st.Exists, st.Ahead, st.Behind))
	}
	wantList := []string{
		"alice exists=true ahead=3 behind=0",
		"bob exists=false ahead=0 behind=0",
		"old exists=false ahead=0 behind=1",
	}
	if !slices.Equal(got, wantList) {
		t.Fatalf("List =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantList, "\n"))
	}
	if _, err := m.Status(ctx, "nobody"); !errors.Is(err, ErrNoWorktree) {
		t.Fatalf("Status(nobody) = %v, want ErrNoWorktree", err)
	}
	if _, err := m.Head(ctx, "bob"); !errors.Is(err, ErrNoWorktree) {
		t.Fatalf("Head of a deleted worktree = %v, want ErrNoWorktree", err)
	}
}

func TestBigRepoStatus(t *testing.T) {
	ctx := context.Background()
	repo := newBigRepo(t, 5000)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(wt.Path, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && filepath.Base(filepath.Dir(path)) != ".git" {
			files++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if files != 5001 { // 5,000 and the .git link
		t.Fatalf("worktree has %d files, want 5001", files)
	}
	st, err := m.Status(ctx, "big")
	if err != nil || st.Dirty {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	writeFile(t, filepath.Join(wt.Path, "pkg042", "f4242.go"), "changed\n")
	writeFile(t, filepath.Join(wt.Path, "new dir", "with space.txt"), "new\n")
	st, err = m.Status(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"pkg042/f4242.go", "new dir/"}; !st.Dirty || !slices.Equal(st.DirtyFiles, want) {
		t.Fatalf("DirtyFiles = %q, want %q", st.DirtyFiles, want)
	}
	if err := m.Prune(ctx, "big"); !errors.Is(err, ErrHasWork) {
		t.Fatalf("Prune = %v, want ErrHasWork", err)
	}
}

func TestEnsureCancelled(t *testing.T) {
	repo := newRepo(t)
	m := openT(t, repo)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Ensure(ctx, "alice"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ensure = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(m.Path("alice")); !os.IsNotExist(err) || branchExists(repo, "swarm/alice/work") {
		t.Fatal("cancelled Ensure left a worktree or branch")
	}
}

// TestEnsureRefusesBranchCheckedOutElsewhere: as "git worktree add" would,
// Ensure refuses an agent whose branch is checked out in another worktree,
// and leaves nothing behind.
func TestEnsureRefusesBranchCheckedOutElsewhere(t *testing.T) {
	repo := newRepo(t)
	gitT(t, repo, "switch", "-q", "-c", "swarm/alice/work") // the agent's branch, checked out in the main worktree
	m := openT(t, repo)
	_, err := m.Ensure(context.Background(), "alice")
	if !errors.Is(err, ErrCheckedOut) || !strings.Contains(err.Error(), "swarm/alice/work is already checked out at "+m.repo) {
		t.Fatalf("Ensure = %v, want ErrCheckedOut naming the main worktree", err)
	}
	if _, err := os.Stat(m.Path("alice")); !os.IsNotExist(err) {
		t.Fatal("refused Ensure left a directory")
	}
	if entries, _ := os.ReadDir(filepath.Join(m.commonDir, "worktrees")); len(entries) != 0 {
		t.Fatalf("refused Ensure left registrations: %v", entries)
	}
}

func TestGitErrorCarriesCommandAndStderr(t *testing.T) {
	repo := newRepo(t)
	gitT(t, repo, "switch", "-q", "-c", "swarm/alice/work")
	m := openT(t, repo)
	_, err := m.git.run(context.Background(), repo, "worktree", "add", "--quiet", "--no-checkout", m.Path("alice"), "swarm/alice/work")
	var gerr *GitError
	if !errors.As(err, &gerr) {
		t.Fatalf("git worktree add = %v, want a GitError", err)
	}
	if gerr.ExitCode != 128 || !strings.HasPrefix(gerr.Error(), "git worktree add --quiet --no-checkout "+m.Path("alice")+" swarm/alice/work: exit 128: fatal: ") ||
		!strings.Contains(gerr.Error(), "already checked out") {
		t.Fatalf("GitError = %q (exit %d)", gerr.Error(), gerr.ExitCode)
	}
}

func TestParsePorcelainV2(t *testing.T) {
	out := "# branch.oid abc\x00" +
		"1 .M N... 100644 100644 100644 a a file with space.go\x00" +
		"2 R. N... 100644 100644 100644 a a R100 new.go\x00old.go\x00" +
		"u UU N... 100644 100644 100644 100644 a b c conflict.go\x00" +
		"? untracked/\x00"
	want := []string{"file with space.go", "new.go", "conflict.go", "untracked/"}
	if got := parsePorcelainV2(out); !slices.Equal(got, want) {
		t.Fatalf("parsePorcelainV2 = %q, want %q", got, want)
	}
}

func TestCommitsBetween(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	wt, err := m.Ensure(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	before := wt.Head
	for i := 0; i < 3; i++ {
		writeFile(t, filepath.Join(wt.Path, fmt.Sprintf("f%d.txt", i)), "x")
		commitAll(t, wt.Path, fmt.Sprintf("commit %d", i))
	}
	after, err := m.Head(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.CommitsBetween(ctx, before, after); err != nil || n != 3 {
		t.Errorf("CommitsBetween = %d, %v; want 3", n, err)
	}
	if n, err := m.CommitsBetween(ctx, after, after); err != nil || n != 0 {
		t.Errorf("same head = %d, %v", n, err)
	}
}
