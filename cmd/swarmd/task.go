package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// taskMain is `swarmd task …`: the operator's backlog commands and the
// verbs an agent runs inside its session to claim and report on work. Like
// mail, a short-lived process that opens swarm.db directly, so it works
// whether or not the daemon runs (but a session on a shared store runs it
// through its daemon: forwardSessionCLI); who acts is decided as for mail
// (whoCalls).
type taskMain struct {
	s          streams
	configPath string
	jsonOut    bool
	storeWait  time.Duration
}

// verbKind says who may run a task verb.
type verbKind int

const (
	anyone       verbKind = iota // add, list, show
	operatorVerb                 // approve, cancel, retry, requeue: not from a session
	sessionVerb                  // claim, start, done, fail, block, split: an agent only
)

// taskCtx is what one task verb works with.
type taskCtx struct {
	db     *store.DB // for waitStore
	board  *taskboard.Board
	agents []string // known agent names; nil when unknown
	who    caller
}

// holder is who reports on a held task: the agent and its session, so a
// stale session is fenced out.
func (c *taskCtx) holder() taskboard.Holder {
	return taskboard.Holder{Agent: c.who.name, Session: c.who.session}
}

func newTaskCommand(s streams) *cobra.Command {
	t := &taskMain{s: s}
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Give the swarm work and report on it: add, list, claim, finish tasks",
		Long: `The task board in swarm.db. The operator adds tasks and steers them (add, list, show, approve,
cancel, retry, requeue); an agent, inside its session, claims a task and reports on it (claim, start,
done, fail, block, split). States are printed by their names (OPEN, CLAIMED, IN_PROGRESS, ...).

Exit status: 0 on success, 1 when the task's state or holder forbids the request or the id is unknown,
2 for usage errors. See docs/tasks.md.`,
		Example: `  swarmd task add "Fix the flaky parser test" --priority 5
  swarmd task list --state open
  swarmd task show 7 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&t.configPath, "config", "c", "swarmd.yaml", "config file (used when SWARM_DB_PATH is not set)")
	pf.BoolVar(&t.jsonOut, "json", false, "print JSON for scripts (the shape is in docs/tasks.md)")
	pf.DurationVar(&t.storeWait, "store-wait", defaultStoreWait, "how long to keep retrying a write the store refuses as busy or unreachable before giving up, saying nothing was recorded (one try may wait up to 10s for SQLite's lock)")
	cmd.AddCommand(t.addCommand(), t.listCommand(), t.showCommand())
	cmd.AddCommand(t.operatorCommands()...)
	cmd.AddCommand(t.sessionCommands()...)
	return cmd
}

// run checks who may run verb, opens the board and calls f.
func (t *taskMain) run(ctx context.Context, verb string, kind verbKind, f func(*taskCtx) error) error {
	who, err := whoCalls(t.s.getenv, "task")
	if err != nil {
		return err
	}
	switch {
	case kind == operatorVerb && who.inSession:
		return usagef("task %s: an operator command; agent %s's session may not run it", verb, who.name)
	case kind == sessionVerb && who.isOperator():
		return usagef("task %s: for an agent inside its session (SWARM_AGENT_ID is not set); the operator uses task cancel, retry or requeue", verb)
	}
	db, err := openSwarmDB(ctx, t.s, t.configPath, "task")
	if err != nil {
		return err
	}
	defer db.Close()
	if !who.isOperator() {
		if err := knownAgent(db.agents, who.name, "task "+verb+": SWARM_AGENT_ID"); err != nil {
			return err
		}
	}
	reviewers, err := t.reviewerOf(ctx, db)
	if err != nil {
		return fmt.Errorf("task %s: %w", verb, err)
	}
	return f(&taskCtx{board: daemon.OpenTaskBoard(db.DB, reviewers), agents: db.agents, who: who, db: db.DB})
}

// reviewerOf is who reviews the tasks an agent claims, as the daemon's
// claims see it: the config's reviewer and max_iterations when the config
// was found, else (inside a session) what the daemon recorded in swarm.db,
// never the session's environment, which the agent could change.
func (t *taskMain) reviewerOf(ctx context.Context, db *swarmDB) (*daemon.ReviewPolicy, error) {
	if db.cfg != nil {
		return daemon.ConfigReviewPolicy(func() *config.Config { return db.cfg }), nil
	}
	return daemon.RecordedReviewPolicy(ctx, db.DB)
}

// taskErr makes a refused request (empty title, ...) a usage error, exit 2;
// everything else, the state or holder forbidding it and unknown ids
// included, exits 1. The board's errors already name the task and its state.
func taskErr(verb string, err error) error {
	if errors.Is(err, taskboard.ErrInvalid) {
		return usagef("task %s: %w", verb, err)
	}
	return fmt.Errorf("task %s: %w", verb, err)
}

// parseTaskID reads a task id such as 7 or #7; what names where it was
// given ("task add: --after").
func parseTaskID(what, s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("%s %q: want a task id, a positive number such as 7", what, s)
	}
	return id, nil
}

// report prints a task after a verb moved it: its state on one line, or
// with --json the whole task as it is now (what followed from the move
// included: a DONE task is CLOSED at once).
func (t *taskMain) report(ctx context.Context, c *taskCtx, verb string, id int64) error {
	tk, err := c.board.Get(ctx, id)
	if err != nil {
		return taskErr(verb, err)
	}
	if t.jsonOut {
		return printJSON(t.s.out, tk)
	}
	_, err = fmt.Fprintf(t.s.out, "task %d is %s\n", tk.ID, tk.StateName)
	return err
}

func (t *taskMain) addCommand() *cobra.Command {
	var n taskboard.NewTask
	var after []string
	var parent string
	cmd := &cobra.Command{
		Use:   "add TITLE [--body TEXT|-] [--to AGENT] [--priority N] [--after ID]... [--parent ID] [--plan] [--reviewer AGENT [--max-iterations N]]",
		Short: "Add a task; print its id alone on standard output",
		Long: `Add a task. It starts OPEN (PLANNED with --plan, until 'swarmd task approve'; BLOCKED while a task
named by --after is not CLOSED). The highest priority is claimed first, then the oldest. --to reserves it
for one agent; without it any agent may claim it. --body - reads the body from standard input.
--reviewer names the agent whose PASS the work needs before the task closes (its FAIL sends the task
back to the worker, at most --max-iterations rounds); without it the claimant's config decides.`,
		Example: `  swarmd task add "Fix the flaky parser test"
  id=$(swarmd task add "Write the release notes" --to docs --priority 5 --after 7)
  git log -5 | swarmd task add "Review the last five commits" --body - --plan`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n.Title = args[0]
			for _, a := range after {
				id, err := parseTaskID("task add: --after", a)
				if err != nil {
					return err
				}
				n.After = append(n.After, id)
			}
			if parent != "" {
				id, err := parseTaskID("task add: --parent", parent)
				if err != nil {
					return err
				}
				n.Parent = id
			}
			if n.Body == "-" {
				// One byte past the limit, so the board refuses an oversize
				// body with its clear error instead of it being cut here.
				b, err := io.ReadAll(io.LimitReader(t.s.in, taskboard.MaxBodyBytes+1))
				if err != nil {
					return fmt.Errorf("task add: read body from stdin: %w", err)
				}
				n.Body = string(b)
			}
			return t.run(cmd.Context(), "add", anyone, func(c *taskCtx) error { return t.add(cmd.Context(), c, n) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&n.Body, "body", "", "the task's details for the agent ('-' reads standard input)")
	f.StringVar(&n.Assignee, "to", "", "only this agent may claim it")
	f.IntVar(&n.Priority, "priority", 0, "higher is claimed first")
	f.StringSliceVar(&after, "after", nil, "wait until this task is CLOSED (repeatable, or comma-separated)")
	f.StringVar(&parent, "parent", "", "make it a subtask of this task")
	f.BoolVar(&n.Plan, "plan", false, "create it PLANNED: no agent claims it before 'swarmd task approve'")
	f.StringVar(&n.Reviewer, "reviewer", "", "the agent that reviews the work before the task closes")
	f.IntVar(&n.MaxIterations, "max-iterations", 0, "review rounds before the task fails (default 3)")
	t.completeAgents(cmd, "to")
	t.completeAgents(cmd, "reviewer")
	t.completeTasks(cmd, "after")
	t.completeTasks(cmd, "parent")
	return cmd
}

func (t *taskMain) add(ctx context.Context, c *taskCtx, n taskboard.NewTask) error {
	if n.Assignee != "" {
		if err := knownAgent(c.agents, n.Assignee, "task add: --to"); err != nil {
			return err
		}
	}
	if n.Reviewer != "" {
		if err := knownAgent(c.agents, n.Reviewer, "task add: --reviewer"); err != nil {
			return err
		}
		if n.Reviewer == n.Assignee {
			return usagef("task add: --reviewer %s is also --to: an agent cannot review its own work", n.Reviewer)
		}
	} else if n.MaxIterations != 0 {
		return usagef("task add: --max-iterations needs --reviewer")
	}
	n.CreatedBy = c.who.actor()
	tk, err := c.board.Add(ctx, n)
	if err != nil {
		return taskErr("add", err)
	}
	if t.jsonOut {
		return printJSON(t.s.out, tk)
	}
	_, err = fmt.Fprintln(t.s.out, tk.ID)
	return err
}

func (t *taskMain) listCommand() *cobra.Command {
	var state, agent string
	cmd := &cobra.Command{
		Use:   "list [--state S] [--agent A]",
		Short: "List tasks by id: state, priority, assignee, claimant, title",
		Example: `  swarmd task list
  swarmd task list --state in_progress --agent alice
  swarmd task list --json | jq '.[] | select(.state == "FAILED") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var f taskboard.Filter
			if state != "" {
				st, err := task.ParseState(state)
				if err != nil {
					return usagef("task list: --state: %w", err)
				}
				f.State = &st
			}
			f.Agent = agent
			return t.run(cmd.Context(), "list", anyone, func(c *taskCtx) error { return t.list(cmd.Context(), c, f) })
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only tasks in this state (OPEN, IN_PROGRESS, ...; any case)")
	cmd.Flags().StringVar(&agent, "agent", "", "only tasks assigned to or held by this agent")
	stateNames := make([]string, len(task.AllStates))
	for i, st := range task.AllStates {
		stateNames[i] = st.String()
	}
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(stateNames, cobra.ShellCompDirectiveNoFileComp))
	t.completeAgents(cmd, "agent")
	return cmd
}

func (t *taskMain) list(ctx context.Context, c *taskCtx, f taskboard.Filter) error {
	ts, err := c.board.List(ctx, f)
	if err != nil {
		return taskErr("list", err)
	}
	if t.jsonOut {
		if ts == nil {
			ts = []taskboard.Task{} // an array, never null
		}
		return printJSON(t.s.out, ts)
	}
	if len(ts) == 0 {
		_, err := fmt.Fprintln(t.s.out, "no tasks")
		return err
	}
	tw := tabwriter.NewWriter(t.s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tPRIORITY\tASSIGNEE\tCLAIMANT\tTITLE")
	for _, tk := range ts {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", tk.ID, tk.StateName, tk.Priority, orDash(tk.Assignee),
			orDash(tk.Claimant), printable(tk.Title, false))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// taskWithHistory is `task show --json`: the task object of `task list
// --json` with its transitions, oldest first.
type taskWithHistory struct {
	taskboard.Task
	History []taskboard.Event `json:"history"`
	// Spend is what the sessions that worked on or reviewed it used.
	Spend taskboard.Spend `json:"spend"`
}

func (t *taskMain) showCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one task: its fields, body and history",
		Example: `  swarmd task show 7
  swarmd task show 7 --json | jq .history`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseTaskID("task show: id", args[0])
			if err != nil {
				return err
			}
			return t.run(cmd.Context(), "show", anyone, func(c *taskCtx) error { return t.show(cmd.Context(), c, id) })
		},
		ValidArgsFunction: t.taskArgs(),
	}
	return cmd
}

func (t *taskMain) show(ctx context.Context, c *taskCtx, id int64) error {
	tk, err := c.board.Get(ctx, id)
	if err != nil {
		return taskErr("show", err)
	}
	hist, err := c.board.History(ctx, id)
	if err != nil {
		return taskErr("show", err)
	}
	sp, err := c.board.Spend(ctx, id)
	if err != nil {
		return taskErr("show", err)
	}
	if t.jsonOut {
		if hist == nil {
			hist = []taskboard.Event{}
		}
		return printJSON(t.s.out, taskWithHistory{Task: tk, History: hist, Spend: sp})
	}
	if err := t.printTask(tk); err != nil {
		return err
	}
	fmt.Fprintf(t.s.out, "\nspend: %s\n", spendText(sp))
	fmt.Fprintln(t.s.out, "\nhistory:")
	for _, e := range hist {
		fmt.Fprintf(t.s.out, "  %s %s\n", e.At.Local().Format(eventTimeLayout),
			taskTransition(e.From, e.TransitionReason, e.To, e.Actor, e.Reason))
	}
	return nil
}

// spendText is a task's spend for people: its sessions, tokens in and out,
// and cost.
func spendText(sp taskboard.Spend) string {
	if sp.Sessions == 0 {
		return "no session recorded"
	}
	n := "sessions"
	if sp.Sessions == 1 {
		n = "session"
	}
	return fmt.Sprintf("%d %s: %d tokens in, %d out, cost %s", sp.Sessions, n, sp.TokensIn, sp.TokensOut, fmtCost(sp.CostUSD))
}

// printTask writes a task for people: title, fields, body.
func (t *taskMain) printTask(tk taskboard.Task) error {
	fmt.Fprintf(t.s.out, "task %d: %s\n", tk.ID, printable(tk.Title, false))
	tw := tabwriter.NewWriter(t.s.out, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, printable(v, false))
		}
	}
	row("state:", tk.StateName)
	row("priority:", strconv.Itoa(tk.Priority))
	row("assigned to:", tk.Assignee)
	if tk.Claimant != "" {
		// The last claimant stays on a finished task: who did the work.
		row("claimed by:", tk.Claimant+" (session "+orDash(tk.ClaimSession)+")")
	}
	if tk.Parent != 0 {
		row("subtask of:", strconv.FormatInt(tk.Parent, 10))
	}
	if len(tk.Deps) > 0 {
		ids := make([]string, len(tk.Deps))
		for i, d := range tk.Deps {
			ids[i] = strconv.FormatInt(d, 10)
		}
		row("after:", strings.Join(ids, ", "))
	}
	row("retries:", fmt.Sprintf("%d of %d", tk.Retries, tk.MaxRetries))
	row("blocked:", tk.BlockedReason)
	row("result:", tk.Result)
	row("head:", tk.Head)          // frozen at DONE: what is reviewed and merged
	row("work head:", tk.WorkHead) // where its line of commits stands
	row("created:", tk.CreatedAt.Local().Format(time.DateTime)+" by "+tk.CreatedBy)
	row("updated:", tk.UpdatedAt.Local().Format(time.DateTime))
	if err := tw.Flush(); err != nil {
		return err
	}
	if body := strings.TrimRight(tk.Body, "\n"); body != "" {
		fmt.Fprintf(t.s.out, "\n%s\n", printable(body, true))
	}
	return nil
}

// operatorCommands are the verbs that steer a task by id: the operator's,
// refused inside a session.
func (t *taskMain) operatorCommands() []*cobra.Command {
	type verb func(*taskboard.Board, context.Context, int64) (taskboard.Task, error)
	verbs := []struct {
		name, short, example string
		do                   verb
	}{
		{"approve", "Approve a PLANNED task: it becomes OPEN for the agents",
			"  swarmd task list --state planned\n  swarmd task approve 7", (*taskboard.Board).Approve},
		{"cancel", "Cancel a task, whoever holds it (CANCELLED is final)",
			"  swarmd task cancel 7", (*taskboard.Board).Cancel},
		{"retry", "Send a FAILED task back to OPEN, counting one of its max_retries",
			"  swarmd task list --state failed\n  swarmd task retry 7", (*taskboard.Board).Retry},
		{"requeue", "Take a task back from its holder, or out of BLOCKED, and make it OPEN",
			"  swarmd task requeue 7", (*taskboard.Board).Requeue},
	}
	out := make([]*cobra.Command, 0, len(verbs))
	for _, v := range verbs {
		out = append(out, &cobra.Command{
			Use:     v.name + " ID",
			Short:   v.short,
			Example: v.example,
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, err := parseTaskID("task "+v.name+": id", args[0])
				if err != nil {
					return err
				}
				ctx := cmd.Context()
				return t.run(ctx, v.name, operatorVerb, func(c *taskCtx) error {
					if _, err := v.do(c.board, ctx, id); err != nil {
						return taskErr(v.name, err)
					}
					return t.report(ctx, c, v.name, id)
				})
			},
			ValidArgsFunction: t.taskArgs(),
		})
	}
	return out
}

// sessionCommands are the verbs an agent runs inside its session: claim a
// task, then report on the one it holds.
func (t *taskMain) sessionCommands() []*cobra.Command {
	claim := &cobra.Command{
		Use:   "claim [ID]",
		Short: "Claim a task for your agent, the one named or the best OPEN one, and print it",
		Long: `Claim a task for the agent whose session runs this: the one named, or without ID the OPEN task
with the highest priority (then the oldest) that is for this agent or for anyone and whose dependencies
are CLOSED. An agent holds one task at a time. Exits 1 when there is nothing to claim.`,
		Example: "  swarmd task claim\n  swarmd task claim 7 --json",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var id int64
			if len(args) == 1 {
				var err error
				if id, err = parseTaskID("task claim: id", args[0]); err != nil {
					return err
				}
			}
			return t.run(cmd.Context(), "claim", sessionVerb, func(c *taskCtx) error { return t.claim(cmd.Context(), c, id) })
		},
		ValidArgsFunction: t.taskArgs(task.Open),
	}
	start := &cobra.Command{
		Use:     "start",
		Short:   "Start work on the task you hold: CLAIMED to IN_PROGRESS",
		Example: "  swarmd task claim && swarmd task start",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return t.onHeld(cmd.Context(), "start", func(ctx context.Context, c *taskCtx, id int64) error {
				_, err := c.board.Start(ctx, id, c.holder())
				return err
			})
		},
	}
	var summary string
	done := &cobra.Command{
		Use:     "done [--summary TEXT]",
		Short:   "Report the task you hold finished",
		Example: `  swarmd task done --summary "parser fixed, tests added in parser_test.go"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return t.onHeld(cmd.Context(), "done", func(ctx context.Context, c *taskCtx, id int64) error {
				// The work is frozen here: the review and the merge take the
				// commit the session's worktree is at now.
				_, err := c.board.DoneAt(ctx, id, c.holder(), summary, worktreeHead(ctx, t.s.getenv("SWARM_WORKTREE")))
				return err
			})
		},
	}
	done.Flags().StringVar(&summary, "summary", "", "what was done, for the operator and the next agent")
	return []*cobra.Command{claim, start, done, t.failCommand(), t.blockCommand(), t.splitCommand()}
}

// worktreeHead is the commit checked out in the session's worktree (dir;
// "" : where the command runs), "" when there is none.
func worktreeHead(ctx context.Context, dir string) string {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "--verify", "--quiet", "HEAD")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func (t *taskMain) claim(ctx context.Context, c *taskCtx, id int64) error {
	var (
		tk  taskboard.Task
		err error
	)
	if id != 0 {
		tk, err = c.board.Claim(ctx, id, c.who.name, c.who.session)
	} else {
		// ClaimNext is the runner's, which only claims for an agent holding
		// nothing; the agent's own session is the only other claimant for
		// it, so this check does not race.
		h, held, err := c.board.Held(ctx, c.who.name)
		if err != nil {
			return taskErr("claim", err)
		}
		if held {
			return fmt.Errorf("task claim: %s already holds task %d (%s): finish, fail or block it first", c.who.name, h.ID, h.StateName)
		}
		var ok bool
		if tk, ok, err = c.board.ClaimNext(ctx, c.who.name, c.who.session); err == nil && !ok {
			return fmt.Errorf("task claim: no OPEN task that %s may claim", c.who.name)
		}
		if err != nil {
			return taskErr("claim", err)
		}
	}
	if err != nil {
		return taskErr("claim", err)
	}
	if tk, err = c.board.Get(ctx, tk.ID); err != nil {
		return taskErr("claim", err)
	}
	if t.jsonOut {
		return printJSON(t.s.out, tk)
	}
	return t.printTask(tk)
}

// onHeld runs a report verb on the task the caller's agent holds (CLAIMED
// or IN_PROGRESS), then prints the task's state.
func (t *taskMain) onHeld(ctx context.Context, verb string, f func(context.Context, *taskCtx, int64) error) error {
	return t.heldVerb(ctx, verb, true, f)
}

// heldVerb is onHeld; report false leaves the printing to f.
func (t *taskMain) heldVerb(ctx context.Context, verb string, report bool, f func(context.Context, *taskCtx, int64) error) error {
	return t.run(ctx, verb, sessionVerb, func(c *taskCtx) error {
		var tk taskboard.Task
		var ok bool
		// A busy store delays the report; it never drops it (waitStore).
		err := waitStore(ctx, c.db, t.storeWait, "task "+verb, func(ctx context.Context) error {
			var err error
			if tk, ok, err = c.board.Held(ctx, c.who.name); err != nil || !ok {
				return err
			}
			return f(ctx, c, tk.ID)
		})
		if err != nil {
			return taskErr(verb, err)
		}
		if !ok {
			return fmt.Errorf("task %s: %s holds no task (CLAIMED or IN_PROGRESS): claim one with 'swarmd task claim'", verb, c.who.name)
		}
		if !report {
			return nil
		}
		return t.report(ctx, c, verb, tk.ID)
	})
}

func (t *taskMain) failCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:     "fail --reason TEXT",
		Short:   "Report the task you hold failed, and why",
		Example: `  swarmd task fail --reason "the API it needs was removed in v2"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef("task fail: --reason TEXT is required: say why it failed")
			}
			return t.onHeld(cmd.Context(), "fail", func(ctx context.Context, c *taskCtx, id int64) error {
				_, err := c.board.Fail(ctx, id, c.holder(), reason)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it failed (required)")
	return cmd
}

func (t *taskMain) blockCommand() *cobra.Command {
	var on, reason string
	cmd := &cobra.Command{
		Use:   "block --on ID | --reason TEXT",
		Short: "Park the task you hold: until another task is CLOSED, or for a reason",
		Long: `Park the task you hold in BLOCKED and give it up. With --on ID it opens again by itself once that
task is CLOSED; with --reason it waits for the operator's 'swarmd task requeue'.`,
		Example: `  swarmd task block --on 12
  swarmd task block --reason "needs a staging database password"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (on == "") == (strings.TrimSpace(reason) == "") {
				return usagef("task block: give exactly one of --on ID or --reason TEXT")
			}
			var dep int64
			if on != "" {
				var err error
				if dep, err = parseTaskID("task block: --on", on); err != nil {
					return err
				}
			}
			return t.onHeld(cmd.Context(), "block", func(ctx context.Context, c *taskCtx, id int64) error {
				_, err := c.board.Block(ctx, id, c.holder(), dep, reason)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&on, "on", "", "the task to wait for")
	cmd.Flags().StringVar(&reason, "reason", "", "what it waits for")
	t.completeTasks(cmd, "on")
	return cmd
}

func (t *taskMain) splitCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "split TITLE...",
		Short: "Split the task you hold into OPEN subtasks; it waits until they are done",
		Long: `Split the task you hold into subtasks, one per TITLE, OPEN for any agent at the task's priority.
You give the task up: it waits in WAITING_FOR_SUBTASKS and becomes DONE by itself when every subtask is.
Prints each subtask's id and title (--json: the subtasks).`,
		Example: `  swarmd task split "Parse the header" "Parse the body" "Wire both into Load"`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return t.heldVerb(cmd.Context(), "split", false, func(ctx context.Context, c *taskCtx, id int64) error {
				kids, err := c.board.Split(ctx, id, c.holder(), args)
				if err != nil {
					return err
				}
				if t.jsonOut {
					return printJSON(t.s.out, kids)
				}
				for _, k := range kids {
					fmt.Fprintf(t.s.out, "%d\t%s\n", k.ID, printable(k.Title, false))
				}
				return nil
			})
		},
	}
}

// taskArgs completes a task id argument from the board (only tasks in
// states, when given), each with its title.
func (t *taskMain) taskArgs(states ...task.State) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return t.taskCompletions(cmd.Context(), states), cobra.ShellCompDirectiveNoFileComp
	}
}

func (t *taskMain) completeTasks(cmd *cobra.Command, flag string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return t.taskCompletions(cmd.Context(), nil), cobra.ShellCompDirectiveNoFileComp
	})
}

func (t *taskMain) taskCompletions(ctx context.Context, states []task.State) []cobra.Completion {
	if ctx == nil {
		ctx = context.Background()
	}
	db, err := openSwarmDB(ctx, t.s, t.configPath, "task")
	if err != nil {
		return nil
	}
	defer db.Close()
	var out []cobra.Completion
	for _, st := range states {
		ts, _ := daemon.OpenTaskBoard(db.DB, nil).List(ctx, taskboard.Filter{State: &st})
		out = appendTaskCompletions(out, ts)
	}
	if len(states) == 0 {
		ts, _ := daemon.OpenTaskBoard(db.DB, nil).List(ctx, taskboard.Filter{})
		out = appendTaskCompletions(out, ts)
	}
	return out
}

func appendTaskCompletions(out []cobra.Completion, ts []taskboard.Task) []cobra.Completion {
	for _, tk := range ts {
		out = append(out, cobra.CompletionWithDesc(strconv.FormatInt(tk.ID, 10), tk.StateName+" "+printable(tk.Title, false)))
	}
	return out
}

// completeAgents completes flag with the agents the config (or the
// session's SWARM_AGENTS) names.
func (t *taskMain) completeAgents(cmd *cobra.Command, flag string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if names := t.s.getenv("SWARM_AGENTS"); names != "" {
			return strings.Split(names, ","), cobra.ShellCompDirectiveNoFileComp
		}
		cfg, err := config.Load(t.configPath)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return cfg.AgentNames(), cobra.ShellCompDirectiveNoFileComp
	})
}

// printJSON writes v indented, for scripts.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
