package cli

import (
	"cmp"
	"context"
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

// The task commands (`swarmd task …`) are the operator's backlog commands
// and the verbs an agent runs inside its session to claim and report on
// work. Like mail, a short-lived process that opens swarm.db directly, so
// it works whether or not the daemon runs (but a session on a shared store
// runs it through its daemon: cmd/swarmd's forwardSessionCLI); who acts is
// decided as for mail (whoCalls).

// verbKind says who may run a task verb.
type verbKind int

const (
	anyone       verbKind = iota // add, list, show
	operatorVerb                 // approve, cancel, retry, requeue, assign: not from a session
	sessionVerb                  // claim, start, done, fail, block, split: an agent only
)

// taskCtx is what one task verb works with.
type taskCtx struct {
	db     *store.DB // for waitStore
	board  *taskboard.Board
	agents []string // known agent names; nil when unknown
	who    caller
}

// taskObject is a task as the task commands print it (--json, and
// printTask): the board's row, and what the swarm's agents say of it.
type taskObject struct {
	taskboard.Task
	// AssigneeUnknown: the task waits for its assignee, in a state 'task
	// assign' changes, and the swarm has no agent of that name (removed
	// from swarmd.yaml, or renamed): no agent may claim it.
	AssigneeUnknown bool `json:"assignee_unknown,omitempty"`
	// WorkerUnknown: the task waits for its subtasks, and its review's
	// FAIL sends the rework to its worker, which is no agent of the swarm
	// (taskboard.WorkerUnknown): 'task assign' gives the rework to another.
	WorkerUnknown bool `json:"worker_unknown,omitempty"`
	// ReviewerUnknown: the task is DONE and waits for the verdict of its
	// reviewer, which is no agent of the swarm (taskboard.ReviewerUnknown):
	// 'task assign --reviewer' gives the review to another.
	ReviewerUnknown bool `json:"reviewer_unknown,omitempty"`
}

// object is tk as the task commands print it, its assignee and its
// rework's worker checked against the agents the command knows (none
// checked when it knows none).
func (c *taskCtx) object(tk taskboard.Task) taskObject {
	return taskObject{Task: tk, AssigneeUnknown: taskboard.AssigneeUnknown(tk, c.agents),
		WorkerUnknown: taskboard.WorkerUnknown(tk, c.agents), ReviewerUnknown: taskboard.ReviewerUnknown(tk, c.agents)}
}

// assignee is the task's ASSIGNEE cell in 'task list': the agent, marked
// when the swarm has no agent of that name; for a task whose rework goes
// to a worker the swarm has no agent of, that worker, marked: it decides
// who gets the task next.
func (t taskObject) assignee() string {
	switch {
	case t.AssigneeUnknown:
		return t.Assignee + " (not in the swarm)"
	case t.WorkerUnknown:
		return t.Worker + "'s rework (not in the swarm)"
	}
	return orDash(t.Assignee)
}

// holder is who reports on a held task: the agent and its session, so a
// stale session is fenced out.
func (c *taskCtx) holder() taskboard.Holder {
	return taskboard.Holder{Agent: c.who.name, Session: c.who.session}
}

// NewTaskCommand is `swarmd task`.
func NewTaskCommand(s Streams) *cobra.Command {
	o := &dbOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Give the swarm work and report on it: add, list, claim, finish tasks",
		Long: `The task board in swarm.db. The operator adds tasks and steers them (add, list, show, approve,
cancel, retry, requeue, assign); an agent, inside its session, claims a task and reports on it (claim, start,
done, fail, block, split). States are printed by their names (OPEN, CLAIMED, IN_PROGRESS, ...).

Exit status: 0 on success, 1 when the task's state or holder forbids the request or the id is unknown,
2 for usage errors. See docs/tasks.md.`,
		Example: `  swarmd task add "Fix the flaky parser test" --priority 5
  swarmd task list --state open
  swarmd task show 7 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	o.addFlags(cmd, "print JSON for scripts (the shape is in docs/tasks.md)")
	cmd.AddCommand(newTaskAddCmd(o, nil), newTaskListCmd(o, nil), newTaskShowCmd(o, nil))
	for _, v := range steerVerbs() {
		cmd.AddCommand(newTaskSteerCmd(o, v, nil))
	}
	cmd.AddCommand(newTaskAssignCmd(o, nil))
	cmd.AddCommand(newTaskClaimCmd(o, nil))
	for _, v := range []string{"start", "done", "fail", "block", "split"} {
		cmd.AddCommand(newTaskReportCmd(o, v, nil))
	}
	return cmd
}

// withBoard checks who may run verb, opens the board and calls f.
func withBoard(ctx context.Context, o *dbOptions, verb string, kind verbKind, f func(*taskCtx) error) error {
	who, err := o.whoCalls("task")
	if err != nil {
		return err
	}
	switch {
	case kind == operatorVerb && who.inSession:
		return usagef("task %s: an operator command; agent %s's session may not run it", verb, who.name)
	case kind == sessionVerb && who.isOperator():
		return usagef("task %s: for an agent inside its session (SWARM_AGENT_ID is not set); the operator uses task cancel, retry or requeue", verb)
	}
	db, err := o.open(ctx, "task")
	if err != nil {
		return err
	}
	defer db.Close()
	if !who.isOperator() {
		if err := knownAgent(db.agents, who.name, "task "+verb+": SWARM_AGENT_ID"); err != nil {
			return err
		}
	}
	// The board's settings are read as its writes are made: a busy or
	// unreachable store is waited for (--store-wait).
	board := o.IO.Board
	if board != nil && db.borrowed {
		return f(&taskCtx{board: board, agents: db.agents, who: who, db: db.DB})
	}
	if err := waitStore(ctx, db.DB, o.StoreWait, "task "+verb, func(ctx context.Context) error {
		reviewers, err := reviewerOf(ctx, db)
		if err == nil {
			board, err = daemon.OpenTaskBoard(ctx, db.DB, reviewers)
		}
		return err
	}); err != nil {
		return fmt.Errorf("task %s: %w", verb, err)
	}
	return f(&taskCtx{board: board, agents: db.agents, who: who, db: db.DB})
}

// reviewerOf is who reviews the tasks an agent claims, as the daemon's
// claims see it: the config's reviewer and max_iterations when the config
// was found, else (inside a session) what the daemon recorded in swarm.db,
// never the session's environment, which the agent could change.
func reviewerOf(ctx context.Context, db *swarmDB) (*daemon.ReviewPolicy, error) {
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
func report(ctx context.Context, o *dbOptions, c *taskCtx, verb string, id int64) error {
	tk, err := c.board.Get(ctx, id)
	if err != nil {
		return taskErr(verb, err)
	}
	if o.JSON {
		return o.printJSON(c.object(tk))
	}
	_, err = fmt.Fprintf(o.IO.Out, "task %d is %s\n", tk.ID, tk.StateName)
	return err
}

// taskAddOptions are `swarmd task add`'s.
type taskAddOptions struct {
	*dbOptions
	New    taskboard.NewTask // Body "-": standard input
	After  []string          // task ids as given
	Parent string            // a task id as given
}

// newTaskAddCmd is `swarmd task add`; runF (nil: taskAddRun) runs it.
func newTaskAddCmd(o *dbOptions, runF func(context.Context, *taskAddOptions) error) *cobra.Command {
	opts := &taskAddOptions{dbOptions: o}
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
			opts.New.Title = args[0]
			return orRun(runF, taskAddRun)(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.New.Body, "body", "", "the task's details for the agent ('-' reads standard input)")
	f.StringVar(&opts.New.Assignee, "to", "", "only this agent may claim it")
	f.IntVar(&opts.New.Priority, "priority", 0, "higher is claimed first")
	f.StringSliceVar(&opts.After, "after", nil, "wait until this task is CLOSED (repeatable, or comma-separated)")
	f.StringVar(&opts.Parent, "parent", "", "make it a subtask of this task")
	f.BoolVar(&opts.New.Plan, "plan", false, "create it PLANNED: no agent claims it before 'swarmd task approve'")
	f.StringVar(&opts.New.Reviewer, "reviewer", "", "the agent that reviews the work before the task closes")
	f.IntVar(&opts.New.MaxIterations, "max-iterations", 0, "review rounds before the task fails (default 3)")
	completeAgents(o, cmd, "to")
	completeAgents(o, cmd, "reviewer")
	completeTasks(o, cmd, "after")
	completeTasks(o, cmd, "parent")
	return cmd
}

func taskAddRun(ctx context.Context, opts *taskAddOptions) error {
	n := opts.New
	n.After = nil
	for _, a := range opts.After {
		id, err := parseTaskID("task add: --after", a)
		if err != nil {
			return err
		}
		n.After = append(n.After, id)
	}
	if opts.Parent != "" {
		id, err := parseTaskID("task add: --parent", opts.Parent)
		if err != nil {
			return err
		}
		n.Parent = id
	}
	if n.Body == "-" {
		b, err := readStdin(opts.IO.In, taskboard.MaxBodyBytes, "task add")
		if err != nil {
			return err
		}
		n.Body = b
	}
	return withBoard(ctx, opts.dbOptions, "add", anyone, func(c *taskCtx) error {
		if c.who.inSession && (n.Reviewer != "" || n.MaxIterations != 0) {
			// Who reviews an agent's work is the operator's (its config,
			// or this flag from outside a session): a task a session adds
			// for itself naming a lenient reviewer would pass review.
			return usagef("task add: --reviewer and --max-iterations are the operator's; agent %s's session may not set them (a task an agent adds gets the reviewer of the agent that claims it)", c.who.name)
		}
		if c.who.inSession && n.Parent != 0 {
			// A task with subtasks has no change of its own (the merge
			// queue never takes it; it closes once they are merged): a
			// subtask a session hung on a peer's task had that task's work
			// dropped. An agent splits the task it holds with task split.
			return usagef("task add: --parent is the operator's; agent %s's session may not set it (split the task you hold with 'swarmd task split')", c.who.name)
		}
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
		if opts.JSON {
			return opts.printJSON(c.object(tk))
		}
		_, err = fmt.Fprintln(opts.IO.Out, tk.ID)
		return err
	})
}

// taskListOptions are `swarmd task list`'s.
type taskListOptions struct {
	*dbOptions
	State string // a state's name in any case; "": all
	Agent string // assigned to or held by
}

// newTaskListCmd is `swarmd task list`; runF (nil: taskListRun) runs it.
func newTaskListCmd(o *dbOptions, runF func(context.Context, *taskListOptions) error) *cobra.Command {
	opts := &taskListOptions{dbOptions: o}
	cmd := &cobra.Command{
		Use:   "list [--state S] [--agent A]",
		Short: "List tasks by id: state, priority, assignee, claimant, title",
		Example: `  swarmd task list
  swarmd task list --state in_progress --agent alice
  swarmd task list --json | jq '.[] | select(.state == "FAILED") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return orRun(runF, taskListRun)(cmd.Context(), opts) },
	}
	cmd.Flags().StringVar(&opts.State, "state", "", "only tasks in this state (OPEN, IN_PROGRESS, ...; any case)")
	cmd.Flags().StringVar(&opts.Agent, "agent", "", "only tasks assigned to or held by this agent")
	stateNames := make([]string, len(task.AllStates))
	for i, st := range task.AllStates {
		stateNames[i] = st.String()
	}
	completeFlag(o.IO, cmd, "state", cobra.FixedCompletions(stateNames, cobra.ShellCompDirectiveNoFileComp))
	completeAgents(o, cmd, "agent")
	return cmd
}

func taskListRun(ctx context.Context, opts *taskListOptions) error {
	f := taskboard.Filter{Agent: opts.Agent}
	if opts.State != "" {
		st, err := task.ParseState(opts.State)
		if err != nil {
			return usagef("task list: --state: %w", err)
		}
		f.State = &st
	}
	return withBoard(ctx, opts.dbOptions, "list", anyone, func(c *taskCtx) error {
		ts, err := c.board.List(ctx, f)
		if err != nil {
			return taskErr("list", err)
		}
		objs := make([]taskObject, 0, len(ts)) // an array, never null
		for _, tk := range ts {
			objs = append(objs, c.object(tk))
		}
		if opts.JSON {
			return opts.printJSON(objs)
		}
		if len(ts) == 0 {
			_, err := fmt.Fprintln(opts.IO.Out, "no tasks")
			return err
		}
		tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tPRIORITY\tASSIGNEE\tCLAIMANT\tTITLE")
		for _, tk := range objs {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", tk.ID, tk.StateName, tk.Priority, printable(tk.assignee(), false),
				orDash(tk.Claimant), printable(tk.Title, false))
		}
		return tw.Flush()
	})
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
	taskObject
	History []taskboard.Event `json:"history"`
	// Spend is what the sessions that worked on or reviewed it used.
	Spend taskboard.Spend `json:"spend"`
}

// taskShowOptions are `swarmd task show`'s.
type taskShowOptions struct {
	*dbOptions
	ID string // as given: 7 or #7
}

// newTaskShowCmd is `swarmd task show`; runF (nil: taskShowRun) runs it.
func newTaskShowCmd(o *dbOptions, runF func(context.Context, *taskShowOptions) error) *cobra.Command {
	opts := &taskShowOptions{dbOptions: o}
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one task: its fields, body and history",
		Example: `  swarmd task show 7
  swarmd task show 7 --json | jq .history`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			return orRun(runF, taskShowRun)(cmd.Context(), opts)
		},
		ValidArgsFunction: taskArgs(o),
	}
}

func taskShowRun(ctx context.Context, opts *taskShowOptions) error {
	id, err := parseTaskID("task show: id", opts.ID)
	if err != nil {
		return err
	}
	return withBoard(ctx, opts.dbOptions, "show", anyone, func(c *taskCtx) error {
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
		if opts.JSON {
			if hist == nil {
				hist = []taskboard.Event{}
			}
			return opts.printJSON(taskWithHistory{taskObject: c.object(tk), History: hist, Spend: sp})
		}
		out := opts.IO.Out
		if err := printTask(out, c.object(tk)); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nspend: %s\n", spendText(sp))
		fmt.Fprintln(out, "\nhistory:")
		for _, e := range hist {
			fmt.Fprintf(out, "  %s %s\n", e.At.Local().Format(eventTimeLayout),
				taskTransition(e.From, e.TransitionReason, e.To, e.AbortReason, e.Actor, e.Reason))
		}
		return nil
	})
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
	return fmt.Sprintf("%d %s: %d tokens in, %d out, cost %s", sp.Sessions, n, sp.TokensIn, sp.TokensOut, fmtCost(sp.CostUSD, sp.TokensIn+sp.TokensOut))
}

// printTask writes a task for people: title, fields, body.
func printTask(w io.Writer, tk taskObject) error {
	fmt.Fprintf(w, "task %d: %s\n", tk.ID, printable(tk.Title, false))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, printable(v, false))
		}
	}
	row("state:", tk.StateName)
	row("priority:", strconv.Itoa(tk.Priority))
	if tk.AssigneeUnknown {
		row("assigned to:", fmt.Sprintf("%s, which is not an agent of the swarm: no agent may claim the task "+
			"('swarmd task assign %d AGENT' or '--anyone' gives it to another)", tk.Assignee, tk.ID))
	} else {
		row("assigned to:", tk.Assignee)
	}
	if tk.WorkerUnknown {
		row("rework for:", fmt.Sprintf("%s, which is not an agent of the swarm: once its subtasks are done, a review FAIL sends "+
			"the rework there and no agent may claim it ('swarmd task assign %d AGENT' or '--anyone' gives it to another)", tk.Worker, tk.ID))
	}
	switch {
	case tk.ReviewerUnknown:
		row("review:", fmt.Sprintf("%s, which is not an agent of the swarm: the task waits for its verdict "+
			"('swarmd task assign %d --reviewer AGENT' gives the review to another)", tk.Reviewer, tk.ID))
	case tk.Reviewer != "":
		row("review:", fmt.Sprintf("%s (%s, round %d of %d)", tk.Reviewer, orDash(tk.ReviewState), tk.Iteration, tk.MaxIterations))
	}
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
	if tk.HeldOver != "" {
		row("held over:", "the orderly stop of "+tk.HeldOver+": its claimant's next session continues it")
	}
	row("created:", tk.CreatedAt.Local().Format(time.DateTime)+" by "+tk.CreatedBy)
	row("updated:", tk.UpdatedAt.Local().Format(time.DateTime))
	if err := tw.Flush(); err != nil {
		return err
	}
	if body := strings.TrimRight(tk.Body, "\n"); body != "" {
		fmt.Fprintf(w, "\n%s\n", printable(body, true))
	}
	return nil
}

// steerVerb is a verb that steers a task by id: the operator's, refused
// inside a session.
type steerVerb struct {
	name, short, example string
	do                   func(*taskboard.Board, context.Context, int64) (taskboard.Task, error)
}

// steerVerbs are approve, cancel, retry and requeue.
func steerVerbs() []steerVerb {
	return []steerVerb{
		{"approve", "Approve a PLANNED task: it becomes OPEN for the agents",
			"  swarmd task list --state planned\n  swarmd task approve 7", (*taskboard.Board).Approve},
		{"cancel", "Cancel a task, whoever holds it (CANCELLED is final)",
			"  swarmd task cancel 7", (*taskboard.Board).Cancel},
		{"retry", "Send a FAILED task back to OPEN, counting one of its max_retries",
			"  swarmd task list --state failed\n  swarmd task retry 7", (*taskboard.Board).Retry},
		{"requeue", "Take a task back from its holder, or out of BLOCKED, and make it OPEN",
			"  swarmd task requeue 7", (*taskboard.Board).Requeue},
	}
}

// taskSteerOptions are the options of `swarmd task approve`, `cancel`,
// `retry` and `requeue`.
type taskSteerOptions struct {
	*dbOptions
	Verb steerVerb
	ID   string // as given
}

// newTaskSteerCmd is `swarmd task VERB ID` for a steering verb; runF (nil:
// taskSteerRun) runs it.
func newTaskSteerCmd(o *dbOptions, v steerVerb, runF func(context.Context, *taskSteerOptions) error) *cobra.Command {
	opts := &taskSteerOptions{dbOptions: o, Verb: v}
	return &cobra.Command{
		Use:     v.name + " ID",
		Short:   v.short,
		Example: v.example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			return orRun(runF, taskSteerRun)(cmd.Context(), opts)
		},
		ValidArgsFunction: taskArgs(o),
	}
}

func taskSteerRun(ctx context.Context, opts *taskSteerOptions) error {
	v := opts.Verb
	id, err := parseTaskID("task "+v.name+": id", opts.ID)
	if err != nil {
		return err
	}
	return withBoard(ctx, opts.dbOptions, v.name, operatorVerb, func(c *taskCtx) error {
		if _, err := v.do(c.board, ctx, id); err != nil {
			return taskErr(v.name, err)
		}
		return report(ctx, opts.dbOptions, c, v.name, id)
	})
}

// taskAssignOptions are `swarmd task assign`'s.
type taskAssignOptions struct {
	*dbOptions
	ID       string // as given: 7 or #7
	Agent    string // the new assignee; "" with Anyone
	Anyone   bool   // any agent may claim it
	Reviewer string // the new reviewer, instead of an assignee
}

// newTaskAssignCmd is `swarmd task assign`; runF (nil: taskAssignRun) runs
// it.
func newTaskAssignCmd(o *dbOptions, runF func(context.Context, *taskAssignOptions) error) *cobra.Command {
	opts := &taskAssignOptions{dbOptions: o}
	cmd := &cobra.Command{
		Use:   "assign ID AGENT | ID --anyone | ID --reviewer AGENT",
		Short: "Change who may claim a task nobody holds (one agent, or any with --anyone), or who reviews it",
		Long: `Change the assignee of a task that nobody holds (PLANNED, OPEN, BLOCKED, WAITING_FOR_SUBTASKS,
ORPHANED or FAILED): only AGENT may claim it from now on, or, with --anyone, any agent but its reviewer.
A task assigned to an agent that left the swarm (removed from swarmd.yaml, or renamed) waits for that
agent forever: 'swarmd task list' marks it, 'swarmd inbox' lists it, and this gives it to another. The task keeps its state, its
work so far and its review; the change is in its history. Idle agents are woken for it at once.
A parent WAITING_FOR_SUBTASKS comes back by its review's FAIL once its subtasks are done: that rework
goes to AGENT (or any agent) too, no longer to the agent that split it.

A held task (CLAIMED, IN_PROGRESS) is refused: 'swarmd task requeue ID' first. So is a DONE task: it is
its worker's work until its review or merge is over, and a review FAIL or a merge rejection sends it
back OPEN, to assign then. So is a final one. AGENT must be an agent of the swarm, and not the task's
reviewer.

--reviewer AGENT makes AGENT the task's reviewer instead, whatever its state but final: a DONE task
waiting for the verdict of a reviewer that left the swarm waits for good ('swarmd inbox' lists it),
and this gives its review to another. The review keeps its rounds; a verdict of the former reviewer's
is refused from then on. AGENT must be an agent of the swarm that did not do the work (its worker,
claimant or assignee). A task with no review, or whose review has passed, is refused.`,
		Example: `  swarmd task list --agent bob     # bob was removed from swarmd.yaml: its tasks wait for it
  swarmd task assign 7 alice
  swarmd task assign 7 --anyone
  swarmd task assign 9 --reviewer rita   # 9 waits for the review of an agent that left`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID, opts.Agent = args[0], ""
			if len(args) == 2 {
				opts.Agent = args[1]
			}
			return orRun(runF, taskAssignRun)(cmd.Context(), opts)
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			switch len(args) {
			case 0:
				return taskCompletions(cmd.Context(), o, taskboard.AssignableStates()), cobra.ShellCompDirectiveNoFileComp
			case 1:
				return agentCompletions(o), cobra.ShellCompDirectiveNoFileComp
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
	}
	cmd.Flags().BoolVar(&opts.Anyone, "anyone", false, "let any agent claim it (but its reviewer), instead of one AGENT")
	cmd.Flags().StringVar(&opts.Reviewer, "reviewer", "", "make this agent the task's reviewer, instead of changing its assignee")
	completeAgents(o, cmd, "reviewer")
	return cmd
}

func taskAssignRun(ctx context.Context, opts *taskAssignOptions) error {
	id, err := parseTaskID("task assign: id", opts.ID)
	if err != nil {
		return err
	}
	if opts.Reviewer != "" {
		if opts.Agent != "" || opts.Anyone {
			return usagef("task assign: --reviewer changes the reviewer alone: give no AGENT and no --anyone with it")
		}
		return taskAssignReviewer(ctx, opts, id)
	}
	if (opts.Agent == "") != opts.Anyone {
		return usagef("task assign: give exactly one of AGENT, --anyone or --reviewer AGENT")
	}
	return withBoard(ctx, opts.dbOptions, "assign", operatorVerb, func(c *taskCtx) error {
		if opts.Agent != "" {
			if err := knownAgent(c.agents, opts.Agent, "task assign: AGENT"); err != nil {
				return err
			}
		}
		tk, err := c.board.Assign(ctx, id, opts.Agent)
		if err != nil {
			return taskErr("assign", err)
		}
		if opts.JSON {
			return opts.printJSON(c.object(tk))
		}
		whose := "for any agent"
		if tk.Assignee != "" {
			whose = "assigned to " + tk.Assignee
		}
		_, err = fmt.Fprintf(opts.IO.Out, "task %d is %s, %s\n", tk.ID, tk.StateName, whose)
		return err
	})
}

// taskAssignReviewer is `swarmd task assign ID --reviewer AGENT`.
func taskAssignReviewer(ctx context.Context, opts *taskAssignOptions, id int64) error {
	return withBoard(ctx, opts.dbOptions, "assign", operatorVerb, func(c *taskCtx) error {
		if err := knownAgent(c.agents, opts.Reviewer, "task assign: --reviewer"); err != nil {
			return err
		}
		tk, err := c.board.AssignReviewer(ctx, id, opts.Reviewer)
		if err != nil {
			return taskErr("assign", err)
		}
		if opts.JSON {
			return opts.printJSON(c.object(tk))
		}
		_, err = fmt.Fprintf(opts.IO.Out, "task %d is %s, reviewed by %s\n", tk.ID, tk.StateName, tk.Reviewer)
		return err
	})
}

// taskClaimOptions are `swarmd task claim`'s.
type taskClaimOptions struct {
	*dbOptions
	ID string // as given; "": the best OPEN task
}

// newTaskClaimCmd is `swarmd task claim`; runF (nil: taskClaimRun) runs it.
func newTaskClaimCmd(o *dbOptions, runF func(context.Context, *taskClaimOptions) error) *cobra.Command {
	opts := &taskClaimOptions{dbOptions: o}
	return &cobra.Command{
		Use:   "claim [ID]",
		Short: "Claim a task for your agent, the one named or the best OPEN one, and print it",
		Long: `Claim a task for the agent whose session runs this: the one named, or without ID the OPEN task
with the highest priority (then the oldest) that is for this agent or for anyone and whose dependencies
are CLOSED. An agent holds one task at a time. Exits 1 when there is nothing to claim.`,
		Example: "  swarmd task claim\n  swarmd task claim 7 --json",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = ""
			if len(args) == 1 {
				opts.ID = args[0]
			}
			return orRun(runF, taskClaimRun)(cmd.Context(), opts)
		},
		ValidArgsFunction: taskArgs(o, task.Open),
	}
}

// claimRefused is a claim refused for what the board holds, said as it
// is (not through taskErr).
type claimRefused struct{ msg string }

func (e *claimRefused) Error() string { return e.msg }

func taskClaimRun(ctx context.Context, opts *taskClaimOptions) error {
	var id int64
	if opts.ID != "" {
		var err error
		if id, err = parseTaskID("task claim: id", opts.ID); err != nil {
			return err
		}
	}
	return withBoard(ctx, opts.dbOptions, "claim", sessionVerb, func(c *taskCtx) error {
		var tk taskboard.Task
		inDoubt := false // an attempt failed while the store was away: it may have claimed unseen
		// A busy or unreachable store delays the claim (waitStore), as it
		// does a report.
		err := waitStore(ctx, c.db, opts.StoreWait, "task claim", func(ctx context.Context) error {
			if inDoubt || id == 0 {
				h, held, err := c.board.Held(ctx, c.who.name)
				switch {
				case err != nil:
					return err
				case held && inDoubt && h.ClaimSession == c.who.session && (id == 0 || h.ID == id):
					// On PostgreSQL a connection can die between the
					// commit and its answer: that attempt's claim.
					tk = h
					return nil
				case held && id == 0:
					// ClaimNext is the runner's, which only claims for an
					// agent holding nothing; the agent's own session is the
					// only other claimant for it, so this check does not race.
					return &claimRefused{fmt.Sprintf("task claim: %s already holds task %d (%s): finish, fail or block it first", c.who.name, h.ID, h.StateName)}
				}
			}
			var err error
			if id != 0 {
				tk, err = c.board.Claim(ctx, id, c.who.name, c.who.session)
			} else {
				var ok bool
				if tk, ok, err = c.board.ClaimNext(ctx, c.who.name, c.who.session); err == nil && !ok {
					return &claimRefused{fmt.Sprintf("task claim: no OPEN task that %s may claim", c.who.name)}
				}
			}
			if err != nil && c.db.Transient(err) {
				inDoubt = true
			}
			return err
		})
		var refused *claimRefused
		switch {
		case errors.As(err, &refused):
			return refused
		case err != nil:
			return taskErr("claim", err)
		}
		if tk, err = c.board.Get(ctx, tk.ID); err != nil {
			return taskErr("claim", err)
		}
		if opts.JSON {
			return opts.printJSON(c.object(tk))
		}
		return printTask(opts.IO.Out, c.object(tk))
	})
}

// taskReportOptions are the options of the verbs that report on the task
// the caller's agent holds: start, done, fail, block and split.
type taskReportOptions struct {
	*dbOptions
	Verb    string   // start, done, fail, block or split
	Summary string   // done: what was done
	Reason  string   // fail: why; block: what it waits for
	On      string   // block: the task it waits for, as given
	Titles  []string // split: one subtask each
}

// newTaskReportCmd is `swarmd task VERB` for a report verb; runF (nil:
// taskReportRun) runs it.
func newTaskReportCmd(o *dbOptions, verb string, runF func(context.Context, *taskReportOptions) error) *cobra.Command {
	opts := &taskReportOptions{dbOptions: o, Verb: verb}
	cmd := &cobra.Command{
		Use:  verb,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Titles = args
			return orRun(runF, taskReportRun)(cmd.Context(), opts)
		},
	}
	switch verb {
	case "start":
		cmd.Short = "Start work on the task you hold: CLAIMED to IN_PROGRESS"
		cmd.Example = "  swarmd task claim && swarmd task start"
	case "done":
		cmd.Use = "done [--summary TEXT]"
		cmd.Short = "Report the task you hold finished"
		cmd.Example = `  swarmd task done --summary "parser fixed, tests added in parser_test.go"`
		cmd.Flags().StringVar(&opts.Summary, "summary", "", "what was done, for the operator and the next agent")
	case "fail":
		cmd.Use = "fail --reason TEXT"
		cmd.Short = "Report the task you hold failed, and why"
		cmd.Example = `  swarmd task fail --reason "the API it needs was removed in v2"`
		cmd.Flags().StringVar(&opts.Reason, "reason", "", "why it failed (required)")
	case "block":
		cmd.Use = "block --on ID | --reason TEXT"
		cmd.Short = "Park the task you hold: until another task is CLOSED, or for a reason"
		cmd.Long = `Park the task you hold in BLOCKED and give it up. With --on ID it opens again by itself once that
task is CLOSED; with --reason it waits for the operator's 'swarmd task requeue'.`
		cmd.Example = `  swarmd task block --on 12
  swarmd task block --reason "needs a staging database password"`
		cmd.Flags().StringVar(&opts.On, "on", "", "the task to wait for")
		cmd.Flags().StringVar(&opts.Reason, "reason", "", "what it waits for")
		completeTasks(o, cmd, "on")
	case "split":
		cmd.Use = "split TITLE..."
		cmd.Short = "Split the task you hold into OPEN subtasks; it waits until they are done"
		cmd.Long = `Split the task you hold into subtasks, one per TITLE, OPEN for any agent at the task's priority.
You give the task up: it waits in WAITING_FOR_SUBTASKS and becomes DONE by itself when every subtask is.
Prints each subtask's id and title (--json: the subtasks).`
		cmd.Example = `  swarmd task split "Parse the header" "Parse the body" "Wire both into Load"`
		cmd.Args = cobra.MinimumNArgs(1)
	}
	return cmd
}

func taskReportRun(ctx context.Context, opts *taskReportOptions) error {
	var f func(context.Context, *taskCtx, int64) error
	var to task.State // where the verb moves the task
	switch opts.Verb {
	case "start":
		to = task.InProgress
		f = func(ctx context.Context, c *taskCtx, id int64) error {
			_, err := c.board.Start(ctx, id, c.holder())
			return err
		}
	case "done":
		if len(opts.Summary) > taskboard.MaxBodyBytes {
			return usagef("task done: --summary is %d bytes, over the %d-byte limit", len(opts.Summary), taskboard.MaxBodyBytes)
		}
		to = task.Done
		f = func(ctx context.Context, c *taskCtx, id int64) error {
			// The work is frozen here: the review and the merge take the
			// commit the session's worktree is at now.
			_, err := c.board.DoneAt(ctx, id, c.holder(), opts.Summary, doneHead(ctx, opts.IO.Getenv))
			return err
		}
	case "fail":
		if strings.TrimSpace(opts.Reason) == "" {
			return usagef("task fail: --reason TEXT is required: say why it failed")
		}
		if len(opts.Reason) > taskboard.MaxBodyBytes {
			return usagef("task fail: --reason is %d bytes, over the %d-byte limit", len(opts.Reason), taskboard.MaxBodyBytes)
		}
		to = task.Failed
		f = func(ctx context.Context, c *taskCtx, id int64) error {
			_, err := c.board.Fail(ctx, id, c.holder(), opts.Reason)
			return err
		}
	case "block":
		if (opts.On == "") == (strings.TrimSpace(opts.Reason) == "") {
			return usagef("task block: give exactly one of --on ID or --reason TEXT")
		}
		var dep int64
		if opts.On != "" {
			var err error
			if dep, err = parseTaskID("task block: --on", opts.On); err != nil {
				return err
			}
		}
		to = task.Blocked
		f = func(ctx context.Context, c *taskCtx, id int64) error {
			_, err := c.board.Block(ctx, id, c.holder(), dep, opts.Reason)
			return err
		}
	case "split":
		// It prints the subtasks, not the task's state.
		var kids []taskboard.Task
		err := heldVerb(ctx, opts.dbOptions, "split", task.WaitingForSubtasks, false, func(ctx context.Context, c *taskCtx, id int64) error {
			var err error
			kids, err = c.board.Split(ctx, id, c.holder(), opts.Titles)
			return err
		}, func(ctx context.Context, c *taskCtx, id int64) error {
			var err error
			kids, err = c.board.Subtasks(ctx, id) // an attempt's whose answer was lost
			return err
		})
		if err != nil {
			return err
		}
		if opts.JSON {
			return opts.printJSON(kids)
		}
		for _, k := range kids {
			fmt.Fprintf(opts.IO.Out, "%d\t%s\n", k.ID, printable(k.Title, false))
		}
		return nil
	default:
		return fmt.Errorf("task %s: not a report verb", opts.Verb)
	}
	return heldVerb(ctx, opts.dbOptions, opts.Verb, to, true, f, nil)
}

// doneHead is the commit a task done freezes: the daemon's reading
// (daemon.TaskHeadEnv), else the session's worktree's.
func doneHead(ctx context.Context, getenv func(string) string) string {
	switch h := getenv(daemon.TaskHeadEnv); h {
	case "":
		return worktreeHead(ctx, getenv("SWARM_WORKTREE"))
	case "-":
		return ""
	default:
		return h
	}
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

// heldVerb runs f on the task the caller's agent holds (CLAIMED or
// IN_PROGRESS), which moves it to to, then, when printState is set, prints
// the task's state. An attempt that failed while the store was away may
// have committed all the same (on PostgreSQL a connection can die between
// the server's commit and its answer): when the retry finds the task no
// longer held, or refuses the move, and the board shows the session's move
// made since the first attempt, the report is stored and the verb
// succeeded; stored (nil: nothing) then reads what the verb prints.
func heldVerb(ctx context.Context, o *dbOptions, verb string, to task.State, printState bool,
	f, stored func(context.Context, *taskCtx, int64) error) error {
	return withBoard(ctx, o, verb, sessionVerb, func(c *taskCtx) error {
		var tk taskboard.Task
		var ok bool
		since := time.Now() // the board's clock (taskboard.Options.Now), before any attempt
		var inDoubt int64   // the task an attempt may have moved unseen
		// A busy store delays the report; it never drops it (waitStore).
		err := waitStore(ctx, c.db, o.StoreWait, "task "+verb, func(ctx context.Context) error {
			var err error
			if tk, ok, err = c.board.Held(ctx, c.who.name); err != nil {
				return err
			}
			if ok {
				if err = f(ctx, c, tk.ID); err == nil {
					return nil
				}
				if c.db.Transient(err) {
					inDoubt = tk.ID
					return err
				}
			}
			if inDoubt == 0 {
				return err
			}
			// Only now, once an attempt failed unseen and the retry found
			// the task moved on: the usual report costs no read more.
			took, rerr := c.board.Reported(ctx, inDoubt, c.holder(), to, since)
			if rerr != nil || !took {
				return cmp.Or(rerr, err)
			}
			tk, ok = taskboard.Task{ID: inDoubt}, true
			if stored != nil {
				return stored(ctx, c, inDoubt)
			}
			return nil
		})
		if err != nil {
			return taskErr(verb, err)
		}
		if !ok {
			return fmt.Errorf("task %s: %s holds no task (CLAIMED or IN_PROGRESS): claim one with 'swarmd task claim'", verb, c.who.name)
		}
		if !printState {
			return nil
		}
		return report(ctx, o, c, verb, tk.ID)
	})
}

// taskArgs completes a task id argument from the board (only tasks in
// states, when given), each with its title.
func taskArgs(o *dbOptions, states ...task.State) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return taskCompletions(cmd.Context(), o, states), cobra.ShellCompDirectiveNoFileComp
	}
}

func completeTasks(o *dbOptions, cmd *cobra.Command, flag string) {
	completeFlag(o.IO, cmd, flag, func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return taskCompletions(cmd.Context(), o, nil), cobra.ShellCompDirectiveNoFileComp
	})
}

func taskCompletions(ctx context.Context, o *dbOptions, states []task.State) []cobra.Completion {
	if ctx == nil {
		ctx = context.Background()
	}
	db, err := o.open(ctx, "task")
	if err != nil {
		return nil
	}
	defer db.Close()
	board, err := daemon.OpenTaskBoard(ctx, db.DB, nil)
	if err != nil {
		return nil
	}
	var out []cobra.Completion
	for _, st := range states {
		ts, _ := board.List(ctx, taskboard.Filter{State: &st})
		out = appendTaskCompletions(out, ts)
	}
	if len(states) == 0 {
		ts, _ := board.List(ctx, taskboard.Filter{})
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
func completeAgents(o *dbOptions, cmd *cobra.Command, flag string) {
	completeFlag(o.IO, cmd, flag, func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return agentCompletions(o), cobra.ShellCompDirectiveNoFileComp
	})
}

// agentCompletions are the agents the config (or the session's
// SWARM_AGENTS) names.
func agentCompletions(o *dbOptions) []cobra.Completion {
	if names := o.IO.Getenv("SWARM_AGENTS"); names != "" {
		return strings.Split(names, ",")
	}
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		return nil
	}
	return cfg.AgentNames()
}
