package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/worktree"
)

// NewWorktreeCommand is `swarmd worktree list|prune`.
func NewWorktreeCommand(s Streams) *cobra.Command {
	o := &operateOptions{IO: s}
	cmd := &cobra.Command{Use: "worktree", Short: "Inspect and prune the agents' worktrees and branches"}
	list, prune := newWorktreeListCmd(o, nil), newWorktreePruneCmd(o, nil)
	for _, c := range []*cobra.Command{list, prune} {
		c.Flags().StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file")
	}
	cmd.AddCommand(list, prune)
	return cmd
}

// worktreeListOptions are `swarmd worktree list`'s.
type worktreeListOptions struct {
	*operateOptions
	JSON bool
}

// newWorktreeListCmd is `swarmd worktree list`; runF (nil: worktreeListRun)
// runs it.
func newWorktreeListCmd(o *operateOptions, runF func(context.Context, *worktreeListOptions) error) *cobra.Command {
	opts := &worktreeListOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Every agent worktree: branch, HEAD, commits ahead/behind the base, dirty files",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return orRun(runF, worktreeListRun)(cmd.Context(), opts) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func worktreeListRun(ctx context.Context, opts *worktreeListOptions) error {
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	m, err := worktree.Open(ctx, worktree.Options{Repo: cfg.Repo, StateDir: cfg.StateDir, BaseRef: cfg.BaseRef, Log: zap.NewNop()})
	if err != nil {
		return usage(err)
	}
	sts, err := m.List(ctx)
	if err != nil {
		return err
	}
	if opts.JSON {
		return printJSON(opts.IO.Out, sts)
	}
	tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tBRANCH\tHEAD\tAHEAD\tBEHIND\tDIRTY\tWORKTREE")
	for _, st := range sts {
		head := st.Head
		if len(head) > 12 {
			head = head[:12]
		}
		dirty := "-"
		if st.Dirty {
			dirty = fmt.Sprintf("%d files", len(st.DirtyFiles))
		}
		where := "present"
		switch {
		case st.Problem != "":
			where = st.Problem
		case !st.Exists:
			where = "missing (branch only)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", st.Agent, st.Branch, head, st.Ahead, st.Behind, dirty, where)
	}
	return tw.Flush()
}

// worktreePruneOptions are `swarmd worktree prune`'s.
type worktreePruneOptions struct {
	*operateOptions
	Agent string // or Tasks
	Tasks bool   // the branches of merged tasks instead
}

// newWorktreePruneCmd is `swarmd worktree prune`; runF (nil:
// worktreePruneRun) runs it.
func newWorktreePruneCmd(o *operateOptions, runF func(context.Context, *worktreePruneOptions) error) *cobra.Command {
	opts := &worktreePruneOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "prune AGENT | prune --tasks",
		Short: "Remove a stopped agent's worktree and branch, only if clean and merged into the base; or merged tasks' branches",
		Long: `Remove an agent's worktree and its swarm/<agent>/work branch. swarmd never loses work: it refuses
while the agent runs, and refuses a worktree with uncommitted changes or commits that the base
ref does not contain, saying which.

With --tasks, remove the branches of tasks the merge queue merged (swarm/task/N of every CLOSED
task); their work is on the merge target.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if opts.Tasks {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Agent = ""
			if len(args) == 1 {
				opts.Agent = args[0]
			}
			return orRun(runF, worktreePruneRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Tasks, "tasks", false, "remove the branches of merged (CLOSED) tasks instead")
	return cmd
}

func worktreePruneRun(ctx context.Context, opts *worktreePruneOptions) error {
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	if opts.Tasks {
		return pruneTaskLines(ctx, opts.IO, opts.ConfigPath, cfg)
	}
	name := opts.Agent
	st, err := control.NewClient(cfg.SocketPath()).Agent(ctx, name)
	switch {
	case err == nil && st.State != agent.Stopped.String():
		return usagef("worktree prune: agent %s is %s; stop it first (swarmd stop %s)", name, st.State, name)
	case err != nil && !errors.Is(err, control.ErrNoDaemon) && !errors.Is(err, control.ErrUnknownAgent):
		return err
	}
	m, err := worktree.Open(ctx, worktree.Options{Repo: cfg.Repo, StateDir: cfg.StateDir, BaseRef: cfg.BaseRef, Log: zap.NewNop()})
	if err != nil {
		return usage(err)
	}
	if err := m.Prune(ctx, name); err != nil {
		if errors.Is(err, worktree.ErrHasWork) || errors.Is(err, worktree.ErrBadName) {
			return usage(err)
		}
		return err
	}
	fmt.Fprintf(opts.IO.Out, "removed worktree and branch of %s\n", name)
	return nil
}

// pruneTaskLines removes the line branches of CLOSED tasks.
func pruneTaskLines(ctx context.Context, s Streams, configPath string, cfg *config.Config) error {
	m, err := worktree.Open(ctx, worktree.Options{Repo: cfg.Repo, StateDir: cfg.StateDir, BaseRef: cfg.BaseRef, Log: zap.NewNop()})
	if err != nil {
		return usage(err)
	}
	db, err := openSwarmDB(ctx, s, configPath, "worktree prune")
	if err != nil {
		return err
	}
	defer db.Close()
	board, err := daemon.OpenTaskBoard(ctx, db.DB, nil)
	if err != nil {
		return fmt.Errorf("worktree prune: %w", err)
	}
	removed, err := m.PruneLines(ctx, board.Closed)
	for _, b := range removed {
		fmt.Fprintf(s.Out, "removed %s\n", b)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "removed %d task branches\n", len(removed))
	return nil
}
