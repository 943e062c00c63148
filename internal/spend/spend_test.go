package spend

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/budget"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/metrics"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
	"go.uber.org/goleak"
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

// noAgents is a registry with no runners.
type noAgents struct{}

func (noAgents) Names() []string { return nil }
func (noAgents) Runner(name string) (*runner.Runner, error) {
	return nil, errors.New("no runner " + name)
}

// noMetrics drops the gauges.
type noMetrics struct{}

func (noMetrics) SetPaused(string, bool) {}

// keeper is a Keeper of cfg's budgets on a real swarm.db in a temporary
// directory, with no runners.
func keeper(t *testing.T, path string, cfg *config.Config) *Keeper {
	t.Helper()
	db, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j := db.NewJournal(store.JournalOptions{})
	j.Start()
	t.Cleanup(func() {
		j.Close()
		db.Close()
	})
	k := New(Options{Store: db, Journal: j, Agents: noAgents{}, Metrics: noMetrics{},
		Config: func() *config.Config { return cfg }, Exhausted: func(string, string) {},
		Resume: func(context.Context, string, string, string) error { return nil }})
	t.Cleanup(k.Stop)
	return k
}

// swarmd budget set refuses what is not an agent or not an amount; a limit
// it sets is stored, and a Keeper started later (a restart) keeps it.
func TestSetLimit(t *testing.T) {
	cfg := &config.Config{Agents: []config.Agent{{Name: "alice"}}}
	cfg.Agents[0].Budget.USD = 10
	path := filepath.Join(t.TempDir(), "swarm.db")
	k := keeper(t, path, cfg)
	k.Stop() // before Start: nothing to stop
	ctx := context.Background()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.Start(ctx); err != nil { // running: nothing to do
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  control.BudgetSetRequest
		want error
	}{
		{control.BudgetSetRequest{Scope: "bob", USD: 1}, control.ErrUnknownAgent},
		{control.BudgetSetRequest{Scope: "alice", USD: -1}, control.ErrConflict},
		{control.BudgetSetRequest{Scope: "alice", USD: math.NaN()}, control.ErrConflict},
		{control.BudgetSetRequest{Scope: "alice", USD: math.Inf(1)}, control.ErrConflict},
	} {
		if err := k.Set(ctx, c.req, "operator"); !errors.Is(err, c.want) {
			t.Errorf("set %+v: %v, want %v", c.req, err, c.want)
		}
	}
	if err := k.Set(ctx, control.BudgetSetRequest{Scope: "alice", USD: 25}, "operator"); err != nil {
		t.Fatal(err)
	}
	limitOf := func(k *Keeper) (float64, string) {
		for _, st := range k.Statuses(cfg, time.Now()) {
			if st.Scope == "alice" {
				return st.LimitUSD, st.Source
			}
		}
		t.Fatal("no row for alice")
		return 0, ""
	}
	if usd, src := limitOf(k); usd != 25 || !strings.HasPrefix(src, "set by operator ") {
		t.Fatalf("after set: $%v from %q, want $25 set by operator", usd, src)
	}
	k.Stop()
	again := keeper(t, path, cfg)
	if err := again.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if usd, src := limitOf(again); usd != 25 || !strings.HasPrefix(src, "set by operator ") {
		t.Fatalf("after a restart: $%v from %q, want $25 set by operator", usd, src)
	}
	if err := again.Set(ctx, control.BudgetSetRequest{Scope: "alice", Clear: true}, "operator"); err != nil {
		t.Fatal(err)
	}
	if usd, src := limitOf(again); usd != 10 || src != "config" {
		t.Fatalf("after clear: $%v from %q, want the config's $10", usd, src)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A budget found spent at start, its agents not paused yet (the session
// that spent it was recovered from its log, or the limit was lowered in
// the file while no daemon ran), pauses them and tells the operator once
// per budget, as the crossing does while the daemon runs; a start that
// finds them paused tells nobody again.
func TestStartTellsOfABudgetFoundSpent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	cfg := &config.Config{Agents: []config.Agent{{Name: "alice"}, {Name: "bob"}, {Name: "carol"}}}
	cfg.Agents[0].Budget.USD = 1
	type told struct{ scope, reason string }
	var got []told
	start := func() {
		t.Helper()
		k := keeper(t, path, cfg)
		k.o.Exhausted = func(scope, reason string) { got = append(got, told{scope, reason}) }
		if err := k.Start(ctx); err != nil {
			t.Fatal(err)
		}
		k.Stop()
	}
	db, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := store.FormatTime(time.Now())
	if _, err := db.ExecCount(ctx, "spent", `INSERT INTO sessions (session_id, agent, seq, started_at, ended_at, cost_usd)
		VALUES ('alice-1-a', 'alice', 1, ?, ?, 2.5)`, now, now); err != nil {
		t.Fatal(err)
	}
	db.Close()

	start()
	if len(got) != 1 || got[0].scope != "alice" || !strings.HasPrefix(got[0].reason, "budget_exhausted: ") {
		t.Fatalf("told %+v at the start that paused alice, want alice's budget once", got)
	}
	start()
	if len(got) != 1 {
		t.Fatalf("told %+v at a start that found alice paused, want nothing more", got)
	}
	// The swarm's budget, lowered while no daemon ran: bob and carol are
	// paused with it, and it is told once.
	cfg.SwarmBudget.USD = 2
	start()
	if len(got) != 2 || got[1].scope != budget.Swarm {
		t.Fatalf("told %+v at the start that paused bob and carol for the swarm's budget, want it once", got)
	}
}

// named is a registry of the agents named, with no runners.
type named []string

func (n named) Names() []string { return n }
func (named) Runner(name string) (*runner.Runner, error) {
	return nil, errors.New("no runner " + name)
}

// clock is a time the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestBudgetLeftAfterTheWindowRolledOver: swarmd_budget_remaining_usd is
// what is left in the window of the scrape. A $0.30 session of a $1 a
// minute budget leaves 0.7; once the next minute begins, with no session
// since, the gauge says 1, as swarmd budget does (it said 0.7 until the
// agent's next session: the gauge was set only when spend changed).
func TestBudgetLeftAfterTheWindowRolledOver(t *testing.T) {
	cfg := &config.Config{Agents: []config.Agent{{Name: "alice"}}}
	cfg.Agents[0].Budget.USD, cfg.Agents[0].Budget.Window = 1, time.Minute
	k := keeper(t, filepath.Join(t.TempDir(), "swarm.db"), cfg)
	c := &clock{now: budget.WindowStart(time.Now(), time.Minute).Add(10 * time.Second)}
	k.o.Now, k.o.Agents = c.Now, named{"alice"}
	m := metrics.New(metrics.BuildInfo{})
	m.BudgetLeft(k.LeftUSD)
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	left := func() float64 {
		t.Helper()
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "swarmd_budget_remaining_usd" && len(mf.GetMetric()) == 1 {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no swarmd_budget_remaining_usd series for alice")
		return 0
	}
	if got := left(); got != 1 {
		t.Fatalf("before any session: %v left, want 1", got)
	}
	k.OnSessionEnd(runner.SessionRecord{Agent: "alice", SessionID: "alice-1-000000000001", Seq: 1,
		Result: backend.Result{Usage: backend.Usage{CostUSD: 0.3}}})
	if got := left(); math.Abs(got-0.7) > 1e-9 {
		t.Fatalf("after a $0.30 session: %v left, want 0.7", got)
	}
	c.add(time.Minute)
	if st := k.Statuses(cfg, c.Now()); st[0].Scope != "alice" || st[0].SpentUSD != 0 {
		t.Fatalf("swarmd budget in the next window: %+v, want alice's row with nothing spent", st)
	}
	if got := left(); got != 1 {
		t.Fatalf("in the next window: %v left, want the whole 1 as swarmd budget says", got)
	}
}
