package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// NeedItem is one thing that needs a person, with the one command that
// deals with it.
type NeedItem struct {
	Kind  string `json:"kind"`
	Agent string `json:"agent,omitempty"`
	Task  int64  `json:"task,omitempty"`
	What  string `json:"what"`
	Fix   string `json:"fix"`
}

// needState is what the inbox is made of, read from the store.
type needState struct {
	running bool // a daemon holds the state dir (SQLite; always true on a shared store)
	agents  map[string]store.AgentRecord
	names   []string // the config's agents
	pauses  map[string]store.PauseRecord
	tasks   []taskboard.Task // PLANNED, FAILED and BLOCKED ones
	mail    int              // unread messages to the operator
}

// needs lists what needs a person, in a fixed order: the swarm, agents,
// tasks, mail.
func needs(st needState) []NeedItem {
	var out []NeedItem
	if !st.running {
		out = append(out, NeedItem{Kind: "not_running", What: "no swarmd runs on this state dir: nothing happens", Fix: "swarmd run"})
	}
	for _, name := range st.names {
		a, ok := st.agents[name]
		if ok && a.StopKind == store.StopFatal {
			out = append(out, NeedItem{Kind: "agent_stopped", Agent: name,
				What: fmt.Sprintf("agent %s stopped for good: %s", name, a.StopReason), Fix: "swarmd start " + name})
		}
		if p, ok := st.pauses[name]; ok && strings.HasPrefix(p.Reason, "budget_exhausted") {
			out = append(out, NeedItem{Kind: "budget_exhausted", Agent: name,
				What: fmt.Sprintf("agent %s is paused: its budget is spent", name), Fix: "swarmd budget set " + name + " USD"})
		}
	}
	for _, t := range st.tasks {
		it := NeedItem{Task: t.ID}
		switch t.StateName {
		case task.Failed.String():
			it.Kind, it.What, it.Fix = "task_failed", fmt.Sprintf("task #%d failed: %s", t.ID, oneLineCut(t.Result, 100)), fmt.Sprintf("swarmd task retry %d", t.ID)
		case task.Planned.String():
			it.Kind, it.What, it.Fix = "task_planned", fmt.Sprintf("task #%d waits for approval: %s", t.ID, oneLineCut(t.Title, 100)), fmt.Sprintf("swarmd task approve %d", t.ID)
		case task.Blocked.String():
			it.Kind, it.What, it.Fix = "task_blocked", fmt.Sprintf("task #%d is blocked: %s", t.ID, oneLineCut(t.BlockedReason, 100)), fmt.Sprintf("swarmd task show %d", t.ID)
		default:
			continue
		}
		out = append(out, it)
	}
	if st.mail > 0 {
		out = append(out, NeedItem{Kind: "mail", What: fmt.Sprintf("%d unread messages to the operator", st.mail), Fix: "swarmd mail inbox"})
	}
	return out
}

func oneLineCut(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "(no reason given)"
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

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
FAILED (swarmd task retry), tasks waiting for approval (swarmd task approve) or blocked, unread mail
to the operator, and a swarm whose daemon is not running. Read from swarm.db: it works whether the
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
		fmt.Fprintf(w, "%s\t%s\n", it.What, it.Fix)
	}
	return w.Flush()
}

func readNeeds(ctx context.Context, s Streams, configPath string) ([]NeedItem, error) {
	db, err := openSwarmDB(ctx, s, configPath, "inbox")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	st := needState{running: true}
	if db.cfg != nil {
		st.names = db.cfg.AgentNames()
		if !db.cfg.SharedStore() {
			if st.running, err = daemon.StateDirInUse(db.cfg.StateDir); err != nil {
				return nil, err
			}
		}
	}
	if st.agents, err = db.Agents(ctx); err != nil {
		return nil, err
	}
	if st.names == nil {
		for n := range st.agents {
			st.names = append(st.names, n)
		}
		sort.Strings(st.names)
	}
	if st.pauses, err = db.Pauses(ctx); err != nil {
		return nil, err
	}
	board := daemon.OpenTaskBoard(db.DB, nil)
	for _, state := range []task.State{task.Failed, task.Planned, task.Blocked} {
		ts, err := board.List(ctx, taskboard.Filter{State: &state})
		if err != nil {
			return nil, err
		}
		st.tasks = append(st.tasks, ts...)
	}
	sort.Slice(st.tasks, func(i, j int) bool { return st.tasks[i].ID < st.tasks[j].ID })
	mb, err := mailbox.New(ctx, db.DB, db.mail)
	if err != nil {
		return nil, err
	}
	msgs, err := mb.Inbox(ctx, mailbox.Operator, false)
	if err != nil {
		return nil, err
	}
	st.mail = len(msgs)
	return needs(st), nil
}
