package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/store"
)

// eventsPoll is how often `swarmd events -f` looks for new events.
const eventsPoll = 250 * time.Millisecond

// eventTimeLayout is how the event log shows times.
const eventTimeLayout = "2006-01-02 15:04:05.000"

// eventsOptions are `swarmd events`'s.
type eventsOptions struct {
	*operateOptions
	Agent  string // only this agent's events
	Task   string // only this task's, its id as given
	Follow bool
	JSON   bool
}

// NewEventsCommand is `swarmd events`: the lifecycle event log, read from
// swarm.db directly so it works whether or not the daemon runs.
func NewEventsCommand(s Streams) *cobra.Command { return newEventsCmd(&operateOptions{IO: s}, nil) }

// newEventsCmd is `swarmd events`; runF (nil: eventsRun) runs it.
func newEventsCmd(o *operateOptions, runF func(context.Context, *eventsOptions) error) *cobra.Command {
	opts := &eventsOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the lifecycle event log: every transition, who caused it and why",
		Long: `Print the lifecycle event log from swarm.db: every transition of every agent and every task, who
caused it and why. An agent's line reads "TIME AGENT FROM --EVENT--> TO [EFFECT] by ACTOR: REASON"; a
task's reads "TIME task ID: FROM --TRANSITION_REASON--> TO by ACTOR: REASON", with task states.`,
		Example: `  swarmd events --agent alice
  swarmd events --task 7
  swarmd events -f --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return orRun(runF, eventsRun)(cmd.Context(), opts) },
	}
	cmd.Flags().StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	cmd.Flags().StringVar(&opts.Agent, "agent", "", "only this agent's events")
	cmd.Flags().StringVar(&opts.Task, "task", "", "only this task's transitions")
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new events")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON lines")
	return cmd
}

func eventsRun(ctx context.Context, opts *eventsOptions) error {
	q := store.EventQuery{Agent: opts.Agent}
	if opts.Task != "" {
		id, err := parseTaskID("events: --task", opts.Task)
		if err != nil {
			return err
		}
		q.TaskID = id
	}
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	db, err := store.Open(ctx, cfg.StoreTarget(), store.Options{NoCreate: true})
	if err != nil {
		return usagef("events: %w (has swarmd run in this repo yet?)", err)
	}
	defer db.Close()
	if err := knownToSwarm(ctx, cfg, q.Agent, "events: --agent", func(ctx context.Context) (bool, error) {
		evs, err := db.Events(ctx, store.EventQuery{Agent: q.Agent, Limit: 1})
		return len(evs) > 0, err
	}); err != nil {
		return err
	}
	if q.TaskID != 0 {
		board, err := daemon.OpenTaskBoard(ctx, db, nil)
		if err == nil {
			_, err = board.Get(ctx, q.TaskID)
		}
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
	}
	return printEvents(ctx, opts.IO, db, q, opts.Follow, opts.JSON)
}

// printEvents prints the events q selects, and with follow the new ones
// until ctx ends.
func printEvents(ctx context.Context, s Streams, db *store.DB, q store.EventQuery, follow, jsonOut bool) error {
	enc := json.NewEncoder(s.Out)
	for {
		evs, err := db.Events(context.WithoutCancel(ctx), q)
		if err != nil {
			return err
		}
		for _, e := range evs {
			q.AfterID = e.ID
			if jsonOut {
				if err := enc.Encode(daemon.ControlEvent(e)); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintln(s.Out, eventLine(e))
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(eventsPoll):
		}
	}
}

// eventLine renders one event for people.
func eventLine(e store.EventRecord) string {
	at := e.At.Local().Format(eventTimeLayout)
	if e.TaskID != 0 {
		return fmt.Sprintf("%s task %d: %s", at, e.TaskID, taskTransition(e.From, e.Event, e.To, e.AbortReason, e.Actor, e.Reason))
	}
	line := fmt.Sprintf("%s %-8s %s --%s--> %s", at, e.Agent, e.From, e.Event, e.To)
	if e.Effect != "" {
		line += " [" + e.Effect + "]"
	}
	line += " by " + e.Actor
	if e.Reason != "" {
		line += ": " + printable(e.Reason, false) // may quote what a session printed
	}
	return line
}

// taskTransition renders a task's transition like an agent's: "OPEN -->
// CLAIMED by agent:alice: claimed", the TransitionReason on the arrow when
// there is one ("IN_PROGRESS --completed--> DONE"), "(new)" for where a task
// was added, and the abort reason of the agent's end that caused it in
// brackets ("IN_PROGRESS --> ORPHANED [timeout]"). Reasons may quote what an
// agent wrote, so they are made safe for a terminal.
func taskTransition(from, reason, to, abort, actor, why string) string {
	if from == "" {
		from = "(new)"
	}
	arrow := "-->"
	if reason != "" {
		arrow = "--" + reason + "-->"
	}
	if abort != "" {
		to += " [" + abort + "]"
	}
	line := from + " " + arrow + " " + to + " by " + actor
	if why != "" {
		line += ": " + printable(why, false)
	}
	return line
}
