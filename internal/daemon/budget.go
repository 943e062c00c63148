package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/spend"
)

// newSpendKeeper is the budgets' keeper (package spend) wired to this
// daemon: its store, its runners, its config in force, its operator.
func (d *Daemon) newSpendKeeper() *spend.Keeper {
	return spend.New(spend.Options{Store: d.db, Journal: d.journal, Agents: d.reg, Metrics: d.metrics,
		Config:    func() *config.Config { cfg, _ := d.current(); return cfg },
		Log:       d.log,
		Exhausted: d.notifyBudgetExhausted,
		Resume: func(ctx context.Context, agent, actor, why string) error {
			_, err := d.resumeAgentFor(ctx, agent, actor, why)
			return err
		}})
}

// Budget implements control.BudgetAPI.
func (a controlAPI) Budget(context.Context) ([]control.BudgetStatus, error) {
	cfg, _ := a.d.current()
	return a.d.budget.Statuses(cfg, time.Now()), nil
}

// SetBudget implements control.BudgetAPI: only the operator may, never an
// agent (not even one with allow_control: it could lift its own limit).
func (a controlAPI) SetBudget(ctx context.Context, req control.BudgetSetRequest) ([]control.BudgetStatus, error) {
	if err := a.d.operatorOnly(ctx, "set budgets"); err != nil {
		return nil, err
	}
	if err := a.d.budget.Set(ctx, req, "operator"); err != nil {
		return nil, err
	}
	return a.Budget(ctx)
}

// operatorOnly refuses a request from inside one of this daemon's process
// trees: a session's, or a hook's or merge gate's (code an agent can change).
func (d *Daemon) operatorOnly(ctx context.Context, what string) error {
	if name, ok := d.caller(ctx); ok {
		return fmt.Errorf("%w: agent %s may not %s (only the operator may)", control.ErrForbidden, name, what)
	}
	if tree, ok := d.ownTreeCaller(ctx); ok {
		return fmt.Errorf("%w: a process of this daemon's tree %s (a hook or the merge gate) may not %s (only the operator may)",
			control.ErrForbidden, tree, what)
	}
	return nil
}

// FormatUSD is "$0", "$0.0033" under a dollar, "$12.34" above.
func FormatUSD(usd float64) string { return spend.FormatUSD(usd) }

// TokensText is FormatTokens with "0" for none.
func TokensText(n int64) string { return spend.TokensText(n) }

// FormatTokens is a token count for a table: "950", "12.3k", "4.5M"; "-" for none.
func FormatTokens(n int64) string { return spend.FormatTokens(n) }
