package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// One task, one change: with a merge queue, every task's work is a line of
// commits of its own, started from the merge target, and the agent's one
// worktree and branch carry the line of the task it works on. Between
// sessions, StartLine moves the agent's branch to the line of the task the
// next session works on; the task board keeps where each line stands (its
// work head) and the commit frozen at DONE, which is what is reviewed and
// merged, so that no task's change ever carries another's.

// LineBranch is task's line: swarm/task/N, kept at where the line stands
// after each session on it (KeepLine), so that the line is there to look
// at, to push to the swarm's remote, and to merge.
func (m *Manager) LineBranch(task int64) string { return linePrefix + strconv.FormatInt(task, 10) }

// KeepLine points task's line branch at head, where the agent's branch
// stood when a session on the task ended. A new attempt's line replaces an
// earlier one's.
func (m *Manager) KeepLine(ctx context.Context, task int64, head string) error {
	ref := "refs/heads/" + m.LineBranch(task)
	if _, err := m.git.run(ctx, m.repo, "update-ref", "-m", "swarmd: the line of task "+fmt.Sprint(task), ref, head); err != nil {
		return fmt.Errorf("keep the line of task %d: %w", task, err)
	}
	return nil
}

// PushLine force-pushes task's line branch to remote: a new attempt
// replaces an earlier one there too.
func (m *Manager) PushLine(ctx context.Context, task int64, remote string) error {
	ref := "refs/heads/" + m.LineBranch(task)
	return m.push(ctx, remote, "+"+ref+":"+ref)
}

// StartLine puts the agent's branch on a task's line before a session on
// it: at head (where the line stood when its last session ended), or, for a
// new line (head ""), at the tip of from (the merge target), so that the
// task starts from everything merged so far, its dependencies included.
// Uncommitted changes left in the worktree are stashed first (`git stash
// list` in the worktree shows them, named after the task), so nothing is
// lost. It returns the commit the branch is at. A line continued where the
// branch is already is left as it is, uncommitted changes included (its
// last session's); a new line is started clean even then: what is left
// uncommitted is another task's, or an earlier attempt's of this one
// (fenced off), whose session was cut off between its git add and its
// commit, and it would be committed with this task's work.
func (m *Manager) StartLine(ctx context.Context, agent string, task int64, head, from string) (string, error) {
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("start the line of task %d for %s: %w", task, agent, err)
	}
	if err := checkName(agent); err != nil {
		return fail(err)
	}
	in, err := m.inspect(agent)
	if err != nil {
		return fail(err)
	}
	if in.state != wtOK || in.rebasing {
		return fail(fmt.Errorf("the worktree at %s is not on %s", m.Path(agent), m.Branch(agent)))
	}
	want := head
	if want == "" {
		if want, err = m.resolve(from); err != nil {
			return fail(err)
		}
	}
	if head != "" && in.head.String() == want {
		return want, nil
	}
	if err := m.plainGitDir(agent, in.adminDir); err != nil {
		return fail(err)
	}
	path := m.Path(agent)
	dirty, err := m.dirtyFiles(ctx, path, in.adminDir)
	if err != nil {
		return fail(err)
	}
	if in.head.String() == want && len(dirty) == 0 {
		return want, nil // a new line where the branch is, clean
	}
	if len(dirty) > 0 {
		// git stash has no --ignore-submodules: what keeps it out of the
		// submodules is an ignore of each (noSubmodules).
		opts, env, err := m.noSubmodules(ctx, path, in.adminDir)
		if err != nil {
			return fail(err)
		}
		msg := fmt.Sprintf("swarmd: left uncommitted on %s at %.12s, before task %d", m.Branch(agent), in.head, task)
		args := append(append(InWorktree(path, in.adminDir), opts...), "stash", "push", "--include-untracked", "--message", msg)
		if _, err := m.git.runEnv(ctx, path, GitOptions, env, args...); err != nil {
			return fail(err)
		}
	}
	if _, err := m.gitIn(ctx, path, in.adminDir, "reset", "--quiet", "--hard", want); err != nil {
		return fail(err)
	}
	return want, nil
}

// resolve is the commit rev (a branch, a tag, a commit) names now.
func (m *Manager) resolve(rev string) (string, error) {
	r, err := m.openRepo()
	if err != nil {
		return "", err
	}
	h, err := r.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", rev, err)
	}
	return h.String(), nil
}

// lineRefs are the refs of task lines: the branches, and the copies of
// other daemons' lines the merge queue fetched from the remote (a shared
// store's leader merges them).
var lineRefs = []string{"refs/heads/" + linePrefix, FetchedPrefix + linePrefix}

// linePrefix is a task line's branch name without the task's id.
const linePrefix = "swarm/task/"

// taskLine is a task's line as a listing of refs shows it.
type taskLine struct {
	ref, head string
	task      int64
}

// parseLines reads "HEAD REF" lines (for-each-ref's, ls-remote's with the
// tab a space) of refs under prefixes, ending in a task's id.
func parseLines(out string, prefixes ...string) (lines []taskLine, ids []int64) {
	for _, l := range strings.Split(out, "\n") {
		head, ref, ok := strings.Cut(strings.Replace(l, "\t", " ", 1), " ")
		if !ok {
			continue
		}
		for _, p := range prefixes {
			if rest, ok := strings.CutPrefix(ref, p); ok {
				if id, err := strconv.ParseInt(rest, 10, 64); err == nil && id > 0 {
					lines = append(lines, taskLine{ref, head, id})
					ids = append(ids, id)
				}
				break
			}
		}
	}
	return lines, ids
}

// PruneLines deletes the line branches of the tasks done says are done
// with (merged), and this repository's copies of other daemons' lines
// (fetched by the merge queue), asked once with every task that has one,
// and returns their names (a fetched copy by its whole ref). The lines
// are listed with their heads and deleted at those heads in one git
// update-ref: a line kept again since the listing (a session's end)
// stays; then each of the rest is deleted alone.
func (m *Manager) PruneLines(ctx context.Context, done func(ctx context.Context, tasks []int64) (map[int64]bool, error)) ([]string, error) {
	out, err := m.git.run(ctx, m.repo, append([]string{"for-each-ref", "--format=%(objectname) %(refname)"}, lineRefs...)...)
	if err != nil {
		return nil, fmt.Errorf("prune task lines: %w", err)
	}
	lines, ids := parseLines(out, lineRefs...)
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	drop, err := done(ctx, slices.Compact(ids))
	if err != nil {
		return nil, fmt.Errorf("prune task lines: %w", err)
	}
	var gone []taskLine
	var input strings.Builder
	for _, l := range lines {
		if drop[l.task] {
			gone = append(gone, l)
			fmt.Fprintf(&input, "delete %s %s\n", l.ref, l.head)
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	removed := make([]string, 0, len(gone))
	if _, err := m.git.runInput(ctx, m.repo, GitOptions, nil, input.String(), "update-ref", "--stdin"); err == nil {
		for _, l := range gone {
			removed = append(removed, strings.TrimPrefix(l.ref, "refs/heads/"))
		}
		return removed, nil
	}
	var errs []error
	for _, l := range gone {
		if _, err := m.git.run(ctx, m.repo, "update-ref", "-d", l.ref, l.head); err != nil {
			if ctx.Err() != nil {
				return removed, fmt.Errorf("prune task lines: %w", err)
			}
			errs = append(errs, err)
			continue
		}
		removed = append(removed, strings.TrimPrefix(l.ref, "refs/heads/"))
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("prune task lines: %d of %d not deleted: %w", len(errs), len(gone), errs[0])
	}
	return removed, nil
}

// noSubmodules is what keeps git out of every submodule of the worktree
// at path: submodule.NAME.ignore=all for each NAME its .gitmodules names
// (the file in the worktree, the index's, HEAD's: git reads the first
// there is, each is the sandbox's to write), as options to put before
// git's command and variables to add to its environment. A repository
// nested in the worktree that its index records as a gitlink is a
// submodule to git, and git stash, which has no --ignore-submodules, ran
// a git status in one whose .gitmodules entry says ignore = none, by that
// repository's config, which the sandbox writes: its filter ran as the
// daemon, outside the sandbox. The names are read by git itself (git
// config), so that they are the names git stash looks up. They go in
// GIT_CONFIG_COUNT's form (git 2.31 and later), which takes any name;
// an older git gets "-c", which cuts a key at its first "=": a name with
// one cannot be given to it, and the stash is refused.
func (m *Manager) noSubmodules(ctx context.Context, path, adminDir string) (opts, env []string, err error) {
	var names []string
	seen := map[string]bool{}
	srcs := [][]string{{"--blob", ":.gitmodules"}, {"--blob", "HEAD:.gitmodules"}}
	// The worktree's file only when it is a regular one: git config
	// --file would wait forever on a FIFO there, or follow a link out of
	// the worktree, while git's own commands pass over such a file.
	if fi, err := os.Lstat(filepath.Join(path, ".gitmodules")); err == nil && fi.Mode().IsRegular() {
		srcs = append([][]string{{"--file", filepath.Join(path, ".gitmodules")}}, srcs...)
	}
	for _, src := range srcs {
		args := append(append([]string{"config", "-z", "--name-only"}, src...), "--get-regexp", `^submodule\.`)
		out, err := m.gitIn(ctx, path, adminDir, args...)
		if gerr := (*GitError)(nil); errors.As(err, &gerr) && gerr.ExitCode == 1 {
			continue // no such file or blob, or no submodule in it
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read the submodules of %s: %w", path, err)
		}
		for _, key := range strings.Split(out, "\x00") {
			name, ok := strings.CutPrefix(key, "submodule.")
			if i := strings.LastIndexByte(name, '.'); ok && i > 0 {
				name = name[:i]
			} else {
				continue
			}
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 {
		return nil, nil, nil
	}
	if m.git.atLeast(2, 31) {
		for n, name := range names {
			env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=submodule.%s.ignore", n, name), fmt.Sprintf("GIT_CONFIG_VALUE_%d=all", n))
		}
		return nil, append(env, fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(names))), nil
	}
	for _, name := range names {
		if strings.ContainsAny(name, "=\n") {
			return nil, nil, fmt.Errorf("the worktree %s has a submodule named %q, and git %d.%d cannot be kept out of it (a name with \"=\" needs GIT_CONFIG_COUNT: git 2.31 and later)", path, name, m.git.major, m.git.minor)
		}
		opts = append(opts, "-c", "submodule."+name+".ignore=all")
	}
	return opts, nil, nil
}

// Lines are the task lines the repository holds, task to head: its line
// branches, and the copies of other daemons' lines the merge queue fetched
// (the branch's head where both are).
func (m *Manager) Lines(ctx context.Context) (map[int64]string, error) {
	out, err := m.git.run(ctx, m.repo, append([]string{"for-each-ref", "--format=%(objectname) %(refname)"}, lineRefs...)...)
	if err != nil {
		return nil, fmt.Errorf("list task lines: %w", err)
	}
	lines, _ := parseLines(out, lineRefs...)
	heads := make(map[int64]string, len(lines))
	for _, l := range lines {
		if _, ok := heads[l.task]; !ok || strings.HasPrefix(l.ref, "refs/heads/") {
			heads[l.task] = l.head
		}
	}
	return heads, nil
}

// FirstParentTrailers are the tasks that commits along rev's first parents
// name in their trailer key ("Swarmd-Task: 12"), task to the newest such
// commit: the merge commits a merge queue made on its target. The first
// parents alone, so that a trailer an agent wrote in a commit of its own,
// merged on the second parent's side, counts for nothing. A rev that
// does not exist has none.
func (m *Manager) FirstParentTrailers(ctx context.Context, rev, key string) (map[int64]string, error) {
	if _, err := m.git.run(ctx, m.repo, "rev-parse", "--verify", "--quiet", rev+"^{commit}"); err != nil {
		return map[int64]string{}, nil
	}
	out, err := m.git.run(ctx, m.repo, "log", "--first-parent", "--no-show-signature",
		"--format=%H %(trailers:key="+key+",valueonly,separator=%x20)", rev, "--")
	if err != nil {
		return nil, fmt.Errorf("read the %s trailers of %s: %w", key, rev, err)
	}
	tasks := map[int64]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		for _, v := range f[min(1, len(f)):] {
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil || id <= 0 {
				continue
			}
			if _, ok := tasks[id]; !ok {
				tasks[id] = f[0]
			}
		}
	}
	return tasks, nil
}

// KeepRef points ref (a whole ref name, refs/...) at head, so that the
// commits there stay reachable whatever moves the branches later.
func (m *Manager) KeepRef(ctx context.Context, ref, head, why string) error {
	if !strings.HasPrefix(ref, "refs/") {
		return fmt.Errorf("keep %s: not a whole ref name", ref)
	}
	if _, err := m.git.run(ctx, m.repo, "update-ref", "-m", "swarmd: "+why, ref, head); err != nil {
		return fmt.Errorf("keep %s at %s: %w", ref, head, err)
	}
	return nil
}

// TrailedSince reports whether to holds from and every commit along to's
// first parents after from carries trailer key: a target that only its
// merge queue moved since from. The tip to is returned resolved.
func (m *Manager) TrailedSince(ctx context.Context, from, to, key string) (tip string, ok bool, err error) {
	tip, err = m.git.run(ctx, m.repo, "rev-parse", "--verify", "--quiet", to+"^{commit}")
	if err != nil {
		return "", false, nil // no target: nothing moved it
	}
	tip = strings.TrimSpace(tip)
	if _, err := m.git.run(ctx, m.repo, "merge-base", "--is-ancestor", from, tip); err != nil {
		return tip, false, nil // rewound, or from is unknown here
	}
	out, err := m.git.run(ctx, m.repo, "log", "--first-parent", "--no-show-signature",
		"--format=%H %(trailers:key="+key+",valueonly,separator=%x20)", from+".."+tip, "--")
	if err != nil {
		return "", false, fmt.Errorf("read the %s trailers of %s..%s: %w", key, from, to, err)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" && len(strings.Fields(l)) < 2 {
			return tip, false, nil
		}
	}
	return tip, true, nil
}
