// Command swarmd keeps a swarm of LLM coding agents working on one git
// repository. See README.md and docs/.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/cli"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/fence"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// Set by the Makefile through -ldflags.
var (
	version = "dev"
	commit  = "unknown"
)

// Exit codes (docs/operations.md).
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// streams are the process's standard streams and environment, injectable
// for tests (the commands in internal/cli take them as cli.Streams).
type streams struct {
	in       io.Reader
	out, err io.Writer
	getenv   func(string) string
	// store, when set, is the daemon's open store, which mail and task use
	// for SWARM_DB_PATH: the daemon runs a session's command (runSessionCLI).
	store       *store.DB
	board       *taskboard.Board // the daemon's task board, with store
	mailMaxBody int              // the daemon's mailbox.max_body, with store
}

func (s streams) cli() cli.Streams {
	return cli.Streams{In: s.in, Out: s.out, Err: s.err, Getenv: s.getenv, Store: s.store, Board: s.board, MailMaxBody: s.mailMaxBody}
}

func main() {
	ctx := context.Background()
	code := Main(ctx, os.Args[1:], streams{in: os.Stdin, out: os.Stdout, err: os.Stderr, getenv: os.Getenv})
	os.Exit(code)
}

// Main runs the command line and returns the process exit code.
func Main(ctx context.Context, args []string, s streams) int {
	if code, ok := forwardSessionCLI(ctx, args, s); ok {
		return code
	}
	if len(args) > 0 && args[0] == fence.Command {
		// The lease guard a daemon on a shared store starts of its own
		// binary (package fence): not an operator's command.
		return fence.Main(args[1:], s.in, s.err, func(owner, instance string) (int, error) {
			return proc.KillInstance(owner, instance, nil)
		})
	}
	root := newRootCommand(s)
	root.SetArgs(args)
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	if problems, ok := configProblems(err); ok {
		// Every problem of the config, one line each as FILE:LINE: KEY: ...,
		// the way compilers report, so that editors can jump to them.
		for _, l := range problems.Lines() {
			fmt.Fprintln(s.err, l)
		}
		return exitUsage
	}
	fmt.Fprintln(s.err, "swarmd: "+cli.OneLine(err.Error()))
	var ue cli.UsageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		return exitUsage
	}
	return exitRuntime
}

// configProblems is err's config.Errors when err is exactly that (perhaps
// marked as a usage error): a wrapper that adds words keeps its one line.
func configProblems(err error) (config.Errors, bool) {
	for {
		switch e := err.(type) {
		case config.Errors:
			return e, len(e) > 0
		case cli.UsageError:
			err = e.Err
		case *daemon.SetupError:
			err = e.Err
		default:
			return nil, false
		}
	}
}

// commandError names the command cobra refused err for ("task add:
// accepts 1 arg(s), received 0"): cobra's own words name none.
func commandError(cmd *cobra.Command, err error) error {
	if !cmd.HasParent() {
		return err
	}
	return fmt.Errorf("%s: %w", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), err)
}

// flagError is a flag's bad value in words, without the parser's
// ("--priority: "abc" is not a whole number" rather than pflag's
// strconv.ParseInt: parsing "abc": invalid syntax).
func flagError(err error) error {
	msg := err.Error()
	var value, flag, why string
	if n, _ := fmt.Sscanf(msg, "invalid argument %q for %q flag:", &value, &flag); n == 2 {
		switch _, rest, _ := strings.Cut(msg, " flag: "); {
		case strings.HasPrefix(rest, "strconv.") && strings.HasSuffix(rest, "value out of range"):
			why = "out of range"
		case strings.HasPrefix(rest, "strconv.ParseUint"):
			why = "not a whole number of 0 or more"
		case strings.HasPrefix(rest, "strconv.Parse"):
			why = "not a number"
		case strings.HasPrefix(rest, "time: "):
			why = "not a duration (like 30s, 5m or 1h30m)"
		}
		if why != "" {
			return fmt.Errorf("%s: %q is %s", flag, value, why)
		}
	}
	// pflag reads "-5" as a shorthand flag: say it was taken for one.
	if rest, ok := strings.CutPrefix(msg, "unknown shorthand flag: "); ok {
		if _, token, ok := strings.Cut(rest, " in "); ok {
			if _, perr := strconv.ParseFloat(token, 64); perr == nil {
				return fmt.Errorf("%s is read as a flag: a negative number is no value here", token)
			}
		}
	}
	return err
}

// usageArgs makes every command's argument-count errors usage errors
// (exit 2), naming the command.
func usageArgs(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		// A bare group prints its help; an unknown subcommand is an error
		// (cobra would print the help and exit 0 on `swarmd mail frob`).
		c.Args = cobra.NoArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	if orig := c.Args; orig != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := orig(cmd, args); err != nil {
				if !cmd.HasSubCommands() && len(args) > 0 && strings.HasPrefix(err.Error(), "unknown command") {
					// cobra.NoArgs words an argument as a subcommand.
					err = fmt.Errorf("takes no argument (got %q)", args[0])
				}
				return cli.Usage(commandError(cmd, err))
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

func newRootCommand(s streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "swarmd",
		Short: "Keep a swarm of coding agents working on one git repository",
		Long: `swarmd runs N coding agents (Claude Code, Codex CLI, Gemini CLI or any command) on one git
repository. Each agent has its own worktree and branch and runs backend sessions one after another under
a per-agent state machine. Agents talk through a mailbox in SQLite (or PostgreSQL); urgent mail interrupts the recipient.

Start with 'swarmd init' to write a swarmd.yaml, then 'swarmd run'.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Errors are one line; "did you mean" would add more.
		DisableSuggestions: true,
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return cli.Usage(commandError(cmd, flagError(err))) })
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return cli.FindConfig(cmd, s.getenv) }
	c := s.cli()
	root.AddCommand(
		newRunCommand(s),
		cli.NewConfigCommand(c),
		newVersionCommand(s),
		cli.NewMailCommand(c),
		cli.NewTaskCommand(c),
		cli.NewMergeCommand(c),
	)
	root.AddCommand(cli.NewOperateCommands(c)...)
	root.AddCommand(cli.NewPauseCommands(c)...)
	root.AddCommand(cli.NewAuditCommand(c), cli.NewBudgetCommand(c))
	root.AddCommand(cli.NewEventsCommand(c), cli.NewSessionsCommand(c), cli.NewWorktreeCommand(c), cli.NewInitCommand(c), newCompletionCommand())
	root.AddCommand(cli.NewTopCommand(c), cli.NewInboxCommand(c), cli.NewDaemonsCommand(c))
	root.AddCommand(cli.NewBackupCommands(c)...)
	usageArgs(root)
	return root
}

// notifySignals delivers SIGTERM and SIGINT on a channel until stopped.
func notifySignals() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	return ch, func() { signal.Stop(ch) }
}
