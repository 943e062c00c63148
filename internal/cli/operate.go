package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/store"
)

// operateOptions are what the operator commands share: the config that
// names the state dir (and so the socket and the logs).
type operateOptions struct {
	IO         Streams
	ConfigPath string
}

func (o *operateOptions) config() (*config.Config, error) {
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		return nil, usage(err)
	}
	return cfg, nil
}

func (o *operateOptions) client() (*control.Client, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	return control.NewClient(cfg.SocketPath()), nil
}

// controlErr turns "no daemon" and "unknown agent" into usage errors (exit 2).
func controlErr(err error) error {
	if errors.Is(err, control.ErrNoDaemon) || errors.Is(err, control.ErrUnknownAgent) || errors.Is(err, control.ErrConflict) {
		return usage(err)
	}
	return err
}

// NewOperateCommands are `swarmd status`, `stop`, `start` and `logs`.
func NewOperateCommands(s Streams) []*cobra.Command {
	o := &operateOptions{IO: s}
	cmds := []*cobra.Command{newStatusCmd(o, nil), newAgentVerbCmd(o, "stop", nil), newAgentVerbCmd(o, "start", nil), newLogsCommand(o)}
	for _, c := range cmds {
		c.Flags().StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	}
	return cmds
}

// statusOptions are `swarmd status`'s.
type statusOptions struct {
	*operateOptions
	JSON bool
}

// newStatusCmd is `swarmd status`; runF (nil: statusRun) runs it.
func newStatusCmd(o *operateOptions, runF func(context.Context, *statusOptions) error) *cobra.Command {
	opts := &statusOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One row per agent: state, session, errors, spend, health",
		Long: `Show every agent of the running daemon: state, session seq, current session age, time since the
session last printed, error counters, spend and branch. HEALTH is "stalled" for a Running session
that has printed nothing for stall_after (default 5m), "spawning-timeout" for Spawning over 60 s,
"paused" for an agent held by swarmd pause ("paused (frozen)" when --now froze its session), and
"no commits" when the agent's last 5 successful sessions committed nothing (a git that cannot
commit, or an agent that only talks).
TOKENS (input and output) and COST are the sums over every session swarm.db has recorded for the
agent; COST is what the backend reported (Claude Code does), else the tokens priced by prices.
Below the table: which isolation is in force, and how busy the store's one write connection was
over about the last minute (near 100%, writes queue: the store bounds the daemon).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return orRun(runF, statusRun)(cmd.Context(), opts) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func statusRun(ctx context.Context, opts *statusOptions) error {
	c, err := opts.client()
	if err != nil {
		return err
	}
	as, err := c.Agents(ctx)
	if err != nil {
		return controlErr(err)
	}
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	rows := statusRows(ctx, cfg, as, opts.IO.Err)
	if opts.JSON {
		return printJSON(opts.IO.Out, rows)
	}
	if err := writeStatus(opts.IO.Out, rows, time.Now()); err != nil {
		return err
	}
	if info, err := c.Daemon(ctx); err == nil {
		for _, line := range []string{info.Isolation, info.Store} {
			if line != "" {
				fmt.Fprintln(opts.IO.Out, line)
			}
		}
	}
	return nil
}

// agentVerbOptions are `swarmd stop`'s and `start`'s.
type agentVerbOptions struct {
	*operateOptions
	Verb  string // stop or start
	Agent string
}

// newAgentVerbCmd is `swarmd stop AGENT` or `start AGENT`; runF (nil:
// agentVerbRun) runs it.
func newAgentVerbCmd(o *operateOptions, verb string, runF func(context.Context, *agentVerbOptions) error) *cobra.Command {
	opts := &agentVerbOptions{operateOptions: o, Verb: verb}
	short := "OperatorStop one agent (its session is cancelled with its grace period)"
	if verb == "start" {
		short = "Start a Stopped agent again, with its error counters reset"
	}
	return &cobra.Command{
		Use:   verb + " AGENT",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Agent = args[0]
			return orRun(runF, agentVerbRun)(cmd.Context(), opts)
		},
	}
}

func agentVerbRun(ctx context.Context, opts *agentVerbOptions) error {
	c, err := opts.client()
	if err != nil {
		return err
	}
	do, doing := c.Stop, "stopping"
	if opts.Verb == "start" {
		do, doing = c.Start, "starting"
	}
	if err := do(ctx, opts.Agent); err != nil {
		return controlErr(err)
	}
	fmt.Fprintf(opts.IO.Out, "%s %s\n", doing, opts.Agent)
	return nil
}

// writeStatus renders the status table.
func writeStatus(w io.Writer, as []StatusRow, now time.Time) error {
	if len(as) > 0 && as[0].DaemonFault != "" {
		fmt.Fprintf(w, "DAEMON UNHEALTHY: %s\n", as[0].DaemonFault)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	swarm := slices.ContainsFunc(as, func(r StatusRow) bool { return r.Daemon != "" })
	if swarm {
		fmt.Fprint(tw, "DAEMON\t")
	}
	fmt.Fprintln(tw, "AGENT\tSTATE\tSEQ\tSESSION\tOUTPUT\tERRORS\tTOKENS\tCOST\tBRANCH\tHEALTH\tWHY")
	for _, a := range as {
		why := ""
		switch {
		case a.State == "Stopped" || a.State == "CoolingDown":
			why = printable(a.Reason, false) // why it stopped, or the error it is backing off from (what a session printed, maybe)
		case a.Paused:
			why = printable(daemon.JoinReason("paused by "+a.PausedBy, a.PauseReason), false)
		}
		var sp SpendJSON
		if a.Spend != nil {
			sp = *a.Spend
		}
		if swarm {
			fmt.Fprintf(tw, "%s\t", dash(a.Daemon))
		}
		state, health := a.State, a.Health
		if health == "idle" {
			// Waiting for mail or a task, starting no session: the machine
			// holds it in BuildingPrompt, but it builds nothing.
			state, health = "idle", ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\n", a.Name, state, a.Seq,
			age(now, a.SessionStarted), age(now, a.LastOutput), a.ConsecutiveErrors, a.TotalErrors,
			daemon.FormatTokens(sp.TokensIn+sp.TokensOut), fmtCost(sp.CostUSD, sp.TokensIn+sp.TokensOut), a.Branch, dash(health), dash(truncate(why, 72)))
	}
	return tw.Flush()
}

// StatusRow is one agent of `swarmd status`: the daemon's view and what
// swarm.db has recorded of its sessions.
type StatusRow struct {
	control.AgentStatus
	Spend *SpendJSON `json:"spend,omitempty"` // nil: no session recorded, or swarm.db unreadable
	// Daemon runs the agent (its host and state dir), on a shared store;
	// rows of other daemons' agents carry their recorded state only.
	Daemon string `json:"daemon,omitempty"`
}

// SpendJSON is an agent's spend summed over its recorded sessions.
type SpendJSON struct {
	Sessions  int     `json:"sessions"`
	TokensIn  int64   `json:"tokens_in"`
	TokensOut int64   `json:"tokens_out"`
	CostUSD   float64 `json:"cost_usd"`
}

// noCommitSessions is how many successful sessions in a row without a
// commit make status say "no commits".
const noCommitSessions = 5

// statusRows adds each agent's spend from swarm.db, and HEALTH "no commits"
// (when nothing else is wrong) for an agent whose last noCommitSessions
// successful sessions committed nothing: sessions that succeed but never
// commit are otherwise silent. A database that cannot be read leaves both
// out, with a warning: the daemon's view still shows.
func statusRows(ctx context.Context, cfg *config.Config, as []control.AgentStatus, warn io.Writer) []StatusRow {
	rows := make([]StatusRow, len(as))
	for i, a := range as {
		rows[i].AgentStatus = a
	}
	db, err := openStateDB(ctx, cfg, "status")
	var (
		spend map[string]store.Spend
		dry   map[string]bool
	)
	if err == nil {
		spend, err = db.Spend(ctx)
		if err == nil {
			dry, err = db.NoCommits(ctx, noCommitSessions)
		}
		if err == nil && cfg.SharedStore() {
			rows, err = swarmRows(ctx, db, rows)
		}
		db.Close()
	}
	if err != nil {
		fmt.Fprintln(warn, "swarmd: status: spend not shown: "+oneLine(err.Error()))
		return rows
	}
	for i := range rows {
		if sp, ok := spend[rows[i].Name]; ok {
			rows[i].Spend = &SpendJSON{Sessions: sp.Sessions, TokensIn: sp.TokensIn, TokensOut: sp.TokensOut, CostUSD: sp.CostUSD}
		}
		if dry[rows[i].Name] && rows[i].Health == "" {
			rows[i].Health = "no commits"
		}
	}
	return rows
}

// swarmRows names the daemon of each agent on a shared store and adds the
// other daemons' agents, with the state they last recorded.
func swarmRows(ctx context.Context, db *store.DB, rows []StatusRow) ([]StatusRow, error) {
	leases, err := db.Leases(ctx)
	if err != nil {
		return rows, err
	}
	recs, err := db.Agents(ctx)
	if err != nil {
		return rows, err
	}
	local := map[string]int{}
	for i, r := range rows {
		local[r.Name] = i
	}
	for _, l := range leases {
		if i, ok := local[l.Agent]; ok {
			rows[i].Daemon = l.Daemon
			continue
		}
		rec := recs[l.Agent]
		rows = append(rows, StatusRow{AgentStatus: control.AgentStatus{Name: l.Agent, State: dash(rec.State), Seq: rec.Seq,
			Reason: rec.StopReason, TotalErrors: rec.TotalErrors, ConsecutiveErrors: rec.ConsecutiveErrors}, Daemon: l.Daemon})
	}
	return rows, nil
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	default:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
