package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/view"
)

// logsOptions are `swarmd logs`'s.
type logsOptions struct {
	*operateOptions
	Agent   string
	Session uint32 // 0: the latest
	Follow  bool
	Raw     bool // as written, also on a terminal
	Pretty  bool // rendered, also when not on a terminal
}

// newLogsCommand is `swarmd logs AGENT`: one session's log, live or
// archived, rendered for reading or as written.
func newLogsCommand(o *operateOptions) *cobra.Command { return newLogsCmd(o, nil) }

// newLogsCmd is `swarmd logs`; runF (nil: logsRun) runs it.
func newLogsCmd(o *operateOptions, runF func(context.Context, *logsOptions) error) *cobra.Command {
	opts := &logsOptions{operateOptions: o}
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
			opts.Agent = args[0]
			return orRun(runF, logsRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().Uint32Var(&opts.Session, "session", 0, "session seq (default: the latest)")
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "follow a live log")
	cmd.Flags().BoolVar(&opts.Raw, "raw", false, "print the log as written, also on a terminal")
	cmd.Flags().BoolVar(&opts.Pretty, "pretty", false, "render the log for reading, also when not on a terminal")
	return cmd
}

func logsRun(ctx context.Context, opts *logsOptions) error {
	if opts.Raw && opts.Pretty {
		return usagef("logs: --raw and --pretty exclude each other")
	}
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	st := logs.New(cfg.StateDir, cfg.Logs.KeepArchives, cfg.Logs.MaxAge, nil)
	seq, err := latestSession(st, opts.Agent, opts.Session)
	if _, ok := cfg.Agent(opts.Agent); err != nil && !ok {
		// No log of an agent the config does not have: a typo, or one
		// removed before it ran.
		return usagef("logs: no agent %q with logs (agents: %s)", opts.Agent, strings.Join(cfg.AgentNames(), ", "))
	}
	if err != nil {
		return err
	}
	out := opts.IO.Out
	if !opts.Raw && onTerminal(out) {
		// What a session printed reaches the operator's terminal: its
		// escape sequences (a clipboard write, a title, the cursor moved
		// to forge or hide lines) are not passed on. --raw passes them.
		out = &terminalSafe{w: out}
	}
	var r *backend.Renderer
	if opts.Pretty || !opts.Raw && onTerminal(opts.IO.Out) && daemon.StructuredBackend(cfg, opts.Agent) {
		r = backend.NewRenderer(out)
		out = r
	}
	if err := copyLog(ctx, st, opts.Agent, seq, opts.Follow, out); err != nil {
		return err
	}
	if r != nil {
		return r.Close()
	}
	return nil
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
func copyLog(ctx context.Context, st *logs.Store, agent string, seq uint32, follow bool, w io.Writer) error {
	if follow {
		ctx, cancel := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
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

// terminalSafe passes what is written to w without what a terminal acts
// on (view.TerminalControl): C0 controls but newline and tab (ESC, BEL, the
// carriage return that overwrites a line), DEL, C1 controls and the
// bidirectional overrides. A character split across writes is kept until
// it is whole; bytes that are not UTF-8 pass as they are (a terminal shows
// them as replacement characters).
type terminalSafe struct {
	w     io.Writer
	carry []byte // the start of a character the last write cut
	buf   []byte
}

func (t *terminalSafe) Write(p []byte) (int, error) {
	in := p
	if len(t.carry) > 0 {
		in = append(t.carry, p...)
	}
	t.carry, t.buf = nil, t.buf[:0]
	for len(in) > 0 {
		if !utf8.FullRune(in) {
			t.carry = append([]byte(nil), in...)
			break
		}
		r, n := utf8.DecodeRune(in)
		switch {
		case r == utf8.RuneError && n == 1:
			t.buf = append(t.buf, in[0])
		case r == '\n' || r == '\t' || !view.TerminalControl(r):
			t.buf = append(t.buf, in[:n]...)
		}
		in = in[n:]
	}
	if _, err := t.w.Write(t.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}
