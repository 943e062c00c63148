package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/store"
)

// NewPauseCommands are `swarmd pause` and `swarmd resume`.
func NewPauseCommands(s Streams) []*cobra.Command {
	o := &operateOptions{IO: s}
	cmds := []*cobra.Command{newPauseCmd(o, nil), newResumeCmd(o, nil)}
	for _, c := range cmds {
		c.Flags().StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	}
	return cmds
}

// pauseOptions are `swarmd pause`'s and `resume`'s.
type pauseOptions struct {
	*operateOptions
	Agents []string // AGENT when given (cobra allows one), or All
	All    bool
	Now    bool   // pause: freeze the running session
	Reason string // pause: why
}

// newPauseCmd is `swarmd pause`; runF (nil: pauseRun) runs it.
func newPauseCmd(o *operateOptions, runF func(context.Context, *pauseOptions) error) *cobra.Command {
	opts := &pauseOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "pause AGENT|--all",
		Short: "Hold an agent: its session finishes (or, with --now, freezes) and no new one starts",
		Long: `Hold an agent until 'swarmd resume'. Without --now the running session finishes and no new
session starts: the agent waits in BuildingPrompt. With --now the running session is frozen: every
process of its tree is stopped (SIGSTOP) and its session timeout stops counting; 'swarmd resume'
continues it (SIGCONT) where it was. Urgent mail to a paused agent waits for the resume.
A pause is stored in swarm.db: it survives a restart of the daemon (a frozen session does not: it
ends with the daemon, and the agent stays paused). 'swarmd status' shows it, as does the event log.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Agents = args
			return orRun(runF, pauseRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, "every agent")
	cmd.Flags().BoolVar(&opts.Now, "now", false, "freeze the running session at once (SIGSTOP to its whole process tree)")
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why, for the event log and status (at most 1024 bytes)")
	return cmd
}

func pauseRun(ctx context.Context, opts *pauseOptions) error {
	if len(opts.Reason) > control.MaxPauseReason {
		return usagef("pause: --reason is %d bytes, over the %d-byte limit", len(opts.Reason), control.MaxPauseReason)
	}
	req := control.PauseRequest{Now: opts.Now, Reason: opts.Reason}
	return opts.eachAgent(ctx, "pause", opts.Agents, opts.All, func(c *control.Client, name string) error {
		res, err := c.Pause(ctx, name, req)
		if err != nil {
			return err
		}
		fmt.Fprintln(opts.IO.Out, pauseLine(res))
		return nil
	})
}

// newResumeCmd is `swarmd resume`; runF (nil: resumeRun) runs it.
func newResumeCmd(o *operateOptions, runF func(context.Context, *pauseOptions) error) *cobra.Command {
	opts := &pauseOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "resume AGENT|--all",
		Short: "Lift a pause: a frozen session goes on, a held agent starts its next session",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Agents = args
			return orRun(runF, resumeRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, "every paused agent")
	return cmd
}

func resumeRun(ctx context.Context, opts *pauseOptions) error {
	resumed := 0
	err := opts.eachAgent(ctx, "resume", opts.Agents, opts.All, func(c *control.Client, name string) error {
		res, err := c.Resume(ctx, name)
		if opts.All && errors.Is(err, control.ErrConflict) {
			return nil // --all: an agent that is not paused has nothing to resume
		}
		if err != nil {
			return err
		}
		resumed++
		line := "resumed " + res.Agent + " (" + res.State
		if res.Thawed {
			line += "; its session was thawed"
		}
		fmt.Fprintln(opts.IO.Out, line+")")
		return nil
	})
	if err == nil && opts.All && resumed == 0 {
		fmt.Fprintln(opts.IO.Out, "no agent is paused: nothing to resume")
	}
	return err
}

// eachAgent runs f for AGENT, or for every agent of the daemon with --all.
func (o *operateOptions) eachAgent(ctx context.Context, verb string, agents []string, all bool, f func(*control.Client, string) error) error {
	if all == (len(agents) == 1) {
		return usagef("%s: name one agent or give --all", verb)
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	names := agents
	if all {
		as, err := c.Agents(ctx)
		if err != nil {
			return controlErr(err)
		}
		names = nil
		for _, a := range as {
			names = append(names, a.Name)
		}
	}
	for _, name := range names {
		if err := f(c, name); err != nil {
			return controlErr(fmt.Errorf("%s %s: %w", verb, name, err))
		}
	}
	return nil
}

// pauseLine tells the operator what a pause did.
func pauseLine(r control.PauseResult) string {
	line := "paused " + r.Agent
	if r.Already {
		line += " (it was paused already)"
	}
	switch {
	case r.Frozen:
		return fmt.Sprintf("%s: session %s frozen (%d processes stopped); swarmd resume %s continues it", line, r.SessionID, r.Processes, r.Agent)
	case r.SessionID != "":
		return fmt.Sprintf("%s: session %s runs to its end (%s); then no session starts until swarmd resume %s", line, r.SessionID, r.State, r.Agent)
	}
	return fmt.Sprintf("%s (%s): no session starts until swarmd resume %s", line, r.State, r.Agent)
}

// auditPoll is how often `swarmd audit -f` looks for new tool calls.
const auditPoll = 250 * time.Millisecond

// AuditJSON is one line of `swarmd audit --json`.
type AuditJSON struct {
	ID         int64     `json:"id"`
	Agent      string    `json:"agent"`
	Seq        uint32    `json:"seq"`
	SessionID  string    `json:"session_id"`
	CallID     string    `json:"call_id,omitempty"`
	Tool       string    `json:"tool"`
	Input      string    `json:"input"`
	Started    time.Time `json:"started"`
	DurationMS *int64    `json:"duration_ms"` // null: the call never ended
	Status     string    `json:"status"`
}

// auditOptions are `swarmd audit`'s.
type auditOptions struct {
	*operateOptions
	Query  store.ToolCallQuery
	Follow bool
	JSON   bool
}

// NewAuditCommand is `swarmd audit`: every tool call the agents made, read
// from swarm.db, so it works whether or not the daemon runs.
func NewAuditCommand(s Streams) *cobra.Command { return newAuditCmd(&operateOptions{IO: s}, nil) }

// newAuditCmd is `swarmd audit`; runF (nil: auditRun) runs it.
func newAuditCmd(o *operateOptions, runF func(context.Context, *auditOptions) error) *cobra.Command {
	opts := &auditOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List every tool call the agents made: tool, input, start, duration, ok or error",
		Long: `List the tool calls seen in the sessions' output, oldest first: when each started, the agent and
session seq, the tool, how long it took, whether it went ok (error: the tool reported one, such as a
shell command's non-zero exit; unfinished: the session ended during it) and a summary of its input
(the shell command, the file; at most 1 KiB). A call is recorded when it ends.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return orRun(runF, auditRun)(cmd.Context(), opts) },
	}
	q := &opts.Query
	cmd.Flags().StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	cmd.Flags().StringVar(&q.Agent, "agent", "", "only this agent's calls")
	cmd.Flags().StringVar(&q.SessionID, "session", "", "only this session's calls (its id, as swarmd sessions --json shows it)")
	cmd.Flags().StringVar(&q.Tool, "tool", "", "only calls of this tool (Bash, command_execution, run_shell_command, ...)")
	cmd.Flags().IntVarP(&q.Last, "limit", "n", 100, "how many calls, the most recent (0: all)")
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new calls")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON lines")
	return cmd
}

func auditRun(ctx context.Context, opts *auditOptions) error {
	if opts.Query.Last < 0 {
		return usagef("audit: --limit %d: want 0 (all) or more", opts.Query.Last)
	}
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	db, err := openStateDB(ctx, cfg, "audit")
	if err != nil {
		return err
	}
	defer db.Close()
	if err := knownToSwarm(ctx, cfg, opts.Query.Agent, "audit: --agent", func(ctx context.Context) (bool, error) {
		calls, err := db.ToolCalls(ctx, store.ToolCallQuery{Agent: opts.Query.Agent, Last: 1})
		return len(calls) > 0, err
	}); err != nil {
		return err
	}
	return followAudit(ctx, db, opts.Query, opts.Follow, auditWriter{w: opts.IO.Out, json: opts.JSON})
}

// followAudit prints the calls q selects, then with follow the new ones as
// they are recorded, until ctx ends.
func followAudit(ctx context.Context, db *store.DB, q store.ToolCallQuery, follow bool, w auditWriter) error {
	for first := true; ; first = false {
		cs, err := db.ToolCalls(context.WithoutCancel(ctx), q)
		if err != nil {
			return err
		}
		if first && !w.json {
			if err := w.header(); err != nil {
				return err
			}
		}
		for _, c := range cs {
			if err := w.call(c); err != nil {
				return err
			}
			q.AfterID = c.ID
		}
		q.Last = 0 // the limit is for what was there; every new call is shown
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(auditPoll):
		}
	}
}

// auditWriter prints tool calls as fixed-width lines (so that followed
// lines stay aligned) or JSON lines.
type auditWriter struct {
	w    io.Writer
	json bool
}

const auditFormat = "%-19s  %-12s %4s  %-18s %8s  %-10s  %s\n"

func (a auditWriter) header() error {
	_, err := fmt.Fprintf(a.w, auditFormat, "STARTED", "AGENT", "SEQ", "TOOL", "DURATION", "STATUS", "INPUT")
	return err
}

func (a auditWriter) call(c store.ToolCallRecord) error {
	if a.json {
		var dur *int64
		if c.Ended {
			ms := c.Duration.Milliseconds()
			dur = &ms
		}
		return json.NewEncoder(a.w).Encode(AuditJSON{ID: c.ID, Agent: c.Agent, Seq: c.Seq, SessionID: c.SessionID,
			CallID: c.CallID, Tool: c.Tool, Input: c.Input, Started: c.Started, DurationMS: dur, Status: c.Status})
	}
	dur := "-"
	if c.Ended {
		dur = fmtDuration(max(c.Duration, time.Millisecond))
	}
	input := truncate(printable(strings.Join(strings.Fields(c.Input), " "), false), 100)
	_, err := fmt.Fprintf(a.w, auditFormat, c.Started.Local().Format("2006-01-02 15:04:05"), truncate(c.Agent, 12),
		fmt.Sprint(c.Seq), truncate(c.Tool, 18), dur, c.Status, dash(input))
	return err
}
