package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/budget"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/daemon"
)

// NewBudgetCommand is `swarmd budget` and `swarmd budget set`.
func NewBudgetCommand(s Streams) *cobra.Command {
	o := &operateOptions{IO: s}
	cmd := newBudgetCmd(o, nil)
	cmd.PersistentFlags().StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	cmd.AddCommand(newBudgetSetCmd(o, nil))
	return cmd
}

// budgetOptions are `swarmd budget`'s.
type budgetOptions struct {
	*operateOptions
	JSON bool
}

// newBudgetCmd is `swarmd budget`; runF (nil: budgetRun) runs it.
func newBudgetCmd(o *operateOptions, runF func(context.Context, *budgetOptions) error) *cobra.Command {
	opts := &budgetOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Show spend and limits per agent and for the swarm, in the current windows",
		Long: `Show what each agent, and the swarm as a whole, has spent in its current budget window (the
running sessions' spend so far included), against its limits: US dollars and tokens (input and
output). USED is the larger share of the two limits; at 80% and 95% the event log gets a
BudgetWarning and the agent's prompt says what is left; at 100% its session is cancelled and it is
paused (STATUS paused) until the window ends (ENDS, UTC) or 'swarmd budget set' raises the limit.
A cost is what the backend reported, else its tokens times the configured prices.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return orRun(runF, budgetRun)(cmd.Context(), opts) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func budgetRun(ctx context.Context, opts *budgetOptions) error {
	c, err := opts.client()
	if err != nil {
		return err
	}
	bs, err := c.Budget(ctx)
	if err != nil {
		return controlErr(err)
	}
	if opts.JSON {
		return printJSON(opts.IO.Out, bs)
	}
	return writeBudgets(opts.IO.Out, bs)
}

// budgetSetOptions are `swarmd budget set`'s.
type budgetSetOptions struct {
	*operateOptions
	Args  []string // AGENT USD, USD (--swarm) or AGENT (--clear)
	Swarm bool
	Clear bool
}

// newBudgetSetCmd is `swarmd budget set`; runF (nil: budgetSetRun) runs it.
func newBudgetSetCmd(o *operateOptions, runF func(context.Context, *budgetSetOptions) error) *cobra.Command {
	opts := &budgetSetOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "set AGENT USD | --swarm USD | AGENT --clear",
		Short: "Set an agent's (or the swarm's) USD limit per window; it survives restarts",
		Long: `Set the USD limit of an agent's budget, or with --swarm of the swarm's, in place of the config
file's (0: no USD limit). The limit is stored in swarm.db and survives restarts; --clear goes back to
the file's. An agent paused because its budget ran out goes on at once if the new limit allows it.
Only the operator may set budgets: a request from inside an agent's session is refused.`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Args = args
			return orRun(runF, budgetSetRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Swarm, "swarm", false, "the swarm's budget (all agents together)")
	cmd.Flags().BoolVar(&opts.Clear, "clear", false, "drop the limit set here: the config file's applies again")
	return cmd
}

func budgetSetRun(ctx context.Context, opts *budgetSetOptions) error {
	req, err := budgetRequest(opts.Args, opts.Swarm, opts.Clear)
	if err != nil {
		return err
	}
	c, err := opts.client()
	if err != nil {
		return err
	}
	bs, err := c.SetBudget(ctx, req)
	if err != nil {
		return controlErr(fmt.Errorf("budget set %s: %w", req.Scope, err))
	}
	for _, b := range bs {
		if b.Scope == req.Scope {
			return writeBudgets(opts.IO.Out, []control.BudgetStatus{b})
		}
	}
	return nil
}

// budgetRequest reads `budget set`'s arguments.
func budgetRequest(args []string, swarm, clear bool) (control.BudgetSetRequest, error) {
	var req control.BudgetSetRequest
	switch {
	case swarm && clear && len(args) == 0:
		return control.BudgetSetRequest{Scope: budget.Swarm, Clear: true}, nil
	case swarm && len(args) == 1:
		req.Scope = budget.Swarm
	case !swarm && clear && len(args) == 1:
		return control.BudgetSetRequest{Scope: args[0], Clear: true}, nil
	case !swarm && !clear && len(args) == 2:
		req.Scope, args = args[0], args[1:]
	default:
		return req, usagef("budget set: give AGENT USD, --swarm USD, or AGENT --clear (--swarm --clear)")
	}
	usd, err := strconv.ParseFloat(args[0], 64)
	if err != nil || usd < 0 || math.IsInf(usd, 0) || math.IsNaN(usd) {
		return req, usagef("budget set: %q is not an amount of US dollars, 0 or more (such as 25 or 7.50)", args[0])
	}
	if usd > maxBudgetUSD {
		return req, usagef("budget set: %s US dollars is over the %s limit of a budget (for no limit: --clear)", args[0], daemon.FormatUSD(maxBudgetUSD))
	}
	req.USD = usd
	return req, nil
}

// maxBudgetUSD bounds a budget the operator sets: a figure beyond it is a
// slip of the keyboard, and prints as hundreds of digits.
const maxBudgetUSD = 1e9

// writeBudgets renders the budgets table.
func writeBudgets(w io.Writer, bs []control.BudgetStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tSPENT\tLIMIT\tTOKENS\tUSED\tWINDOW\tENDS\tSTATUS\tLIMIT FROM")
	for _, b := range bs {
		limit, used := "-", "-"
		if b.LimitUSD > 0 {
			limit = daemon.FormatUSD(b.LimitUSD)
		}
		toks := daemon.TokensText(b.SpentTokens)
		if b.LimitTokens > 0 {
			toks += "/" + daemon.TokensText(b.LimitTokens)
		}
		if b.LimitUSD > 0 || b.LimitTokens > 0 {
			used = strconv.FormatFloat(b.Percent, 'f', 0, 64) + "%"
		}
		status := b.Level
		if b.LimitUSD == 0 && b.LimitTokens == 0 {
			status = "no limit"
		}
		if b.Paused {
			status += " (paused)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Scope, daemon.FormatUSD(b.SpentUSD), limit, toks, used, b.Window,
			b.WindowEnd.UTC().Format("2006-01-02 15:04"), status, b.Source)
	}
	return tw.Flush()
}
