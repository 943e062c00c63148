package worktree

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// BenchmarkEnsureMany is the daemon's ramp: N agents' runners call Ensure at
// once on a fresh state dir, each creating its worktree and branch. One op
// is the wall time until all N are ready; each iteration starts from a
// repository without worktrees (clean-up is not timed).
//
//	go test -run '^$' -bench EnsureMany -benchtime 3x ./internal/worktree/
func BenchmarkEnsureMany(b *testing.B) {
	for _, files := range []int{0, 200} {
		for _, n := range []int{50, 200} {
			b.Run(fmt.Sprintf("files=%d/agents=%d", files, n), func(b *testing.B) {
				benchEnsureMany(b, files, n)
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
