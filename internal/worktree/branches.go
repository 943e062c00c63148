package worktree

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"go.uber.org/zap"
)

// An agent's branch lives in a directory of its own, refs/heads/swarm/AGENT/,
// so that a sandbox can be given that directory to write and nothing else of
// the branches (Access says why a directory and not a file).
const (
	branchPrefix = "swarm/"
	branchLeaf   = "/work"
)

// branchName is the agent's branch: swarm/AGENT/work.
func branchName(agent string) string { return branchPrefix + agent + branchLeaf }

func branchRef(agent string) plumbing.ReferenceName {
	return plumbing.NewBranchReferenceName(branchName(agent))
}

// branchDir is the agent's branch directory, relative to the git directory.
func branchDir(agent string) string { return "refs/heads/" + branchPrefix + agent }

// agentOfBranch is the agent whose branch short is, if it is one.
func agentOfBranch(short string) (string, bool) {
	rest, ok := strings.CutPrefix(short, branchPrefix)
	if !ok {
		return "", false
	}
	agent, ok := strings.CutSuffix(rest, branchLeaf)
	if !ok || checkName(agent) != nil {
		return "", false
	}
	return agent, true
}

// migrateBranches renames every agent branch of the layout before the
// branch directories (swarm/AGENT) to its place (swarm/AGENT/work). git
// branch -m moves its reflog and the HEAD of the worktree that has it
// checked out, so a worktree continues where it was.
func (m *Manager) migrateBranches(ctx context.Context) error {
	out, err := m.git.run(ctx, m.repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/"+branchPrefix)
	if err != nil {
		return fmt.Errorf("list agent branches: %w", err)
	}
	var old []string
	for _, short := range strings.Fields(out) {
		agent, ok := strings.CutPrefix(short, branchPrefix)
		if ok && !strings.Contains(agent, "/") && checkName(agent) == nil {
			old = append(old, agent)
		}
	}
	if len(old) == 0 {
		return nil
	}
	unlock, err := m.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	for _, agent := range old {
		from := branchPrefix + agent
		if _, err := m.git.run(ctx, m.repo, "branch", "-m", from, branchName(agent)); err != nil {
			return fmt.Errorf("move branch %s to %s: %w", from, branchName(agent), err)
		}
		m.log.Info("agent branch moved to its own directory",
			zap.String("agent", agent), zap.String("from", from), zap.String("to", branchName(agent)))
	}
	return nil
}
