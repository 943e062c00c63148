package merge

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Returned errors wrap them with the task, branch or path
// involved; test with errors.Is.
var (
	// ErrNotFound: the task has never been queued.
	ErrNotFound = errors.New("not in the merge queue")
	// ErrState: the request does not fit the entry's state (retrying a task
	// that is still queued, re-queueing one under test with other commits).
	ErrState = errors.New("not allowed in the queue entry's state")
	// ErrInvalid: a malformed request (no task id, a bad agent name).
	ErrInvalid = errors.New("invalid merge queue request")
	// ErrNoTarget: the branch merge.into names does not exist.
	ErrNoTarget = errors.New("merge target branch does not exist")
	// ErrNoCommit: a branch or commit to queue does not exist.
	ErrNoCommit = errors.New("no such commit")
	// ErrForeignDir: the integration worktree's path holds something else.
	ErrForeignDir = errors.New("directory is not the merge queue's worktree")
	// ErrNotLeader: the queue's loop lost the lead (on a shared store,
	// another daemon took the merge lock and runs the queue now); its
	// writes are refused.
	ErrNotLeader = errors.New("another queue loop runs the merge queue now")
)

// corruptError: objects of a change are not what their names say. Every
// sandbox writes the shared object store (git needs it to commit) and git
// does not hash an object again when it reads it, so a session can replace
// an object of another agent's change with other content under the same
// name; the change is rejected before any gate runs.
type corruptError struct{ objects []string }

func (e *corruptError) Error() string {
	return fmt.Sprintf("objects of the change do not match their names (replaced in the object store?): %s", strings.Join(e.objects, ", "))
}

// carriedError: the change's commits carry merge commits the queue made
// (their Swarmd-Task trailer) that the target does not hold: a merge a
// leader cut off before it recorded it, which the swarm made again, or
// merges of a target rewound since. Merged, they would bring another
// task's work in with this one, a second time.
type carriedError struct{ merges []string }

func (e *carriedError) Error() string {
	return fmt.Sprintf("it carries merges of the merge queue's that the target does not hold: %s", strings.Join(e.merges, ", "))
}

// historyError: merged as its history stands, the change would not be the
// one its reviewer was shown (`git diff INTO...HEAD`, against one merge
// base): a criss-cross history, which merge-tree merges against a virtual
// base of all its merge bases, or merge commits that a rebase drops with
// what they changed themselves. why says which, and what to do.
type historyError struct{ why string }

func (e *historyError) Error() string { return e.why }

// unmergeableError is git refusing to merge a candidate for a reason of the
// candidate's own (unrelated histories, a rebase that fails without a
// conflicting path): it is rejected like a conflict, with git's message.
type unmergeableError struct{ err error }

func (e *unmergeableError) Error() string { return fmt.Sprintf("cannot merge: %v", e.err) }
func (e *unmergeableError) Unwrap() error { return e.err }
