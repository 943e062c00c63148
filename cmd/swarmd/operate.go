package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/logs"
)

// operateMain holds what the operator commands share: the config that names
// the state dir (and so the socket and the logs).
type operateMain struct {
	s          streams
	configPath string
}

func (o *operateMain) config() (*config.Config, error) {
	cfg, err := config.Load(o.configPath)
	if err != nil {
		return nil, usage(err)
	}
	return cfg, nil
}

func (o *operateMain) client() (*control.Client, error) {
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

func newOperateCommands(s streams) []*cobra.Command {
	o := &operateMain{s: s}
	var jsonOut bool
	status := &cobra.Command{
		Use:   "status",
		Short: "One row per agent: state, session, errors, health",
		Long: `Show every agent of the running daemon: state, session seq, current session age, time since the
session last printed, error counters and branch. HEALTH is "stalled" for a Running session that has
printed nothing for stall_after (default 5m) and "spawning-timeout" for Spawning over 60 s.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			as, err := c.Agents(cmd.Context())
			if err != nil {
				return controlErr(err)
			}
			if jsonOut {
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				return enc.Encode(as)
			}
			return writeStatus(s.out, as, time.Now())
		},
	}
	status.Flags().BoolVar(&jsonOut, "json", false, "print JSON")

	stop := &cobra.Command{
		Use:   "stop AGENT",
		Short: "OperatorStop one agent (its session is cancelled with its grace period)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			if err := c.Stop(cmd.Context(), args[0]); err != nil {
				return controlErr(err)
			}
			fmt.Fprintf(s.out, "stopping %s\n", args[0])
			return nil
		},
	}
	start := &cobra.Command{
		Use:   "start AGENT",
		Short: "Start a Stopped agent again, with its error counters reset",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			if err := c.Start(cmd.Context(), args[0]); err != nil {
				return controlErr(err)
			}
			fmt.Fprintf(s.out, "starting %s\n", args[0])
			return nil
		},
	}

	var session uint32
	var follow bool
	logsCmd := &cobra.Command{
		Use:   "logs AGENT",
		Short: "Print a session's log, live or archived (-f follows a live one)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := o.config()
			if err != nil {
				return err
			}
			st := logs.New(cfg.StateDir, cfg.Logs.KeepArchives, cfg.Logs.MaxAge, nil)
			seq := session
			if seq == 0 {
				refs, err := st.Sessions(args[0])
				if err != nil {
					return usage(err)
				}
				if len(refs) == 0 {
					return usagef("logs: agent %s has no sessions yet", args[0])
				}
				seq = refs[len(refs)-1].Seq
			}
			if follow {
				ctx, cancel := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
				defer cancel()
				if err := st.Follow(ctx, args[0], seq, s.out); err != nil {
					return usage(err)
				}
				return nil
			}
			rc, _, err := st.Open(args[0], seq)
			if err != nil {
				return usage(err)
			}
			defer rc.Close()
			_, err = io.Copy(s.out, rc)
			return err
		},
	}
	logsCmd.Flags().Uint32Var(&session, "session", 0, "session seq (default: the latest)")
	logsCmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow a live log")

	cmds := []*cobra.Command{status, stop, start, logsCmd}
	for _, c := range cmds {
		c.Flags().StringVarP(&o.configPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	}
	return cmds
}

// writeStatus renders the status table.
func writeStatus(w io.Writer, as []control.AgentStatus, now time.Time) error {
	if len(as) > 0 && as[0].DaemonFault != "" {
		fmt.Fprintf(w, "DAEMON UNHEALTHY: %s\n", as[0].DaemonFault)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATE\tSEQ\tSESSION\tOUTPUT\tERRORS\tBRANCH\tHEALTH\tWHY")
	for _, a := range as {
		why := ""
		if a.State == "Stopped" || a.State == "CoolingDown" {
			why = a.Reason // why it stopped, or the error it is backing off from
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", a.Name, a.State, a.Seq,
			age(now, a.SessionStarted), age(now, a.LastOutput), a.ConsecutiveErrors, a.TotalErrors, a.Branch,
			dash(a.Health), dash(truncate(why, 72)))
	}
	return tw.Flush()
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
