package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/store"
)

// DaemonJSON is one element of `swarmd daemons --json`.
type DaemonJSON struct {
	Daemon   string     `json:"daemon"` // host and state dir, as its leases name it
	Agents   []string   `json:"agents"` // as its config last recorded them
	Recorded *time.Time `json:"recorded,omitempty"`
	// Leases it holds: unexpired (it runs) and expired (it died or stopped
	// uncleanly; another daemon reaps them).
	Live    int `json:"live_leases"`
	Expired int `json:"expired_leases"`
	// MergeInto is the merge target its config gave at its start ("": no
	// merge queue; absent: it recorded none, as a release before).
	MergeInto *string `json:"merge_into,omitempty"`
}

// daemonsOptions are `swarmd daemons`'s.
type daemonsOptions struct {
	IO         Streams
	ConfigPath string
	JSON       bool
	Forget     string // the daemon to forget ("": list)
	Now        func() time.Time
}

// NewDaemonsCommand is `swarmd daemons`.
func NewDaemonsCommand(s Streams) *cobra.Command { return newDaemonsCmd(s, nil) }

// newDaemonsCmd is `swarmd daemons` and `swarmd daemons forget`; runF (nil:
// daemonsRun) runs them.
func newDaemonsCmd(s Streams, runF func(context.Context, *daemonsOptions) error) *cobra.Command {
	opts := &daemonsOptions{IO: s, Now: time.Now}
	cmd := &cobra.Command{
		Use:   "daemons",
		Short: "The swarm's daemons: the agents each runs, its merge target, whether it holds its leases",
		Long: `List the daemons of the swarm, one line each: its name (host and state dir), the agents its config
last recorded (at its start and at each reload), when, the merge target its config gave at its
start (a swarm has one: a daemon that differs from a running one is refused), and the agent leases
it holds, live or expired. On a store of its own there is one daemon, which holds no lease (its
state dir's lock keeps a second out); on a shared PostgreSQL store, every daemon
that ever ran on it and was not forgotten. The agents of every listed daemon, running or stopped,
are the swarm's: tasks may be assigned to them and mail sent to them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Forget = ""
			return orRun(runF, daemonsRun)(cmd.Context(), opts)
		},
	}
	cmd.PersistentFlags().StringVarP(&opts.ConfigPath, "config", "c", configName, "config file (names the store)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "a JSON array of {daemon, agents, recorded, live_leases, expired_leases, merge_into}")
	forget := &cobra.Command{
		Use:   "forget DAEMON",
		Short: "Remove a daemon retired for good from the swarm's list, and its agents with it",
		Long: `Remove a daemon retired for good (its host decommissioned, its state dir gone) from the swarm's
list, as 'swarmd daemons' names it. Its agents are then no longer the swarm's, unless another
daemon's config names them: tasks assigned to them wait for a person (swarmd inbox), and a daemon
under that name that starts again records its agents anew. A daemon whose leases have not expired
runs, and is refused: stop it first (its leases are released at a clean stop). So is the daemon
that answers on this config's control socket (on a store of its own, a daemon holds no leases).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Forget = args[0]
			return orRun(runF, daemonsRun)(cmd.Context(), opts)
		},
	}
	cmd.AddCommand(forget)
	return cmd
}

func daemonsRun(ctx context.Context, opts *daemonsOptions) error {
	verb := "daemons"
	if opts.Forget != "" {
		verb = "daemons forget"
	}
	who, err := whoCalls(opts.IO.Getenv, verb)
	if err != nil {
		return err
	}
	if !who.isOperator() {
		return usagef("%s: an operator command; agent %s's session may not run it", verb, who.name)
	}
	db, err := openSwarmDB(ctx, opts.IO, opts.ConfigPath, verb)
	if err != nil {
		return err
	}
	defer db.Close()
	if opts.Forget != "" {
		if db.cfg != nil {
			// On a store of its own a daemon holds no leases, which is
			// how ForgetMembers knows one runs: ask this config's.
			info, err := control.NewClient(db.cfg.SocketPath()).Daemon(ctx)
			if err == nil && info.Name == opts.Forget {
				return usagef("daemons forget: daemon %s runs (it answers on %s): stop it first", printable(opts.Forget, false), db.cfg.SocketPath())
			}
		}
		return forgetDaemon(ctx, db.DB, opts)
	}
	ds, err := readDaemons(ctx, db.DB, opts.Now())
	if err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	if opts.JSON {
		return printJSON(opts.IO.Out, ds)
	}
	if len(ds) == 0 {
		_, err := fmt.Fprintln(opts.IO.Out, "no daemon has recorded its agents yet (has swarmd run on this store?)")
		return err
	}
	w := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "DAEMON\tAGENTS\tRECORDED\tTARGET\tLEASES")
	for _, d := range ds {
		recorded := "-"
		if d.Recorded != nil {
			recorded = d.Recorded.Local().Format(time.DateTime)
		}
		leases := fmt.Sprintf("%d live", d.Live)
		if d.Expired > 0 {
			leases += fmt.Sprintf(", %d expired", d.Expired)
		}
		target := "-"
		switch {
		case d.MergeInto == nil:
		case *d.MergeInto == "":
			target = "(no merge queue)"
		default:
			target = printable(*d.MergeInto, false)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", printable(d.Daemon, false), printable(strings.Join(d.Agents, ","), false), recorded, target, leases)
	}
	return w.Flush()
}

// readDaemons is the store's list of daemons (store.DB.Daemons) as
// `--json` prints it.
func readDaemons(ctx context.Context, db *store.DB, now time.Time) ([]DaemonJSON, error) {
	ds, err := db.Daemons(ctx, now)
	if err != nil {
		return nil, err
	}
	targets, err := db.DaemonSettings(ctx, daemon.SettingMergeInto)
	if err != nil {
		return nil, err
	}
	out := make([]DaemonJSON, 0, len(ds))
	for _, d := range ds {
		j := DaemonJSON{Daemon: d.Name, Agents: d.Agents, Live: d.Live, Expired: d.Expired}
		if into, ok := targets[d.Name]; ok {
			j.MergeInto = &into
		}
		if !d.Recorded.IsZero() {
			j.Recorded = &d.Recorded
		}
		out = append(out, j)
	}
	return out, nil
}

func forgetDaemon(ctx context.Context, db *store.DB, opts *daemonsOptions) error {
	n, err := db.ForgetMembers(ctx, opts.Forget, opts.Now())
	var live *store.LiveDaemonError
	switch {
	case errors.As(err, &live):
		return usagef("daemons forget: %s", live.Error())
	case errors.Is(err, store.ErrUnknownDaemon):
		ds, rerr := readDaemons(ctx, db, opts.Now())
		if rerr != nil {
			return usagef("daemons forget: no daemon %q in the swarm's list", opts.Forget)
		}
		names := make([]string, 0, len(ds))
		for _, d := range ds {
			names = append(names, d.Daemon)
		}
		return usagef("daemons forget: no daemon %q in the swarm's list (daemons: %s)", printable(opts.Forget, false), strings.Join(names, ", "))
	case err != nil:
		return fmt.Errorf("daemons forget: %w", err)
	}
	_, err = fmt.Fprintf(opts.IO.Out, "forgot daemon %s and its %d agent(s): tasks assigned only to them now wait for a person (swarmd inbox)\n",
		printable(opts.Forget, false), n)
	return err
}
