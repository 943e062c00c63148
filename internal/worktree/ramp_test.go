package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// New agents' worktrees are created and checked out in parallel: 40 agents
// at once must each get a complete, clean linked worktree on its own
// branch, on a repository with files and on one of the empty tree.
func TestEnsureConcurrent40ChecksOutEveryFile(t *testing.T) {
	for _, files := range []int{0, 120} {
		t.Run(fmt.Sprintf("files=%d", files), func(t *testing.T) {
			ctx := context.Background()
			repo := newBigRepo(t, files)
			m := openT(t, repo)
			const n = 40
			var wg sync.WaitGroup
			errs := make(chan error, 2*n)
			for i := range n {
				wg.Go(func() {
					agent := fmt.Sprintf("a%02d", i)
					// Ensure twice at once: the second must wait for the
					// first's checkout, not see a half-filled worktree.
					for range 2 {
						wg.Go(func() {
							wt, err := m.Ensure(ctx, agent)
							if err == nil {
								err = checkWorktree(m, wt, files)
							}
							errs <- err
						})
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			if got := len(worktreePaths(t, repo)); got != n {
				t.Fatalf("%d linked worktrees registered, want %d", got, n)
			}
			for i := range n {
				agent := fmt.Sprintf("a%02d", i)
				if got := gitT(t, m.Path(agent), "symbolic-ref", "--short", "HEAD"); got != "swarm/"+agent+"/work" {
					t.Errorf("%s is on %s", agent, got)
				}
				if st := gitT(t, m.Path(agent), "status", "--porcelain"); st != "" {
					t.Errorf("%s is not clean:\n%s", agent, st)
				}
				if _, err := os.Stat(filepath.Join(repo, ".git", "worktrees", agent, "locked")); !os.IsNotExist(err) {
					t.Errorf("%s left locked: %v", agent, err)
				}
				st, err := m.Status(ctx, agent)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.DirtyFiles) != 0 {
					t.Errorf("%s: Status dirty files %q", agent, st.DirtyFiles)
				}
			}
		})
	}
}

// checkWorktree checks, as soon as Ensure returns, that every file of the
// commit is there.
func checkWorktree(m *Manager, wt Worktree, files int) error {
	if wt.Path != m.Path(wt.Agent) || wt.Branch != "swarm/"+wt.Agent+"/work" || wt.Head != m.BaseCommit() {
		return fmt.Errorf("%s: unexpected %+v", wt.Agent, wt)
	}
	dotGit, err := os.ReadFile(filepath.Join(wt.Path, ".git"))
	if err != nil || !strings.HasPrefix(string(dotGit), "gitdir: ") {
		return fmt.Errorf("%s: not a linked worktree: %q, %v", wt.Agent, dotGit, err)
	}
	found := 0
	err = filepath.WalkDir(wt.Path, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && d.Name() != ".git" {
			found++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", wt.Agent, err)
	}
	if found != files {
		return fmt.Errorf("%s: %d files checked out, want %d", wt.Agent, found, files)
	}
	return nil
}
