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
	if q.opts.Strategy == StrategyRebase {
		return q.buildRebase(ctx, dir, e, target, targetTree)
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
// dir. Its commits keep their authors; the queue is their committer.
func (q *Queue) buildRebase(ctx context.Context, dir string, e *Entry, target, targetTree string) (candidate, error) {
	commit, conflicts, err := q.repo.rebase(ctx, dir, target, e.Head)
	switch {
	case err != nil:
		return candidate{}, err
	case len(conflicts) > 0:
		return candidate{conflicts: conflicts}, nil
	case commit == target:
		return candidate{commit: target, tree: targetTree, noop: true}, nil
	}
	tree, err := q.repo.treeOf(ctx, commit)
	if err != nil {
		return candidate{}, fmt.Errorf("build candidate for task %d: %w", e.Task, err)
	}
	return candidate{commit: commit, tree: tree}, nil
}

// lineEntries are the entries of a line, in its order.
func lineEntries(line []link) []*Entry {
	es := make([]*Entry, len(line))
	for i, l := range line {
		es[i] = l.e
	}
	return es
}
