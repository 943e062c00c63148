package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// The merge commands (`swarmd merge …`) read and steer the merge queue in
// swarm.db directly, like `swarmd events`, so they work whether or not the
// daemon runs. A running daemon sees a pause at its next candidate and a
// retry or resume when it next looks at the queue.

// mergeOptions are the flags of every merge command.
type mergeOptions struct {
	IO         Streams
	ConfigPath string
	JSON       bool
}

// NewMergeCommand is `swarmd merge`.
func NewMergeCommand(s Streams) *cobra.Command {
	o := &mergeOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "merge",
		Short: "The merge queue: what waits to go into merge.into, what is under test, the last results",
		Long: `The merge queue integrates finished tasks into the branch merge.into names, in the order they
finished, when the gate passes on the merged result; up to merge.batch tasks are gated together
(docs/merge-queue.md). These commands read and steer it in swarm.db.
A gate run's log is read with swarmd logs merge --session N.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	pf.BoolVar(&o.JSON, "json", false, "print JSON")
	cmd.AddCommand(newMergeStatusCmd(o, nil), newMergeListCmd(o, nil), newMergeRetryCmd(o, nil),
		newMergeSwitchCmd(o, "pause", nil), newMergeSwitchCmd(o, "resume", nil))
	return cmd
}

// queueStore is the queue's store and the database it is in (the board's
// too).
type queueStore struct {
	*merge.Store
	db *store.DB
}

// openQueue opens the queue's store; operator verbs refuse a session.
func openQueue(ctx context.Context, o *mergeOptions, verb string, operator bool) (queueStore, *config.Config, func(), error) {
	who, err := whoCalls(o.IO.Getenv, "merge")
	if err != nil {
		return queueStore{}, nil, nil, err
	}
	if operator && who.inSession {
		return queueStore{}, nil, nil, usagef("merge %s: an operator command; agent %s's session may not run it", verb, who.name)
	}
	db, err := openSwarmDB(ctx, o.IO, o.ConfigPath, "merge")
	if err != nil {
		return queueStore{}, nil, nil, err
	}
	if operator && (db.cfg == nil || db.cfg.Merge == nil) {
		db.Close()
		return queueStore{}, nil, nil, usagef("merge %s: swarmd.yaml has no merge section, so there is no merge queue", verb)
	}
	return queueStore{merge.NewStore(db.DB, nil), db.DB}, db.cfg, func() { db.Close() }, nil
}

// newMergeStatusCmd is `swarmd merge status`; runF (nil: mergeStatusRun)
// runs it.
func newMergeStatusCmd(o *mergeOptions, runF func(context.Context, *mergeOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "The queue: paused or waiting and why, the candidate under test, what is queued, the last results",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return orRun(runF, mergeStatusRun)(cmd.Context(), o) },
	}
}

func mergeStatusRun(ctx context.Context, o *mergeOptions) error {
	st, cfg, done, err := openQueue(ctx, o, "status", false)
	if err != nil {
		return err
	}
	defer done()
	s, err := st.Status(ctx, 10)
	if err != nil {
		return err
	}
	if o.JSON {
		return printJSON(o.IO.Out, s)
	}
	return printMergeStatus(o.IO.Out, cfg, s)
}

// mergeListOptions are `swarmd merge list`'s.
type mergeListOptions struct {
	*mergeOptions
	Limit int // the last N entries; 0: all
}

// newMergeListCmd is `swarmd merge list`; runF (nil: mergeListRun) runs it.
func newMergeListCmd(o *mergeOptions, runF func(context.Context, *mergeListOptions) error) *cobra.Command {
	opts := &mergeListOptions{mergeOptions: o}
	cmd := &cobra.Command{
		Use:   "list [--limit N] [--json]",
		Short: "Queue entries, oldest first: task, agent, branch and head, state, result",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return orRun(runF, mergeListRun)(cmd.Context(), opts) },
	}
	cmd.Flags().IntVar(&opts.Limit, "limit", 50, "the last N entries (0: all)")
	return cmd
}

func mergeListRun(ctx context.Context, opts *mergeListOptions) error {
	if opts.Limit < 0 {
		return usagef("merge list: --limit %d: want 0 (all) or more", opts.Limit)
	}
	st, _, done, err := openQueue(ctx, opts.mergeOptions, "list", false)
	if err != nil {
		return err
	}
	defer done()
	es, err := st.List(ctx, opts.Limit)
	if err != nil {
		return err
	}
	if opts.JSON {
		if es == nil {
			es = []merge.Entry{}
		}
		return printJSON(opts.IO.Out, es)
	}
	return printEntries(opts.IO.Out, es)
}

// mergeRetryOptions are `swarmd merge retry`'s.
type mergeRetryOptions struct {
	*mergeOptions
	Task string // a task id as given
}

// newMergeRetryCmd is `swarmd merge retry`; runF (nil: mergeRetryRun) runs
// it.
func newMergeRetryCmd(o *mergeOptions, runF func(context.Context, *mergeRetryOptions) error) *cobra.Command {
	opts := &mergeRetryOptions{mergeOptions: o}
	return &cobra.Command{
		Use:   "retry TASK",
		Short: "Queue a rejected task's commit again, at the end of the queue, while it is still the task's work to merge",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Task = args[0]
			return orRun(runF, mergeRetryRun)(cmd.Context(), opts)
		},
	}
}

func mergeRetryRun(ctx context.Context, opts *mergeRetryOptions) error {
	id, err := parseTaskID("merge retry", opts.Task)
	if err != nil {
		return err
	}
	st, _, done, err := openQueue(ctx, opts.mergeOptions, "retry", true)
	if err != nil {
		return err
	}
	defer done()
	db := st.db
	// Only the task's work to merge now: its frozen head, the task DONE and
	// its review passed. A task reworked and reported done at another
	// commit since would be closed on the old one, its new work neither
	// reviewed nor merged.
	board := taskboard.New(db, taskboard.Options{})
	e, err := st.Retry(ctx, id, "operator", func(ctx context.Context, tx *sql.Tx, e merge.Entry) error {
		return board.MergeableTx(ctx, tx, e.Task, e.Head)
	})
	if err != nil {
		return mergeErr("retry", err)
	}
	if opts.JSON {
		return printJSON(opts.IO.Out, e)
	}
	_, err = fmt.Fprintf(opts.IO.Out, "task %d queued again: %s at %s\n", e.Task, e.Branch, shortHash(e.Head))
	return err
}

// mergeSwitchOptions are `swarmd merge pause`'s and `resume`'s.
type mergeSwitchOptions struct {
	*mergeOptions
	Verb string // pause or resume
}

// newMergeSwitchCmd is `swarmd merge pause` or `resume`; runF (nil:
// mergeSwitchRun) runs it.
func newMergeSwitchCmd(o *mergeOptions, verb string, runF func(context.Context, *mergeSwitchOptions) error) *cobra.Command {
	opts := &mergeSwitchOptions{mergeOptions: o, Verb: verb}
	short := "Stop the queue before its next candidate (the one under test finishes); kept across restarts"
	if verb == "resume" {
		short = "Let a paused queue go on"
	}
	return &cobra.Command{
		Use:   verb,
		Short: short,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return orRun(runF, mergeSwitchRun)(cmd.Context(), opts) },
	}
}

func mergeSwitchRun(ctx context.Context, opts *mergeSwitchOptions) error {
	st, _, done, err := openQueue(ctx, opts.mergeOptions, opts.Verb, true)
	if err != nil {
		return err
	}
	defer done()
	if opts.Verb == "pause" {
		err = st.Pause(ctx, "operator")
	} else {
		err = st.Resume(ctx, "operator")
	}
	if err != nil {
		return mergeErr(opts.Verb, err)
	}
	_, err = fmt.Fprintf(opts.IO.Out, "merge queue %sd\n", opts.Verb)
	return err
}

func mergeErr(verb string, err error) error {
	if errors.Is(err, merge.ErrInvalid) {
		return usagef("merge %s: %w", verb, err)
	}
	return fmt.Errorf("merge %s: %w", verb, err)
}

func printMergeStatus(w io.Writer, cfg *config.Config, s merge.Status) error {
	switch {
	case cfg == nil:
	case cfg.Merge == nil:
		fmt.Fprintln(w, "no merge queue: swarmd.yaml has no merge section")
	default:
		mc := cfg.Merge
		fmt.Fprintf(w, "merge queue into %s: strategy %s, %s, timeout %s", mc.Into, mc.Strategy, gateWords(mc.Gate), config.FormatDuration(mc.Timeout))
		if mc.Batch > 1 {
			fmt.Fprintf(w, ", batches of up to %d", mc.Batch)
		}
		if mc.Parallel > 1 {
			fmt.Fprintf(w, ", %d gate runs at once", mc.Parallel)
		}
		fmt.Fprintln(w)
	}
	switch {
	case s.Paused:
		fmt.Fprintf(w, "state:   paused by %s (swarmd merge resume)\n", s.PausedBy)
	case s.Waiting != "":
		fmt.Fprintf(w, "state:   waiting: %s\n", printable(s.Waiting, false))
	default:
		fmt.Fprintln(w, "state:   running")
	}
	if c := s.Current; c != nil {
		fmt.Fprintf(w, "testing: task %d (%s, %s at %s) since %s", c.Task, c.Agent, c.Branch, shortHash(c.Head), clock(c.StartedAt))
		if c.GateSeq != 0 {
			fmt.Fprintf(w, ", gate run %d (swarmd logs merge --session %d)", c.GateSeq, c.GateSeq)
		}
		fmt.Fprintln(w)
	}
	if a := s.Ahead; a != nil {
		ids := make([]string, len(a.Tasks))
		for i, t := range a.Tasks {
			ids[i] = strconv.FormatInt(t, 10)
		}
		word := "task"
		if len(ids) > 1 {
			word = "tasks"
		}
		fmt.Fprintf(w, "ahead:   %s %s, on the candidate under test, since %s, gate run %d (swarmd logs merge --session %d)\n",
			word, strings.Join(ids, ", "), clock(a.Since), a.GateSeq, a.GateSeq)
	}
	fmt.Fprintf(w, "queued:  %d\n", len(s.Queued))
	for _, e := range s.Queued {
		fmt.Fprintf(w, "  task %d (%s, %s at %s) since %s\n", e.Task, e.Agent, e.Branch, shortHash(e.Head), clock(e.EnqueuedAt))
	}
	if len(s.Recent) > 0 {
		fmt.Fprintln(w, "recent:")
	}
	for _, e := range s.Recent {
		fmt.Fprintf(w, "  task %d %s %s\n", e.Task, clock(e.FinishedAt), resultWords(e))
	}
	return nil
}

func printEntries(w io.Writer, es []merge.Entry) error {
	if len(es) == 0 {
		_, err := fmt.Fprintln(w, "the merge queue is empty")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTASK\tAGENT\tBRANCH\tHEAD\tSTATE\tQUEUED\tRESULT")
	for _, e := range es {
		res := "-"
		if e.State == merge.Merged || e.State == merge.Rejected {
			res = resultWords(e)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Task, e.Agent, e.Branch, shortHash(e.Head),
			e.State, clock(e.EnqueuedAt), res)
	}
	return tw.Flush()
}

// resultWords is a finished entry's result on one line.
func resultWords(e merge.Entry) string {
	switch {
	case e.State == merge.Merged:
		return "merged at " + shortHash(e.Candidate)
	case e.Result == string(merge.KindConflict):
		return "conflict: " + printable(strings.Join(e.Paths(), ", "), false)
	}
	last := strings.TrimSpace(e.Detail)
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	s := e.Result
	if e.GateSeq != 0 {
		s += fmt.Sprintf(" (swarmd logs merge --session %d)", e.GateSeq)
	}
	if last != "" {
		s += ": " + printable(cutRunes(last, 120), false)
	}
	return s
}

func gateWords(gate []string) string {
	switch len(gate) {
	case 0:
		return "no gate"
	case 1:
		return "gate " + gate[0]
	}
	return fmt.Sprintf("gate of %d commands", len(gate))
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func cutRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
