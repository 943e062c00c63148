package worktree

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// A sandbox's access pins every other agent's branch, creating the ones
// that do not exist yet; a peer creating its own worktree at that moment
// waits for it and finds the branch, and never fails (it did once: "another
// git is creating it", the agent stopped).
func TestAccessRacesAPeersCreation(t *testing.T) {
	ctx := context.Background()
	for i := range 20 {
		m := openT(t, newRepo(t))
		if _, err := m.Ensure(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var accErr, ensErr error
		var acc Access
		wg.Add(2)
		go func() { defer wg.Done(); acc, accErr = m.Access("alice", []string{"alice", "bob"}) }()
		go func() { defer wg.Done(); _, ensErr = m.Ensure(ctx, "bob") }()
		wg.Wait()
		if accErr != nil || ensErr != nil {
			t.Fatalf("round %d: access %v, bob's creation %v", i, accErr, ensErr)
		}
		bob := filepath.Join(m.commonDir, "refs", "heads", "swarm", "bob")
		if !slices.Contains(acc.Pinned, bob) {
			t.Fatalf("round %d: bob's branch not pinned: %v", i, acc.Pinned)
		}
		if slices.Contains(acc.Pinned, filepath.Join(m.commonDir, "refs", "heads", "swarm", "alice")) {
			t.Fatalf("round %d: alice's own branch pinned", i)
		}
		if _, err := os.Stat(m.Path("bob")); err != nil {
			t.Fatalf("round %d: bob's worktree: %v", i, err)
		}
	}
}
