package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/store"
)

// openStateDB opens swarm.db to read it, whether or not the daemon runs; it
// never creates one.
func openStateDB(ctx context.Context, cfg *config.Config, what string) (*store.DB, error) {
	db, err := store.Open(ctx, cfg.StoreTarget(), store.Options{NoCreate: true})
	if err != nil {
		return nil, usagef("%s: %w (has swarmd run in this repo yet?)", what, err)
	}
	return db, nil
}

// SessionJSON is one line of `swarmd sessions --json`.
type SessionJSON struct {
	Agent       string     `json:"agent"`
	Seq         uint32     `json:"seq"`
	SessionID   string     `json:"session_id"`
	Started     time.Time  `json:"started"`
	Ended       *time.Time `json:"ended,omitempty"`
	DurationMS  int64      `json:"duration_ms"`
	Outcome     string     `json:"outcome"` // "" while running
	AbortReason string     `json:"abort_reason,omitempty"`
	ExitCode    int        `json:"exit_code"`
	Signal      string     `json:"signal,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	TokensIn    int64      `json:"tokens_in"`
	TokensOut   int64      `json:"tokens_out"`
	CostUSD     float64    `json:"cost_usd"`
	ToolCalls   int        `json:"tool_calls"`
	Commits     int        `json:"commits"`
	ResultText  string     `json:"result_text,omitempty"`
	LogPath     string     `json:"log_path,omitempty"`
}

// sessionsOptions are `swarmd sessions`'s.
type sessionsOptions struct {
	*operateOptions
	Agent string // "": every agent
	Limit int    // the most recent; 0: all
	JSON  bool
}

// NewSessionsCommand is `swarmd sessions [AGENT]`: the recent sessions as the
// daemon recorded them in swarm.db.
func NewSessionsCommand(s Streams) *cobra.Command { return newSessionsCmd(&operateOptions{IO: s}, nil) }

// newSessionsCmd is `swarmd sessions`; runF (nil: sessionsRun) runs it.
func newSessionsCmd(o *operateOptions, runF func(context.Context, *sessionsOptions) error) *cobra.Command {
	opts := &sessionsOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "sessions [AGENT]",
		Short: "List recent sessions: outcome, duration, tokens, cost, commits, result",
		Long: `List the most recent sessions, oldest first, of one agent or of all: seq, outcome and abort reason,
duration, tokens (input and output), cost, commits and the start of the result text (of the
reason, for a session that did not succeed). Read from swarm.db, so it works whether or not the
daemon runs. Outcomes: success, error, timeout, interrupted (by urgent mail; not an error), max_turns,
permission_denied and budget_exhausted (stopped by swarmd on purpose; not errors either), orphaned
(swarmd died while it ran), and running.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Agent = ""
			if len(args) == 1 {
				opts.Agent = args[0]
			}
			return orRun(runF, sessionsRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	cmd.Flags().IntVarP(&opts.Limit, "limit", "n", 20, "how many sessions, the most recent (0: all)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON lines")
	return cmd
}

func sessionsRun(ctx context.Context, opts *sessionsOptions) error {
	if opts.Limit < 0 {
		return usagef("sessions: --limit %d: want 0 (all) or more", opts.Limit)
	}
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	db, err := openStateDB(ctx, cfg, "sessions")
	if err != nil {
		return err
	}
	defer db.Close()
	if err := knownToSwarm(ctx, cfg, opts.Agent, "sessions", func(ctx context.Context) (bool, error) {
		ss, err := db.Sessions(ctx, opts.Agent, 1)
		return len(ss) > 0, err
	}); err != nil {
		return err
	}
	ss, err := db.Sessions(ctx, opts.Agent, opts.Limit)
	if err != nil {
		return err
	}
	slices.Reverse(ss) // oldest first, the latest next to the prompt
	if opts.JSON {
		return writeSessionsJSON(opts.IO.Out, ss)
	}
	return writeSessions(opts.IO.Out, ss, time.Now())
}

func writeSessionsJSON(w io.Writer, ss []store.SessionRecord) error {
	enc := json.NewEncoder(w)
	for _, r := range ss {
		if err := enc.Encode(SessionJSON{
			Agent: r.Agent, Seq: r.Seq, SessionID: r.SessionID, Started: r.Started, Ended: r.Ended,
			DurationMS: r.Duration.Milliseconds(), Outcome: r.Outcome, AbortReason: r.AbortReason,
			ExitCode: r.ExitCode, Signal: r.Signal, Reason: r.Reason, TokensIn: r.TokensIn, TokensOut: r.TokensOut,
			CostUSD: r.CostUSD, ToolCalls: r.ToolCalls, Commits: r.Commits, ResultText: r.ResultText, LogPath: r.LogPath,
		}); err != nil {
			return err
		}
	}
	return nil
}

// writeSessions renders the sessions table, one bounded line per session.
func writeSessions(w io.Writer, ss []store.SessionRecord, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSEQ\tSTARTED\tDURATION\tOUTCOME\tABORT\tTOKENS\tCOST\tCOMMITS\tRESULT")
	for _, r := range ss {
		outcome, dur := r.Outcome, fmtDuration(r.Duration)
		if r.Ended == nil {
			outcome, dur = "running", fmtDuration(now.Sub(r.Started))
		}
		result := r.ResultText
		if outcome != store.OutcomeSuccess && r.Reason != "" {
			result = r.Reason
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Agent, r.Seq,
			r.Started.Local().Format("01-02 15:04:05"), dur, outcome, dash(r.AbortReason),
			daemon.FormatTokens(r.TokensIn+r.TokensOut), fmtCost(r.CostUSD, r.TokensIn+r.TokensOut), r.Commits, dash(truncate(printable(strings.Join(strings.Fields(result), " "), false), 60)))
	}
	return tw.Flush()
}

// fmtCost is "$0.0033" under a dollar, "$12.34" above; "-" for none.
// fmtCost is a cost for people: "-" for no use, "unpriced" for tokens
// with no cost (a backend that reports none, and no price for its model
// under prices:), not "$0".
func fmtCost(usd float64, tokens int64) string {
	switch {
	case !(usd > 0) && tokens > 0:
		return "unpriced"
	case !(usd > 0):
		return "-"
	case usd < 1:
		return "$" + strconv.FormatFloat(usd, 'f', 4, 64)
	}
	return "$" + strconv.FormatFloat(usd, 'f', 2, 64)
}

// fmtDuration is "0.3s", "45s", "12m3s", "2h5m".
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}
