package worktree

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Comparison is what a branch has that base does not: a reviewer's view.
type Comparison struct {
	Base, Branch string
	Commits      []Commit // newest first, at most maxCompareCommits
	More         int      // commits beyond those listed
	DiffStat     string   // `git diff --stat base...branch`
	// MergeBases are every merge base of base and branch. With more than
	// one (a criss-cross), base...branch is the change against the one git
	// picks, while a merge starts from all of them: the diff does not show
	// what merging branch would do.
	MergeBases []string
}

// maxCompareCommits bounds the commits a prompt lists.
const maxCompareCommits = 30

// Compare lists branch's commits not in base and the diff stat of branch
// against their merge base.
func (m *Manager) Compare(ctx context.Context, base, branch string) (Comparison, error) {
	c := Comparison{Base: base, Branch: branch}
	out, err := m.git.run(ctx, m.repo, "log", "--format=%H%x00%s", base+".."+branch, "--")
	if err != nil {
		return c, fmt.Errorf("compare %s with %s: %w", branch, base, err)
	}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		hash, subject, ok := strings.Cut(line, "\x00")
		if !ok {
			continue
		}
		if len(c.Commits) == maxCompareCommits {
			c.More++
			continue
		}
		c.Commits = append(c.Commits, Commit{Hash: hash, Subject: subject})
	}
	if c.DiffStat, err = m.git.run(ctx, m.repo, "diff", "--stat=100", base+"..."+branch, "--"); err != nil {
		return c, fmt.Errorf("compare %s with %s: %w", branch, base, err)
	}
	c.DiffStat = strings.TrimRight(c.DiffStat, "\n")
	out, err = m.git.run(ctx, m.repo, "merge-base", "--all", "--end-of-options", base, branch)
	var gerr *GitError
	if err != nil && (!errors.As(err, &gerr) || gerr.ExitCode != 1) { // 1: unrelated histories, no base
		return c, fmt.Errorf("compare %s with %s: %w", branch, base, err)
	}
	c.MergeBases = strings.Fields(out)
	return c, nil
}
