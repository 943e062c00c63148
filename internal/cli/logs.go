package cli

import (
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/logs"
)

// newLogsCommand is `swarmd logs AGENT`: one session's log, live or
// archived, rendered for reading or as written.
func newLogsCommand(o *operateMain) *cobra.Command {
	var session uint32
	var follow, raw, pretty bool
	cmd := &cobra.Command{
		Use:   "logs AGENT",
		Short: "Print a session's log, live or archived (-f follows a live one)",
		Long: `Print one session's log: the latest, or the one --session names. On a terminal the logs of
claude, codex and gemini agents are rendered for reading: the assistant's text, each tool call with
its command and the first lines of its output, errors, and the result with its tokens and cost;
lines that are not JSON (a CLI's warnings, stack traces) are cut to their first lines. --raw prints
the file as written; --pretty renders also when the output is not a terminal (a pipe, a file).
-f keeps printing a live session as it grows, rendered or raw.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if raw && pretty {
				return usagef("logs: --raw and --pretty exclude each other")
			}
			cfg, err := o.config()
			if err != nil {
				return err
			}
			st := logs.New(cfg.StateDir, cfg.Logs.KeepArchives, cfg.Logs.MaxAge, nil)
			seq, err := latestSession(st, args[0], session)
			if err != nil {
				return err
			}
			out := o.s.Out
			var r *backend.Renderer
			if pretty || !raw && onTerminal(out) && daemon.StructuredBackend(cfg, args[0]) {
				r = backend.NewRenderer(out)
				out = r
			}
			if err := copyLog(cmd, st, args[0], seq, follow, out); err != nil {
				return err
			}
			if r != nil {
				return r.Close()
			}
			return nil
		},
	}
	cmd.Flags().Uint32Var(&session, "session", 0, "session seq (default: the latest)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow a live log")
	cmd.Flags().BoolVar(&raw, "raw", false, "print the log as written, also on a terminal")
	cmd.Flags().BoolVar(&pretty, "pretty", false, "render the log for reading, also when not on a terminal")
	return cmd
}

// latestSession is seq, or when it is 0 the agent's latest session.
func latestSession(st *logs.Store, agent string, seq uint32) (uint32, error) {
	if seq != 0 {
		return seq, nil
	}
	refs, err := st.Sessions(agent)
	if err != nil {
		return 0, usage(err)
	}
	if len(refs) == 0 {
		return 0, usagef("logs: agent %s has no sessions yet", agent)
	}
	return refs[len(refs)-1].Seq, nil
}

// copyLog copies a session's log to w, following it until SIGINT or SIGTERM
// (or its archiving) when follow is set.
func copyLog(cmd *cobra.Command, st *logs.Store, agent string, seq uint32, follow bool, w io.Writer) error {
	if follow {
		ctx, cancel := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
		defer cancel()
		if err := st.Follow(ctx, agent, seq, w); err != nil {
			return usage(err)
		}
		return nil
	}
	rc, _, err := st.Open(agent, seq)
	if err != nil {
		return usage(err)
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// onTerminal reports whether w is a terminal.
func onTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && IsTerminal(f)
}
