package merge

import (
	"context"
	"fmt"
	"strings"
)

// TaskTrailer is the trailer of every merge and squash commit the queue
// makes, naming the task: it tells them from anyone's own commits.
const TaskTrailer = "Swarmd-Task"

// candidate is what one entry becomes on the current target.
type candidate struct {
	commit    string   // the commit to test and advance the target to
	tree      string   // commit's tree
	conflicts []string // paths that do not merge; commit is "" then
	noop      bool     // the target already holds the work (commit is the target)
}

// build makes e's candidate on target (whose tree is targetTree) by the
// configured strategy. merge and squash need no working tree: merge-tree
// --write-tree merges in the object store and commit-tree records the
// result. rebase replays the branch in the integration worktree.
func (q *Queue) build(ctx context.Context, e *Entry, target, targetTree string) (candidate, error) {
	return q.buildIn(ctx, q.wt, e, target, targetTree)
}

// buildIn is build with the integration worktree dir for rebase: a run
// ahead builds in its own while the gate runs in the first.
func (q *Queue) buildIn(ctx context.Context, dir string, e *Entry, target, targetTree string) (candidate, error) {
	// What is merged must be what was committed and reviewed: the change's
	// objects, hashed again (the target's were, in their own builds), and
	// none of the queue's merges that the target lacks among its commits.
	if check, err := q.repo.checkChange(ctx, target, e.Head); err != nil {
		return candidate{}, fmt.Errorf("build candidate for task %d: %w", e.Task, err)
	} else if len(check.bad) > 0 {
		return candidate{}, &corruptError{objects: check.bad}
	} else if len(check.carried) > 0 {
		return candidate{}, &carriedError{merges: check.carried}
	}
	// The reviewer was shown the change against one merge base; merged
	// against several (merge-tree's virtual base), it could be another.
	bases, err := q.repo.mergeBases(ctx, target, e.Head)
	if err != nil {
		return candidate{}, fmt.Errorf("build candidate for task %d: %w", e.Task, err)
	}
	if len(bases) > 1 {
		return candidate{}, q.crissCross(bases)
	}
	tree, conflicts, err := q.repo.mergeTree(ctx, target, e.Head)
	switch {
	case err != nil:
		return candidate{}, err
	case len(conflicts) > 0:
		return candidate{conflicts: conflicts}, nil
	case tree == targetTree:
		// Nothing to add: the branch has no change of its own, or its
		// change is in already (a crash after the target advanced lands
		// here, for every strategy).
		return candidate{commit: target, tree: targetTree, noop: true}, nil
	}
	if q.opts.Strategy == StrategyRebase {
		return q.buildRebase(ctx, dir, e, target, targetTree, tree)
	}
	if q.opts.Strategy == StrategySquash {
		return q.squash(ctx, e, target, tree)
	}
	msg := fmt.Sprintf("Merge task %d from %s\n\n%s at %s, merged into %s by the swarmd merge queue.\n\n%s: %d\n",
		e.Task, e.Branch, e.Branch, e.Head, q.opts.Into, TaskTrailer, e.Task)
	commit, err := q.repo.commitTree(ctx, tree, msg, nil, target, e.Head)
	if err != nil {
		return candidate{}, fmt.Errorf("build candidate for task %d: %w", e.Task, err)
	}
	return candidate{commit: commit, tree: tree}, nil
}

// squash records tree as one commit on target, authored by the author of
// the branch's newest commit, listing the subjects it squashes.
func (q *Queue) squash(ctx context.Context, e *Entry, target, tree string) (candidate, error) {
	commits, err := q.repo.commitsBetween(ctx, target, e.Head)
	if err != nil {
		return candidate{}, fmt.Errorf("build candidate for task %d: %w", e.Task, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Task %d from %s\n\n", e.Task, e.Branch)
	for _, c := range commits {
		fmt.Fprintf(&b, "* %s\n", c.subject)
	}
	fmt.Fprintf(&b, "\nSquashed from %s at %s by the swarmd merge queue.\n\n%s: %d\n", e.Branch, e.Head, TaskTrailer, e.Task)
	var author []string
	if len(commits) > 0 {
		author = commits[0].author
	}
	commit, err := q.repo.commitTree(ctx, tree, b.String(), author, target)
	if err != nil {
		return candidate{}, fmt.Errorf("build candidate for task %d: %w", e.Task, err)
	}
	return candidate{commit: commit, tree: tree}, nil
}

// buildRebase replays the branch onto target in the integration worktree
// dir. Its commits keep their authors; the queue is their committer. The
// replay must come to want, the reviewed change merged onto target: git
// rebase drops the branch's merge commits, and with them what a merge
// changed itself (a file it left out of what it merged, say).
func (q *Queue) buildRebase(ctx context.Context, dir string, e *Entry, target, targetTree, want string) (candidate, error) {
	commit, conflicts, err := q.repo.rebase(ctx, dir, target, e.Head)
	switch {
	case err != nil:
		return candidate{}, err
	case len(conflicts) > 0:
		return candidate{conflicts: conflicts}, nil
	}
	tree := targetTree
	if commit != target {
		if tree, err = q.repo.treeOf(ctx, commit); err != nil {
			return candidate{}, fmt.Errorf("build candidate for task %d: %w", e.Task, err)
		}
	}
	if tree != want {
		herr, err := q.replayDiffers(ctx, target, e.Head, tree, want)
		if err != nil {
			return candidate{}, fmt.Errorf("build candidate for task %d: %w", e.Task, err)
		}
		return candidate{}, herr
	}
	return candidate{commit: commit, tree: tree}, nil
}

// crissCross is the rejection of a head with several merge bases with the
// target.
func (q *Queue) crissCross(bases []string) *historyError {
	return &historyError{why: fmt.Sprintf("Its history has %d merge bases with %[2]s (%[3]s): `git diff %[2]s...HEAD` "+
		"shows its change against one of them only, while a merge starts from all of them, so what would be merged "+
		"is not the change that was reviewed. Merge %[2]s into it (`git merge %[2]s`), check that `git diff %[2]s...HEAD` "+
		"shows the whole of your task's change and nothing else, commit, and report DONE again.",
		len(bases), q.opts.Into, commitList(bases))}
}

// replayDiffers is the rejection of a rebase whose result (tree) is not
// the reviewed change merged onto target (want): the paths that differ and
// the merge commits the replay dropped.
func (q *Queue) replayDiffers(ctx context.Context, target, head, tree, want string) (*historyError, error) {
	paths, err := q.repo.treeDiff(ctx, want, tree)
	if err != nil {
		return nil, err
	}
	merges, err := q.repo.mergesIn(ctx, target, head)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Replayed onto %[1]s (merge.strategy rebase), its commits give another result than its change as "+
		"reviewed (`git diff %[1]s...HEAD`) applied to %[1]s", q.opts.Into)
	if len(paths) > 0 {
		fmt.Fprintf(&b, ", in %s", fileList(paths))
	}
	b.WriteString(". ")
	if len(merges) > 0 {
		some := "a merge commit"
		if len(merges) > 1 {
			some = fmt.Sprintf("%d merge commits", len(merges))
		}
		fmt.Fprintf(&b, "A rebase drops merge commits, and with them what a merge changed itself; its commits since %s "+
			"include %s (%s). ", q.opts.Into, some, commitList(merges))
	}
	fmt.Fprintf(&b, "Make its history linear, one commit with the whole change: `git reset --soft $(git merge-base %[1]s HEAD)`, "+
		"commit, check that `git diff %[1]s...HEAD` shows the whole of your task's change and nothing else, and report DONE again.", q.opts.Into)
	return &historyError{why: b.String()}, nil
}

// commitList names up to 5 commits, shortened.
func commitList(commits []string) string {
	const most = 5
	names := make([]string, 0, most)
	for _, c := range commits[:min(len(commits), most)] {
		names = append(names, short(c))
	}
	s := strings.Join(names, ", ")
	if len(commits) > most {
		s += fmt.Sprintf(" and %d more", len(commits)-most)
	}
	return s
}

// lineEntries are the entries of a line, in its order.
func lineEntries(line []link) []*Entry {
	es := make([]*Entry, len(line))
	for i, l := range line {
		es[i] = l.e
	}
	return es
}
