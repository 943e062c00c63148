package worktree

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The two benchmarks create 50 worktrees of a 5,000-file repository, through
// Manager.Ensure and with a plain loop of "git worktree add"; the
// requirement is Ensure ≤ 1.1× the plain loop. Each iteration starts from a
// repository without worktrees (clean-up is not timed). Run them together:
//
//	go test -run '^$' -bench '50$' -benchtime 3x ./internal/worktree/
//
// They run one after the other, so load from other processes skews the
// ratio; bench/worktree interleaves the two worktree by worktree instead.
const benchAgents = 50

func BenchmarkEnsure50(b *testing.B) {
	ctx := context.Background()
	repo := newBigRepo(b, 5000)
	root := b.TempDir()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		stateDir := filepath.Join(root, fmt.Sprint(i))
		m, err := Open(ctx, Options{Repo: repo, StateDir: stateDir})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for j := range benchAgents {
			if _, err := m.Ensure(ctx, fmt.Sprintf("a%02d", j)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		resetWorktrees(b, repo, stateDir)
		b.StartTimer()
	}
}

func BenchmarkGitWorktreeAdd50(b *testing.B) {
	repo := newBigRepo(b, 5000)
	base := gitT(b, repo, "rev-parse", "HEAD")
	root := b.TempDir()
	for i := 0; i < b.N; i++ {
		stateDir := filepath.Join(root, fmt.Sprint(i))
		for j := range benchAgents {
			agent := fmt.Sprintf("a%02d", j)
			path := filepath.Join(stateDir, "worktrees", agent)
			cmd := exec.Command("git", "-C", repo, "worktree", "add", "-b", "swarm/"+agent, path, base)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("git worktree add: %v: %s", err, out)
			}
		}
		b.StopTimer()
		resetWorktrees(b, repo, stateDir)
		b.StartTimer()
	}
}

// resetWorktrees removes every linked worktree and swarm/* branch.
func resetWorktrees(b *testing.B, repo, stateDir string) {
	if err := os.RemoveAll(stateDir); err != nil {
		b.Fatal(err)
	}
	gitT(b, repo, "worktree", "prune")
	refs := gitT(b, repo, "for-each-ref", "--format=delete %(refname)", "refs/heads/swarm/")
	cmd := exec.Command("git", "-C", repo, "update-ref", "--stdin")
	cmd.Stdin = strings.NewReader(refs + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("delete branches: %v: %s", err, out)
	}
}
