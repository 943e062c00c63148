package worktree

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// BenchmarkEnsureMany is the daemon's ramp: N agents' runners call Ensure at
// once on a fresh state dir, each creating its worktree and branch. One op
// is the wall time until all N are ready; each iteration starts from a
// repository without worktrees (clean-up is not timed). The git-loop
// variants are the peer: a plain loop of "git worktree add -b".
//
//	go test -run '^$' -bench EnsureMany -benchtime 3x ./internal/worktree/
func BenchmarkEnsureMany(b *testing.B) {
	for _, files := range []int{0, 200} {
		for _, n := range []int{50, 200} {
			b.Run(fmt.Sprintf("files=%d/agents=%d", files, n), func(b *testing.B) {
				benchEnsureMany(b, files, n)
			})
			// The peer: what one "git worktree add -b" after another costs.
			b.Run(fmt.Sprintf("files=%d/agents=%d/git-loop", files, n), func(b *testing.B) {
				benchGitLoop(b, files, n)
			})
		}
	}
}

func benchEnsureMany(b *testing.B, files, n int) {
	ctx := context.Background()
	repo := newBigRepo(b, files) // files=0: one commit of the empty tree
	root := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		stateDir := filepath.Join(root, fmt.Sprint(i))
		m, err := Open(ctx, Options{Repo: repo, StateDir: stateDir})
		if err != nil {
			b.Fatal(err)
		}
		errs := make(chan error, n)
		var wg sync.WaitGroup
		b.StartTimer()
		for j := range n {
			wg.Go(func() {
				_, err := m.Ensure(ctx, fmt.Sprintf("a%03d", j))
				errs <- err
			})
		}
		wg.Wait()
		b.StopTimer()
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		resetWorktrees(b, repo, stateDir)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*n), "ms/agent")
}

func benchGitLoop(b *testing.B, files, n int) {
	repo := newBigRepo(b, files)
	base := gitT(b, repo, "rev-parse", "HEAD")
	root := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		stateDir := filepath.Join(root, fmt.Sprint(i))
		for j := range n {
			agent := fmt.Sprintf("a%03d", j)
			path := filepath.Join(stateDir, "worktrees", agent)
			cmd := exec.Command("git", "-C", repo, "worktree", "add", "--quiet", "-b", "swarm/"+agent, path, base)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("git worktree add: %v: %s", err, out)
			}
		}
		b.StopTimer()
		resetWorktrees(b, repo, stateDir)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*n), "ms/agent")
}

// BenchmarkEnsureManyExisting is a start over existing branches with a
// deleted state dir (issue 31): N agents' runners call Ensure at once, each
// agent's branch and registration exist, its worktree directory is gone.
// One op is the wall time until all N are ready; ms/agent must stay flat
// as N grows, and regs/agent (registrations looked at per agent) stay a
// small constant, not N.
//
//	go test -run '^$' -bench EnsureManyExisting -benchtime 3x ./internal/worktree/
func BenchmarkEnsureManyExisting(b *testing.B) {
	for _, n := range []int{250, 500, 1000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			ctx := context.Background()
			repo := newRepo(b)
			_, agents := restartOverBranches(b, repo, n)
			looked := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if err := os.RemoveAll(filepath.Join(repo, ".swarm")); err != nil {
					b.Fatal(err)
				}
				m, err := Open(ctx, Options{Repo: repo, StateDir: filepath.Join(repo, ".swarm")})
				if err != nil {
					b.Fatal(err)
				}
				errs := make(chan error, n)
				var wg sync.WaitGroup
				b.StartTimer()
				for _, a := range agents {
					wg.Go(func() {
						_, err := m.Ensure(ctx, a)
						errs <- err
					})
				}
				wg.Wait()
				b.StopTimer()
				close(errs)
				for err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				looked += m.regIndex.looked
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*n), "ms/agent")
			b.ReportMetric(float64(looked)/float64(b.N*n), "regs/agent")
		})
	}
}
