package worktree

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Returned errors wrap them with the path, ref or agent
// involved; test with errors.Is.
var (
	ErrNotRepo         = errors.New("not a git repository")
	ErrBareRepo        = errors.New("bare repository")
	ErrNoCommits       = errors.New("no commits")
	ErrDetachedHead    = errors.New("detached HEAD")
	ErrUnbornHead      = errors.New("unborn HEAD")
	ErrBaseRefNotFound = errors.New("base_ref not found")
	ErrGitMissing      = errors.New("git not found")
	ErrGitTooOld       = errors.New("git too old")
	ErrBadName         = errors.New("invalid agent name")
	ErrForeignDir      = errors.New("directory is not the agent's worktree")
	ErrHasWork         = errors.New("worktree has work")
	ErrNoWorktree      = errors.New("no worktree")
	ErrBranchMissing   = errors.New("branch missing")
	ErrCheckedOut      = errors.New("branch checked out elsewhere")
)

// GitError is a failed git command: its arguments, exit code and standard
// error, so that the operator sees what git said.
type GitError struct {
	Args     []string // arguments after "git -C <dir>"
	Dir      string
	ExitCode int    // -1 when git did not exit normally (killed, not started)
	Stderr   string // trimmed
	Err      error  // *exec.ExitError, the context's error, or a start error
}

func (e *GitError) Error() string {
	cmd := "git " + strings.Join(e.Args, " ")
	if e.ExitCode < 0 {
		return fmt.Sprintf("%s: %v", cmd, e.Err)
	}
	msg := oneLine(e.Stderr)
	if msg == "" {
		return fmt.Sprintf("%s: exit %d", cmd, e.ExitCode)
	}
	return fmt.Sprintf("%s: exit %d: %s", cmd, e.ExitCode, msg)
}

func (e *GitError) Unwrap() error { return e.Err }

// ForeignDirError reports a directory at an agent's worktree path that swarmd
// does not own. swarmd leaves such a directory alone.
type ForeignDirError struct {
	Agent  string
	Path   string
	Reason string
	// Fix, when set, is what the operator does instead of moving the
	// directory away: it is the agent's worktree, but holds what the
	// daemon does not take (a HEAD that is a symbolic link).
	Fix string
}

func (e *ForeignDirError) Error() string {
	if e.Fix != "" {
		return fmt.Sprintf("%s, in the worktree %s of agent %s: %s", e.Reason, e.Path, e.Agent, e.Fix)
	}
	return fmt.Sprintf("%s is not the worktree of agent %s (%s): move it away or choose another state_dir",
		e.Path, e.Agent, e.Reason)
}

func (e *ForeignDirError) Is(target error) bool { return target == ErrForeignDir }

// HasWorkError explains why Prune refused: the worktree or branch holds work
// that would be lost.
type HasWorkError struct {
	Agent      string
	DirtyFiles int    // uncommitted changes in the worktree
	Unmerged   int    // commits not reachable from the base
	Base       string // the base_ref they were checked against
	Reason     string // any other reason (e.g. a rebase in progress)
}

func (e *HasWorkError) Error() string {
	var parts []string
	if e.DirtyFiles > 0 {
		parts = append(parts, plural(e.DirtyFiles, "uncommitted file"))
	}
	if e.Unmerged > 0 {
		parts = append(parts, plural(e.Unmerged, "commit")+" not merged into base_ref "+e.Base)
	}
	if e.Reason != "" {
		parts = append(parts, e.Reason)
	}
	return fmt.Sprintf("agent %s has work that would be lost (%s): commit and merge it, or discard it, first",
		e.Agent, strings.Join(parts, ", "))
}

func (e *HasWorkError) Is(target error) bool { return target == ErrHasWork }

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// oneLine folds git's multi-line messages (hints included) into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
