package control

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// budgetAPI is a fakeAPI with budgets.
type budgetAPI struct {
	*fakeAPI
	mu   sync.Mutex
	sets []BudgetSetRequest
}

func (b *budgetAPI) Budget(context.Context) ([]BudgetStatus, error) {
	return []BudgetStatus{{Scope: "alice", LimitUSD: 10, SpentUSD: 8.5, Percent: 85, Level: "80%", Window: "24h"}}, nil
}

func (b *budgetAPI) SetBudget(_ context.Context, req BudgetSetRequest) ([]BudgetStatus, error) {
	if req.Scope == "dave" {
		return nil, fmt.Errorf("%w: dave", ErrUnknownAgent)
	}
	if req.Scope == "alice" && req.USD == 0 && !req.Clear {
		return nil, fmt.Errorf("%w: agent alice may not raise its own budget", ErrForbidden)
	}
	b.mu.Lock()
	b.sets = append(b.sets, req)
	b.mu.Unlock()
	return []BudgetStatus{{Scope: req.Scope, LimitUSD: req.USD}}, nil
}

// TestBudgetRoutes: an API with budgets serves them, and the client's
// errors keep their kinds; one without has no such route.
func TestBudgetRoutes(t *testing.T) {
	api := &budgetAPI{fakeAPI: &fakeAPI{paused: map[string]PauseRequest{}}}
	path := filepath.Join(t.TempDir(), "s.sock")
	s, err := Listen(path, api, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := NewClient(path)
	ctx := context.Background()
	bs, err := c.Budget(ctx)
	if err != nil || len(bs) != 1 || bs[0].Scope != "alice" || bs[0].Percent != 85 {
		t.Fatalf("Budget = %+v, %v", bs, err)
	}
	bs, err = c.SetBudget(ctx, BudgetSetRequest{Scope: "(swarm)", USD: 40})
	if err != nil || len(bs) != 1 || bs[0].LimitUSD != 40 || api.sets[0] != (BudgetSetRequest{Scope: "(swarm)", USD: 40}) {
		t.Fatalf("SetBudget = %+v, %v; api got %+v", bs, err, api.sets)
	}
	if _, err := c.SetBudget(ctx, BudgetSetRequest{Scope: "dave", USD: 1}); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("SetBudget(dave) = %v", err)
	}
	if _, err := c.SetBudget(ctx, BudgetSetRequest{Scope: "alice"}); err == nil || !strings.Contains(err.Error(), "may not raise") {
		t.Fatalf("forbidden SetBudget = %v", err)
	}

	_, plain, _ := serve(t)
	if _, err := plain.Budget(ctx); err == nil {
		t.Fatal("a daemon without budgets served /v1/budget")
	}
}
