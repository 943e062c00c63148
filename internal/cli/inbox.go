package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/view"
)

// NeedItem is one thing that needs a person, with the one command that
// deals with it: view.Needs decides them, for the dashboards too.
type NeedItem = view.Need

// inboxOptions are `swarmd inbox`'s.
type inboxOptions struct {
	IO         Streams
	ConfigPath string
	JSON       bool
}

// NewInboxCommand is `swarmd inbox`.
func NewInboxCommand(s Streams) *cobra.Command { return newInboxCmd(s, nil) }

// newInboxCmd is `swarmd inbox`; runF (nil: inboxRun) runs it.
func newInboxCmd(s Streams, runF func(context.Context, *inboxOptions) error) *cobra.Command {
	opts := &inboxOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "What needs a person now, each with the command that deals with it",
		Long: `List what will not get better by waiting, one line each with the command that deals with it:
agents stopped for good (swarmd start), agents paused by a spent budget (swarmd budget set), tasks
FAILED (swarmd task retry), tasks waiting for approval (swarmd task approve) or blocked, tasks waiting
for an agent not in the swarm, their assignee or a waiting parent's rework's worker (swarmd task
assign), unread mail to the operator, and a swarm whose daemon is not running. Read from swarm.db: it works whether the
daemon runs or not. Exit 0 either way; an empty list says "nothing needs you".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return orRun(runF, inboxRun)(cmd.Context(), opts) },
	}
	cmd.Flags().StringVarP(&opts.ConfigPath, "config", "c", configName, "config file (names the state dir)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "a JSON array of {kind, agent, task, what, fix}")
	return cmd
}

func inboxRun(ctx context.Context, opts *inboxOptions) error {
	items, err := readNeeds(ctx, opts.IO, opts.ConfigPath)
	if err != nil {
		return err
	}
	if opts.JSON {
		if items == nil {
			items = []NeedItem{}
		}
		return printJSON(opts.IO.Out, items)
	}
	if len(items) == 0 {
		_, err := fmt.Fprintln(opts.IO.Out, "nothing needs you")
		return err
	}
	w := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "WHAT\tFIX")
	for _, it := range items {
		fmt.Fprintf(w, "%s\t%s\n", printable(it.What, false), printable(it.Fix, false))
	}
	return w.Flush()
}

func readNeeds(ctx context.Context, s Streams, configPath string) ([]NeedItem, error) {
	db, err := openSwarmDB(ctx, s, configPath, "inbox")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	running := true
	var names []string // nil: every agent recorded
	if db.cfg != nil {
		names = db.cfg.AgentNames()
		if !db.cfg.SharedStore() {
			if running, err = daemon.StateDirInUse(db.cfg.StateDir); err != nil {
				return nil, err
			}
		}
	}
	mb, err := mailbox.New(ctx, db.DB, db.mail)
	if err != nil {
		return nil, err
	}
	board, err := daemon.OpenTaskBoard(ctx, db.DB, nil)
	if err != nil {
		return nil, err
	}
	// Its tasks' assignees are checked against the agents the task
	// commands know (task list marks the same ones).
	st, err := daemon.ReadNeeds(ctx, db.DB, board, mb, names, db.agents)
	if err != nil {
		return nil, err
	}
	st.Running = running
	return view.Needs(st), nil
}
