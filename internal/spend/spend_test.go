package spend

import (
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/budget"
)

// TestBudgetNote: the prompt's note appears at 80% of the tightest budget
// and says what is left, whose budget it is and when the window ends.
func TestBudgetNote(t *testing.T) {
	k := New(Options{})
	now := time.Now()
	k.ledger.SetLimit("alice", budget.Limit{USD: 10, Tokens: 1000}, budget.Spend{USD: 7}, now)
	if n := k.Note("alice"); n != "" {
		t.Fatalf("note at 70%%: %q", n)
	}
	k.ledger.Live("alice", "s1", budget.Spend{USD: 1.5, Tokens: 100}, now)
	n := k.Note("alice")
	if !strings.HasPrefix(n, "$1.50 of $10.00, 900 of 1.0k tokens left of your budget: 85% spent in the 24h window that ends ") {
		t.Fatalf("note %q", n)
	}
	k.ledger.SetLimit(budget.Swarm, budget.Limit{USD: 9}, budget.Spend{USD: 8.6}, now)
	// The swarm's budget began after s1's spend so far: 8.6 of 9 is tighter.
	if n := k.Note("alice"); !strings.HasPrefix(n, "$0.4000 of $9.00 left of the swarm's budget (all agents together): 96% spent") {
		t.Fatalf("swarm note %q", n)
	}
	if n := k.Note("bob"); !strings.Contains(n, "swarm's budget") {
		t.Fatalf("bob's note %q", n)
	}
}
