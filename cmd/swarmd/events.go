package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/mailbox"
)

// eventsPoll is how often `swarmd events -f` looks for new events.
const eventsPoll = 250 * time.Millisecond

// newEventsCommand is `swarmd events`: the lifecycle event log, read from
// swarm.db directly so it works whether or not the daemon runs.
func newEventsCommand(s streams) *cobra.Command {
	o := &operateMain{s: s}
	var agentName string
	var follow, jsonOut bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the lifecycle event log: every transition, who caused it and why",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.config()
			if err != nil {
				return err
			}
			ctx, cancel := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer cancel()
			db, err := mailbox.Open(ctx, cfg.DBPath(), mailbox.Options{NoCreate: true})
			if err != nil {
				return usagef("events: %w (has swarmd run in this repo yet?)", err)
			}
			defer db.Close()
			enc := json.NewEncoder(s.out)
			var after int64
			for {
				evs, err := db.Events(context.WithoutCancel(ctx), mailbox.EventQuery{Agent: agentName, AfterID: after})
				if err != nil {
					return err
				}
				for _, e := range evs {
					after = e.ID
					if jsonOut {
						if err := enc.Encode(control.Event{ID: e.ID, At: e.At, Agent: e.Agent, From: e.From, Event: e.Event,
							To: e.To, Effect: e.Effect, Actor: e.Actor, Reason: e.Reason, SessionID: e.SessionID}); err != nil {
							return err
						}
						continue
					}
					line := fmt.Sprintf("%s %-8s %s --%s--> %s", e.At.Local().Format("2006-01-02 15:04:05.000"), e.Agent, e.From, e.Event, e.To)
					if e.Effect != "" {
						line += " [" + e.Effect + "]"
					}
					line += " by " + e.Actor
					if e.Reason != "" {
						line += ": " + e.Reason
					}
					fmt.Fprintln(s.out, line)
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
		},
	}
	cmd.Flags().StringVarP(&o.configPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	cmd.Flags().StringVar(&agentName, "agent", "", "only this agent's events")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON lines")
	return cmd
}
