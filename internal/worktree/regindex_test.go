package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// restartOverBranches makes n agents' worktrees, then deletes the state dir
// as an operator would: the branches and the registrations stay, and the
// Manager returned is a new one, as after a restart.
func restartOverBranches(t testing.TB, repo string, n int) (*Manager, []string) {
	t.Helper()
	ctx := context.Background()
	m := openT(t, repo)
	agents := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range agents {
		agents[i] = fmt.Sprintf("a%d", i+1) // a1 is a prefix of a10..a19: names git would number
		wg.Go(func() {
			_, err := m.Ensure(ctx, agents[i])
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(repo, ".swarm")); err != nil {
		t.Fatal(err)
	}
	return openT(t, repo), agents
}

// TestScanSharesOneReading: agents that saw their branches existing before
// a reading of the registrations began are answered from it: one reading
// of n registrations and a constant number of looks per agent, where a
// reading each made a start over existing branches quadratic. Each still
// finds its own registration as the leftover it is.
func TestScanSharesOneReading(t *testing.T) {
	const n = 40
	repo := newRepo(t)
	m, agents := restartOverBranches(t, repo, n)
	seen := time.Now() // every branch exists by now
	unlock, err := m.lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	for _, a := range agents {
		before := m.regIndex.looked
		s, err := m.scanRegistrations(a, seen)
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(m.commonDir, "worktrees", a)
		if len(s.leftovers) != 1 || s.leftovers[0] != want || s.checkedOut != "" || s.stale {
			t.Fatalf("%s: scan = %+v, want the leftover %s alone", a, s, want)
		}
		looked := m.regIndex.looked - before
		if a == agents[0] {
			looked -= n // the one reading
		}
		if looked != 1 {
			t.Fatalf("%s: looked at %d registrations, want its own alone", a, looked)
		}
	}
	if got, want := m.regIndex.looked, n+n; got != want {
		t.Fatalf("looked at %d registrations in all, want %d (one reading, one look per agent)", got, want)
	}
}

// TestEnsureManyOverExistingBranches: a start over existing branches with a
// deleted state dir gives every agent its worktree back on its branch,
// each registered once, and reads the registrations far fewer than once
// per agent.
func TestEnsureManyOverExistingBranches(t *testing.T) {
	const n = 40
	repo := newRepo(t)
	m, agents := restartOverBranches(t, repo, n)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, a := range agents {
		wg.Go(func() {
			wt, err := m.Ensure(ctx, a)
			if err == nil && gitT(t, wt.Path, "branch", "--show-current") != "swarm/"+a+"/work" {
				err = fmt.Errorf("%s: worktree not on its branch", a)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	list := gitT(t, repo, "worktree", "list", "--porcelain") + "\n"
	for _, a := range agents {
		if got := strings.Count(list, "branch refs/heads/swarm/"+a+"/work\n"); got != 1 {
			t.Errorf("%s: branch listed %d times:\n%s", a, got, list)
		}
	}
	if strings.Contains(list, "prunable") {
		t.Errorf("stale registrations left:\n%s", list)
	}
	// Readings are shared by the agents queued for the lock; at worst
	// (agents arriving one by one) each reads all n.
	if got := m.regIndex.looked; got >= n*n/2 {
		t.Errorf("looked at %d registrations for %d agents: a reading per agent", got, n)
	}
}

// TestScanReadsAgainForABranchSeenLater: a registration made after a reading
// is seen by an agent that found its branch existing after it, so a branch
// checked out in another worktree since is still refused.
func TestScanReadsAgainForABranchSeenLater(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	m := openT(t, repo)
	if _, err := m.Ensure(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(m.Path("alice")); err != nil {
		t.Fatal(err)
	}
	gitT(t, repo, "worktree", "prune")
	// Another agent's start reads the registrations: none holds alice's branch.
	if _, err := m.Ensure(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	unlock, err := m.lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.scanRegistrations("alice", time.Now()); err != nil {
		t.Fatal(err)
	}
	unlock()
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	gitT(t, repo, "worktree", "add", "-q", elsewhere, "swarm/alice/work")
	_, err = m.Ensure(ctx, "alice")
	if !errors.Is(err, ErrCheckedOut) || !strings.Contains(err.Error(), "checked out at "+realPathLoose(elsewhere)) {
		t.Fatalf("Ensure = %v, want ErrCheckedOut naming %s", err, elsewhere)
	}
}
