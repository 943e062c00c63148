package merge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/swarmd/swarmd/internal/worktree"
)

// This file is the queue's git plumbing: every git command the queue runs.
// Changes go through the git CLI: merge-tree --write-tree, commit-tree and
// update-ref with an old value are what the design rests on, and go-git has
// neither a real three-way merge nor a compare-and-swap that git's own ref
// locking honours. Refs are read with go-git, in-process.

// mergeTreeMajor.mergeTreeMinor is the first git with merge-tree --write-tree.
const (
	mergeTreeMajor = 2
	mergeTreeMinor = 38
	gitWaitDelay   = 5 * time.Second
	// ffTimeout bounds a fast-forward of a person's checkout, which the
	// daemon's stop does not cut off (repo.fastForward).
	ffTimeout = time.Minute
)

// errMoved: the target branch no longer points where the candidate was
// built: rebuild on the new target, never overwrite.
var errMoved = errors.New("target branch moved")

// repo runs git on the repository the queue integrates into.
type repo struct {
	bin       string
	env       []string // worktree.GitEnv of the daemon's environment
	commonDir string   // the git directory shared by all worktrees (real path)
	mainWT    string   // the main working tree
	ident     []string // GIT_AUTHOR_* and GIT_COMMITTER_* of the commits the queue makes
	// managed holds the daemon's own worktrees (StateDir/worktrees): the
	// agents', whose HEAD, index and .git link their sandboxes write, and
	// the queue's. None of them is a person's checkout of the target.
	managed []string
}

func openRepo(ctx context.Context, dir, bin string, ident []string) (*repo, error) {
	if bin == "" {
		bin = "git"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("merge queue: %w (%v): install git %d.%d or newer", worktree.ErrGitMissing, err, mergeTreeMajor, mergeTreeMinor)
	}
	r := &repo{bin: path, env: worktree.GitEnv(os.Environ()), ident: ident}
	out, err := r.run(ctx, "", nil, "version")
	if err != nil {
		return nil, fmt.Errorf("merge queue: check git version: %w", err)
	}
	if major, minor, ok := worktree.ParseGitVersion(out); !ok || major < mergeTreeMajor || (major == mergeTreeMajor && minor < mergeTreeMinor) {
		return nil, fmt.Errorf("merge queue: %w: %s at %s; the queue needs %d.%d or newer (git merge-tree --write-tree)",
			worktree.ErrGitTooOld, strings.TrimSpace(out), path, mergeTreeMajor, mergeTreeMinor)
	}
	out, err = r.run(ctx, dir, nil, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return nil, fmt.Errorf("merge queue: open repository %s: %w", dir, err)
	}
	if r.commonDir, err = filepath.EvalSymlinks(strings.TrimSpace(out)); err != nil {
		return nil, fmt.Errorf("merge queue: open repository %s: %w", dir, err)
	}
	if r.mainWT, err = r.mainWorktree(ctx); err != nil {
		return nil, fmt.Errorf("merge queue: open repository %s: %w", dir, err)
	}
	return r, nil
}

// mainWorktree is the first entry of "git worktree list": the main working
// tree, whose HEAD is commonDir/HEAD.
func (r *repo) mainWorktree(ctx context.Context) (string, error) {
	out, err := r.run(ctx, r.commonDir, nil, "worktree", "list", "--porcelain", "-z")
	if err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(out, "\x00")
	path, ok := strings.CutPrefix(first, "worktree ")
	if !ok {
		return "", fmt.Errorf("git worktree list: unexpected output %q", first)
	}
	return path, nil
}

// run runs git (with -C dir unless dir is empty) with env added to the
// daemon's, and returns its standard output. A failure is a
// *worktree.GitError, as the worktree package reports them. Processes stay
// in the daemon's process group (no Setpgid): see package proc.
func (r *repo) run(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := r.command(ctx, dir, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	gerr := &worktree.GitError{Args: args, Dir: dir, ExitCode: -1, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		gerr.Err = ctx.Err()
	case errors.As(err, &exit) && exit.Exited():
		gerr.ExitCode = exit.ExitCode()
	}
	return stdout.String(), gerr
}

// command is git (with -C dir unless dir is empty) with env added to the
// daemon's, with worktree.GitOptions (no hooks: its own worktree's, and a
// person's checkout it fast-forwards, where a hook would run as the
// daemon, with files the merged work brought), stopped with SIGTERM when
// ctx ends.
func (r *repo) command(ctx context.Context, dir string, env []string, args ...string) *exec.Cmd {
	full := append([]string{}, worktree.GitOptions...)
	if dir != "" {
		full = append(full, "-C", dir)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, r.bin, full...)
	cmd.Env = r.env
	if len(env) > 0 {
		cmd.Env = append(append(make([]string, 0, len(r.env)+len(env)), r.env...), env...)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = gitWaitDelay
	return cmd
}

func exitCode(err error) int {
	var gerr *worktree.GitError
	if errors.As(err, &gerr) {
		return gerr.ExitCode
	}
	return -1
}

// branchTip reads where branch points with go-git, in-process: it runs for
// every enqueue and step, and a git process per read would cost more than
// the queue's own work. A fresh storage handle each time sees refs and packs
// written since. ok is false when go-git cannot tell (a missing branch, a
// ref format it does not read): the caller asks git.
func (r *repo) branchTip(branch string, withTree bool) (commit, tree string, ok bool) {
	st := filesystem.NewStorage(osfs.New(r.commonDir), cache.NewObjectLRU(cache.MiByte))
	ref, err := storer.ResolveReference(st, plumbing.NewBranchReferenceName(branch))
	if err != nil || ref.Type() != plumbing.HashReference {
		return "", "", false
	}
	if !withTree {
		return ref.Hash().String(), "", true
	}
	c, err := object.GetCommit(st, ref.Hash())
	if err != nil {
		return "", "", false
	}
	return ref.Hash().String(), c.TreeHash.String(), true
}

// branchCommit is the commit branch points at.
func (r *repo) branchCommit(ctx context.Context, branch string) (string, error) {
	if c, _, ok := r.branchTip(branch, false); ok {
		return c, nil
	}
	out, err := r.run(ctx, r.commonDir, nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}")
	if err != nil {
		if exitCode(err) == 1 {
			return "", fmt.Errorf("branch %s: %w", branch, ErrNoCommit)
		}
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// tip is where branch points and that commit's tree, read together.
func (r *repo) tip(ctx context.Context, branch string) (commit, tree string, err error) {
	if c, t, ok := r.branchTip(branch, true); ok {
		return c, t, nil
	}
	ref := "refs/heads/" + branch
	out, err := r.run(ctx, r.commonDir, nil, "log", "-1", "--no-walk", "--format=%H %T", ref, "--")
	if err != nil {
		if _, serr := r.run(ctx, r.commonDir, nil, "show-ref", "--verify", "--quiet", ref); exitCode(serr) == 1 {
			return "", "", fmt.Errorf("branch %s: %w", branch, ErrNoTarget)
		}
		return "", "", err
	}
	commit, tree, ok := strings.Cut(strings.TrimSpace(out), " ")
	if !ok {
		return "", "", fmt.Errorf("read branch %s: unexpected git log output %q", branch, out)
	}
	return commit, tree, nil
}

// mergeTree merges theirs into ours without touching any working tree or
// ref: the merged tree, or the paths that conflict. A refusal other than a
// conflict (unrelated histories, a commit that is gone) is an
// *unmergeableError: nothing the queue can retry its way out of.
func (r *repo) mergeTree(ctx context.Context, ours, theirs string) (tree string, conflicts []string, err error) {
	out, err := r.run(ctx, r.commonDir, nil, "merge-tree", "--write-tree", "--name-only", "-z", "--end-of-options", ours, theirs)
	switch code := exitCode(err); {
	case err == nil, code == 1:
		// Output: TREE NUL, then with conflicts each path NUL, an empty
		// field, and git's messages.
		fields := strings.Split(out, "\x00")
		for _, f := range fields[1:] {
			if f == "" {
				break
			}
			conflicts = append(conflicts, f)
		}
		if code == 1 && len(conflicts) == 0 {
			return "", nil, fmt.Errorf("git merge-tree: exit 1 without conflicting paths: %q", out)
		}
		return fields[0], conflicts, nil
	case code > 1:
		return "", nil, &unmergeableError{err: err}
	default:
		return "", nil, err
	}
}

// commitTree makes a commit of tree with parents and msg, authored as env
// says (the queue's identity unless env overrides it).
func (r *repo) commitTree(ctx context.Context, tree, msg string, env []string, parents ...string) (string, error) {
	args := []string{"commit-tree", "-m", msg}
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	args = append(args, tree)
	out, err := r.run(ctx, r.commonDir, append(append([]string(nil), r.ident...), env...), args...)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// updateRef moves branch from old to new only if it still points at old,
// git's compare-and-swap under the ref's lock. A branch that moved is
// errMoved.
//
// It is not cut off by ctx's end (the daemon's stop), as fastForward is
// not: git ended between its write of the ref and its exit has moved the
// target while the queue is told it did not, and forgets its move as one
// not made; the look at the end of a session, which the same stop
// brings, then reported the queue's own merge as someone else's. It takes
// the ref's lock and writes it: it runs to its end, within ffTimeout.
func (r *repo) updateRef(ctx context.Context, branch, newC, oldC, msg string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ffTimeout)
	defer cancel()
	_, err := r.run(ctx, r.commonDir, nil, "update-ref", "-m", msg, "refs/heads/"+branch, newC, oldC)
	if err == nil {
		return nil
	}
	switch cur, _, terr := r.tip(ctx, branch); {
	case terr != nil:
	case cur == newC:
		// git failed after its write of the ref (ended at ffTimeout, say):
		// the move is made, and the queue's, not someone else's.
		return nil
	case cur != oldC:
		return fmt.Errorf("%s is at %s now, not %s: %w", branch, short(cur), short(oldC), errMoved)
	}
	return err
}

// treeOf is commit's tree.
func (r *repo) treeOf(ctx context.Context, commit string) (string, error) {
	out, err := r.run(ctx, r.commonDir, nil, "rev-parse", "--verify", "--end-of-options", commit+"^{tree}")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// hasCommit reports whether commit is in this repository.
func (r *repo) hasCommit(ctx context.Context, commit string) (bool, error) {
	_, err := r.run(ctx, r.commonDir, nil, "cat-file", "-e", "--end-of-options", commit+"^{commit}")
	switch {
	case err == nil:
		return true, nil
	case exitCode(err) > 0:
		return false, nil
	}
	return false, err
}

// ancestry reports whether a is an ancestor of b (or b itself).
func (r *repo) isAncestor(ctx context.Context, a, b string) (bool, error) {
	_, err := r.run(ctx, r.commonDir, nil, "merge-base", "--is-ancestor", a, b)
	switch {
	case err == nil:
		return true, nil
	case exitCode(err) == 1:
		return false, nil
	}
	return false, err
}

// mergeBases are every best common ancestor of a and b (`git merge-base
// --all`): none for unrelated histories, more than one for a criss-cross.
func (r *repo) mergeBases(ctx context.Context, a, b string) ([]string, error) {
	out, err := r.run(ctx, r.commonDir, nil, "merge-base", "--all", "--end-of-options", a, b)
	switch {
	case exitCode(err) == 1 && strings.TrimSpace(out) == "":
		return nil, nil
	case err != nil:
		return nil, err
	}
	return strings.Fields(out), nil
}

// mergesIn lists the merge commits in base..head, newest first.
func (r *repo) mergesIn(ctx context.Context, base, head string) ([]string, error) {
	out, err := r.run(ctx, r.commonDir, nil, "rev-list", "--merges", "--topo-order", "--end-of-options", base+".."+head, "--")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// treeDiff lists the paths whose content differs between trees a and b.
func (r *repo) treeDiff(ctx context.Context, a, b string) ([]string, error) {
	out, err := r.run(ctx, r.commonDir, nil, "diff-tree", "-r", "--name-only", "-z", "--no-renames", "--end-of-options", a, b)
	if err != nil {
		return nil, err
	}
	return strings.FieldsFunc(out, func(c rune) bool { return c == 0 }), nil
}

// commitInfo is one commit of a branch, for a squash commit's message.
type commitInfo struct {
	author  []string // GIT_AUTHOR_NAME, _EMAIL, _DATE
	subject string
}

// commitsBetween lists the commits in base..head, newest first, without
// merges.
func (r *repo) commitsBetween(ctx context.Context, base, head string) ([]commitInfo, error) {
	out, err := r.run(ctx, r.commonDir, nil, "log", "--no-merges", "-z", "--format=%an%x1f%ae%x1f%ad%x1f%s",
		"--date=raw", "--end-of-options", base+".."+head, "--")
	if err != nil {
		return nil, err
	}
	var cs []commitInfo
	for _, rec := range strings.Split(out, "\x00") {
		f := strings.SplitN(rec, "\x1f", 4)
		if len(f) != 4 {
			continue
		}
		cs = append(cs, commitInfo{
			author:  []string{"GIT_AUTHOR_NAME=" + f[0], "GIT_AUTHOR_EMAIL=" + f[1], "GIT_AUTHOR_DATE=" + f[2]},
			subject: f[3],
		})
	}
	return cs, nil
}

// checkout is a working tree where a branch is checked out.
type checkout struct {
	path   string
	gitDir string // its own git directory (commonDir for the main one)
	busy   string // an operation in progress there (a merge, a rebase, ...), or ""
}

// checkoutsOf finds the working trees that have branch checked out, or are
// rebasing or bisecting it, as git itself does before it lets a branch be
// moved. It reads the HEAD files directly: it runs before every merge and
// a git call per worktree would cost more than the merge.
func (r *repo) checkoutsOf(branch string) ([]checkout, error) {
	ref := "refs/heads/" + branch
	cands := []checkout{{path: r.mainWT, gitDir: r.commonDir}}
	ents, err := os.ReadDir(filepath.Join(r.commonDir, "worktrees"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list worktrees: %w", err)
	}
	for _, e := range ents {
		gd := filepath.Join(r.commonDir, "worktrees", e.Name())
		b, err := os.ReadFile(filepath.Join(gd, "gitdir"))
		if err != nil {
			continue // half created or removed meanwhile
		}
		path := filepath.Dir(strings.TrimSpace(string(b)))
		if slices.ContainsFunc(r.managed, func(dir string) bool { return worktree.Within(path, dir) }) {
			// An agent's sandbox writes its worktree's HEAD: naming the
			// target there made the queue run git status (and, were the
			// main checkout elsewhere, git merge) in a worktree whose .git
			// link the sandbox also writes: a git directory of its own,
			// its core.fsmonitor run by the daemon, outside the sandbox.
			continue
		}
		cands = append(cands, checkout{path: path, gitDir: gd})
	}
	var out []checkout
	for _, c := range cands {
		if !holds(c.gitDir, ref) {
			continue
		}
		if _, err := os.Stat(c.path); err != nil {
			continue // a worktree whose directory is gone has no files to keep
		}
		c.busy = inProgress(c.gitDir)
		out = append(out, c)
	}
	return out, nil
}

// holds reports whether the worktree whose git directory is gitDir has ref
// checked out, or is rebasing or bisecting it.
func holds(gitDir, ref string) bool {
	for _, f := range []string{"HEAD", "rebase-merge/head-name", "rebase-apply/head-name", "BISECT_START"} {
		b, err := os.ReadFile(filepath.Join(gitDir, f))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		s = strings.TrimPrefix(s, "ref: ")
		if s == ref || (f == "BISECT_START" && "refs/heads/"+s == ref) {
			return true
		}
	}
	return false
}

// inProgress names an operation a person has started in a worktree.
func inProgress(gitDir string) string {
	for _, op := range []struct{ file, name string }{
		{"MERGE_HEAD", "a merge"}, {"CHERRY_PICK_HEAD", "a cherry-pick"}, {"REVERT_HEAD", "a revert"},
		{"rebase-merge", "a rebase"}, {"rebase-apply", "a rebase or am"}, {"BISECT_LOG", "a bisect"},
	} {
		if _, err := os.Stat(filepath.Join(gitDir, op.file)); err == nil {
			return op.name
		}
	}
	return ""
}

// localChanges lists the files with uncommitted changes to tracked files
// (staged or not) in the working tree at dir. Untracked files do not count:
// a fast-forward that would overwrite one fails safely on its own.
func (r *repo) localChanges(ctx context.Context, dir string) ([]string, error) {
	out, err := r.run(ctx, dir, nil, "status", "--porcelain=v1", "-z", "--untracked-files=no", "--ignore-submodules=dirty")
	if err != nil {
		return nil, err
	}
	var files []string
	fields := strings.Split(out, "\x00")
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) < 4 {
			continue
		}
		files = append(files, f[3:])
		if f[0] == 'R' || f[0] == 'C' {
			i++ // a rename's or copy's source follows
		}
	}
	return files, nil
}

// fastForward moves the branch checked out at dir to commit, updating its
// files as "git merge --ff-only" does: it never discards a commit, and it
// refuses rather than overwrite a local change.
//
// It is not cut off by ctx's end (the daemon's stop): git stopped midway
// through a checkout leaves that person's checkout half moved (the new
// files written, its index and branch not: local changes the queue then
// waits on for good) or its index.lock behind. It runs to its end, within
// ffTimeout.
func (r *repo) fastForward(ctx context.Context, dir, commit, msg string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ffTimeout)
	defer cancel()
	_, err := r.run(ctx, dir, []string{"GIT_REFLOG_ACTION=" + msg}, "merge", "--ff-only", "--quiet", "--no-stat", commit)
	return err
}

// ensureWorktree makes path a detached worktree at commit with no local
// changes and no untracked or ignored files. A
// worktree that cannot be reset (a crash left its index locked) is made
// anew.
func (r *repo) ensureWorktree(ctx context.Context, path, commit string) error {
	if admin, ok := r.adminOf(path); ok {
		err := r.resetWorktree(ctx, path, admin, commit)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if rerr := r.removeWorktree(ctx, path); rerr != nil {
			return fmt.Errorf("reset integration worktree: %w; remove it: %w", err, rerr)
		}
	}
	return r.addWorktree(ctx, path, commit)
}

func (r *repo) resetWorktree(ctx context.Context, path, admin, commit string) error {
	// The link back, as git wrote it, for the gate's own git: the last
	// gate may have pointed it elsewhere, or made it a FIFO (or a link to
	// one) that a plain read waited on for good, and every merge with it.
	link := []byte("gitdir: " + admin + "\n")
	if !fileHolds(filepath.Join(path, ".git"), link) {
		if err := os.RemoveAll(filepath.Join(path, ".git")); err != nil {
			return fmt.Errorf("restore %s/.git: %w", path, err)
		}
		if err := os.WriteFile(filepath.Join(path, ".git"), link, 0o644); err != nil {
			return fmt.Errorf("restore %s/.git: %w", path, err)
		}
	}
	// An operation left in progress there (a rebase the daemon was stopped
	// or killed during, one the last gate started) made the next rebase
	// refuse to start, and that refusal rejected an innocent task as a
	// conflict. Nothing in the queue's own worktree is worth keeping.
	for _, f := range leftOperations {
		if err := os.RemoveAll(filepath.Join(admin, f)); err != nil {
			return fmt.Errorf("clear %s of the integration worktree: %w", f, err)
		}
	}
	// A repository the gate left in its checkout (a directory with a .git
	// of its own, untracked or at a gitlink's path) is one git looks into:
	// git clean reads its HEAD to tell it is one, and a HEAD that is a FIFO
	// held the queue's clean, and every merge with it, for good. Its .git
	// goes first, by a walk that opens nothing.
	if err := removeNestedGitDirs(path); err != nil {
		return fmt.Errorf("clear the repositories a gate left in the integration worktree: %w", err)
	}
	// Clean before the checkout as well as after: git reads a
	// .gitattributes the index lacks from the working tree as it checks
	// out, and one a gate left there (text eol=crlf) rewrote the next
	// candidate's files, which then failed an honest task's gate.
	if _, err := r.runIn(ctx, path, admin, nil, "clean", "-ffdxq"); err != nil {
		return err
	}
	if _, err := r.runIn(ctx, path, admin, nil, "checkout", "--quiet", "--force", "--detach", commit); err != nil {
		return err
	}
	if err := r.emptyGitlinks(ctx, path, admin); err != nil {
		return fmt.Errorf("clear the submodules' directories of the integration worktree: %w", err)
	}
	// Ignored files too (-x): a build cache one branch's gate left there
	// changed the next branch's result (a stale target its test used).
	_, err := r.runIn(ctx, path, admin, nil, "clean", "-ffdxq")
	return err
}

// emptyGitlinks empties the directory at each gitlink path of the
// worktree's index, as a new checkout has it: git clean leaves what is in
// one alone (it is the submodule's), so what a gate left there (a build
// cache, a stale result) was in the next candidate's checkout when its
// gate ran. Nothing is followed out of the worktree (os.Root). One git
// ls-files per reset.
func (r *repo) emptyGitlinks(ctx context.Context, path, admin string) error {
	out, err := r.runIn(ctx, path, admin, nil, "ls-files", "--stage", "-z")
	if err != nil {
		return err
	}
	var root *os.Root
	defer func() {
		if root != nil {
			root.Close()
		}
	}()
	for _, rec := range strings.Split(out, "\x00") {
		meta, p, ok := strings.Cut(rec, "\t")
		if !ok || !strings.HasPrefix(meta, "160000 ") {
			continue
		}
		if root == nil {
			if root, err = os.OpenRoot(path); err != nil {
				return err
			}
		}
		fi, err := root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			if err := root.RemoveAll(p); err != nil {
				return err
			}
			if err := root.Mkdir(p, 0o755); err != nil {
				return err
			}
			continue
		}
		d, err := root.Open(p)
		if err != nil {
			return err
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := root.RemoveAll(filepath.Join(p, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// fileHolds reports whether path is a file of its own (no link followed)
// whose content is want, read without waiting: a FIFO there is not one.
func fileHolds(path string, want []byte) bool {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(want)) {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(len(want))+1))
	return err == nil && bytes.Equal(b, want)
}

// removeNestedGitDirs removes every .git below root, root's own aside,
// whatever it is (a directory, a file, a link, a FIFO), following no link
// and opening no file but directories.
func removeNestedGitDirs(root string) error {
	top := filepath.Join(root, ".git")
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed under the walk
			}
			return err
		case p == top:
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil // a worktree's link: SkipDir would skip its siblings
		case d.Name() != ".git":
			return nil
		}
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
}

// leftOperations are the files in a worktree's git directory that say an
// operation is in progress there.
var leftOperations = []string{"rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "sequencer"}

// adminOf is the git directory registered for the worktree at path
// (commonDir/worktrees/ID, whose gitdir file names path/.git), if any.
// Not what path/.git says: the gate, which runs code from the branch
// under test, writes its checkout, that file included. A link it made
// to another worktree's git directory (an agent's) had the queue's
// checkout move that worktree's HEAD and index.
func (r *repo) adminOf(path string) (string, bool) {
	want := filepath.Join(path, ".git")
	ents, err := os.ReadDir(filepath.Join(r.commonDir, "worktrees"))
	if err != nil {
		return "", false
	}
	for _, e := range ents {
		admin := filepath.Join(r.commonDir, "worktrees", e.Name())
		b, err := os.ReadFile(filepath.Join(admin, "gitdir"))
		if err == nil && filepath.Clean(strings.TrimSpace(string(b))) == want {
			return admin, true
		}
	}
	return "", false
}

// runIn runs git in the queue's worktree at path, whose registered git
// directory is admin, by that directory and not by path/.git (adminOf),
// with no hooks and no fsmonitor: a git directory of the gate's making
// would have its config run a program as the daemon.
func (r *repo) runIn(ctx context.Context, path, admin string, env []string, args ...string) (string, error) {
	return r.run(ctx, path, env, append(worktree.InWorktree(path, admin), args...)...)
}

func (r *repo) addWorktree(ctx context.Context, path, commit string) error {
	unlock, err := worktree.LockRepo(ctx, r.commonDir)
	if err != nil {
		return fmt.Errorf("create integration worktree: %w", err)
	}
	defer unlock()
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("create integration worktree: %s exists and is not a worktree of %s: %w", path, r.mainWT, ErrForeignDir)
	}
	if _, err := r.run(ctx, r.commonDir, nil, "worktree", "prune"); err != nil {
		return fmt.Errorf("create integration worktree: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create integration worktree: %w", err)
	}
	_, err = r.run(ctx, r.commonDir, nil, "worktree", "add", "--quiet", "--detach", path, commit)
	if err != nil {
		return fmt.Errorf("create integration worktree: %w", err)
	}
	return nil
}

func (r *repo) removeWorktree(ctx context.Context, path string) error {
	unlock, err := worktree.LockRepo(ctx, r.commonDir)
	if err != nil {
		return err
	}
	defer unlock()
	_, err = r.run(ctx, r.commonDir, nil, "worktree", "remove", "--force", "--force", path)
	return err
}

// rebase replays head's commits onto onto in the worktree at wt and
// returns the result, or the paths that conflict (the rebase is then
// aborted). Merge commits of the branch are dropped and their changes
// replayed as ordinary commits, as "git rebase" does.
func (r *repo) rebase(ctx context.Context, wt, onto, head string) (commit string, conflicts []string, err error) {
	if err := r.ensureWorktree(ctx, wt, head); err != nil {
		return "", nil, err
	}
	admin, ok := r.adminOf(wt)
	if !ok {
		return "", nil, fmt.Errorf("rebase in %s: not a registered worktree of %s", wt, r.mainWT)
	}
	_, err = r.runIn(ctx, wt, admin, r.ident, "rebase", "--quiet", "--no-autosquash", "--no-update-refs", onto)
	if err != nil && ctx.Err() == nil && exitCode(err) > 0 {
		out, derr := r.runIn(ctx, wt, admin, nil, "diff", "--name-only", "-z", "--diff-filter=U", "--ignore-submodules=all")
		_, _ = r.runIn(ctx, wt, admin, nil, "rebase", "--abort")
		if derr == nil && out != "" {
			return "", strings.Split(strings.TrimSuffix(out, "\x00"), "\x00"), nil
		}
		return "", nil, &unmergeableError{err: err}
	}
	if err != nil {
		return "", nil, err
	}
	out, err := r.runIn(ctx, wt, admin, nil, "rev-parse", "--verify", "HEAD")
	if err != nil {
		return "", nil, err
	}
	return strings.TrimSpace(out), nil, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// changeCheck is what reading a change's objects again found.
type changeCheck struct {
	// bad are the objects missing or whose content does not hash to
	// their name.
	bad []string
	// carried are the change's commits with the queue's task trailer,
	// the newest first ("COMMIT (task N)"): merges the queue made that
	// the base does not hold.
	carried []string
}

// checkChange reads again every object reachable from head and not from
// base, as git stores it, and hashes it: git trusts an object's name when
// it reads it; the queue must not, since every session can write the
// shared object store. The same read finds the commits among them that
// carry the queue's task trailer. Commits come in topological order, a
// descendant before its ancestors, whatever their dates.
func (r *repo) checkChange(ctx context.Context, base, head string) (changeCheck, error) {
	list, err := r.run(ctx, r.commonDir, nil, "rev-list", "--objects", "--no-object-names", "--topo-order", base+".."+head)
	if code := exitCode(err); code > 1 {
		return changeCheck{}, &unmergeableError{err: err} // a head or object not there: as merge-tree says it
	} else if err != nil {
		return changeCheck{}, err
	}
	if strings.TrimSpace(list) == "" {
		return changeCheck{}, nil
	}
	cmd := r.command(ctx, r.commonDir, nil, "cat-file", "--batch")
	cmd.Stdin = strings.NewReader(list)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return changeCheck{}, fmt.Errorf("git cat-file --batch: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return changeCheck{}, fmt.Errorf("git cat-file --batch: %w", err)
	}
	check, rerr := hashBatch(bufio.NewReader(out))
	if rerr != nil {
		_ = cmd.Process.Kill()
	}
	werr := cmd.Wait()
	switch {
	case rerr != nil:
		return changeCheck{}, fmt.Errorf("git cat-file --batch: %w", rerr)
	case werr != nil:
		return changeCheck{}, fmt.Errorf("git cat-file --batch: %w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	return check, nil
}

// maxTrailerCommit bounds the commit objects read whole for their trailer:
// the queue's are a few hundred bytes; a larger one is hashed as it
// streams, its message not read.
const maxTrailerCommit = 1 << 20

// hashBatch reads git cat-file --batch's output ("NAME TYPE SIZE", the
// content, a newline; "NAME missing") and returns the names that are
// missing or whose content hashes to another name (SHA-1 for 40 hex
// digits, SHA-256 for 64), and the commits that carry the task trailer.
func hashBatch(r *bufio.Reader) (check changeCheck, err error) {
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF && line == "" {
			return check, nil
		}
		if err != nil {
			return check, err
		}
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == "missing" {
			check.bad = append(check.bad, f[0]+" (missing)")
			continue
		}
		if len(f) != 3 {
			return check, fmt.Errorf("unexpected line %q", strings.TrimSpace(line))
		}
		size, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || size < 0 {
			return check, fmt.Errorf("unexpected line %q", strings.TrimSpace(line))
		}
		var h hash.Hash
		switch len(f[0]) {
		case 40:
			h = sha1.New()
		case 64:
			h = sha256.New()
		default:
			return check, fmt.Errorf("unexpected object name %q", f[0])
		}
		fmt.Fprintf(h, "%s %d\x00", f[1], size)
		if f[1] == "commit" && size <= maxTrailerCommit {
			body := make([]byte, size)
			if _, err := io.ReadFull(r, body); err != nil {
				return check, err
			}
			h.Write(body)
			if task := taskOf(body); task != "" {
				check.carried = append(check.carried, fmt.Sprintf("%s (task %s)", short(f[0]), task))
			}
		} else if _, err := io.CopyN(h, r, size); err != nil {
			return check, err
		}
		if _, err := r.Discard(1); err != nil { // the newline after the content
			return check, err
		}
		if hex.EncodeToString(h.Sum(nil)) != f[0] {
			check.bad = append(check.bad, f[0])
		}
	}
}

// taskOf is the value of the task trailer of a commit object (its
// headers, a blank line, the message), "" when it has none: a line
// "Swarmd-Task: N" (the key's case aside) in the message's last paragraph
// past the subject, where the queue writes it and git looks for trailers.
func taskOf(commit []byte) string {
	_, msg, ok := bytes.Cut(commit, []byte("\n\n"))
	if !ok {
		return ""
	}
	msg = bytes.TrimSpace(msg)
	i := bytes.LastIndex(msg, []byte("\n\n"))
	if i < 0 {
		return "" // the subject alone: git reads no trailer there either
	}
	msg = msg[i+2:]
	for _, line := range strings.Split(string(msg), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(strings.TrimSpace(key), TaskTrailer) {
			if v := strings.TrimSpace(value); v != "" {
				return v
			}
		}
	}
	return ""
}
