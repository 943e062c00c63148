package view

import (
	"fmt"
	"strings"
)

// Need is one thing that needs a person, with the one command that deals
// with it: what `swarmd inbox` lists and the dashboards' inbox panel shows.
type Need struct {
	Kind  string `json:"kind"`
	Agent string `json:"agent,omitempty"`
	Task  int64  `json:"task,omitempty"`
	What  string `json:"what"`
	Fix   string `json:"fix"`
}

// The kinds of Need, in the order Needs lists them.
const (
	NeedNotRunning      = "not_running"
	NeedAgentStopped    = "agent_stopped"
	NeedBudgetExhausted = "budget_exhausted"
	NeedTaskFailed      = "task_failed"
	NeedTaskPlanned     = "task_planned"
	NeedTaskBlocked     = "task_blocked"
	// NeedTaskAssigneeUnknown: a task waits for an assignee the swarm has
	// no agent of that name for (removed from the config, or renamed).
	NeedTaskAssigneeUnknown = "task_assignee_unknown"
	// NeedTaskWorkerUnknown: a parent waiting for its subtasks whose
	// review's rework goes to a worker the swarm has no agent of that
	// name for.
	NeedTaskWorkerUnknown = "task_worker_unknown"
	// NeedTaskReviewerUnknown: a DONE task waits for the verdict of a
	// reviewer the swarm has no agent of that name for.
	NeedTaskReviewerUnknown = "task_reviewer_unknown"
	NeedMail                = "mail"
)

// NeedState is what the inbox is made of, read from the store by whoever
// shows it (the CLI, the daemon's dashboards).
type NeedState struct {
	// Running: a daemon runs the swarm (always true on a shared store).
	Running bool
	Agents  []NeedAgent // in the order they are listed
	// Tasks: the PLANNED, FAILED and BLOCKED ones, and the OPEN and
	// WAITING_FOR_SUBTASKS ones whose assignee or rework's worker is
	// unknown, by id.
	Tasks []NeedTask
	// OperatorMail counts the unread messages to the operator.
	OperatorMail int
}

// NeedAgent is what the inbox knows of an agent.
type NeedAgent struct {
	Name string
	// StoppedForGood: stopped by its error thresholds or a fatal error
	// (not by an operator), and stays stopped across restarts.
	StoppedForGood bool
	StopReason     string
	// BudgetExhausted: paused because its budget is spent.
	BudgetExhausted bool
}

// NeedTask is what the inbox knows of a task.
type NeedTask struct {
	ID            int64
	State         string // the task machine's state name
	Title         string
	Result        string // the FAIL reason
	BlockedReason string
	Assignee      string
	// AssigneeUnknown: the swarm has no agent named Assignee, so no agent
	// may claim the task: that comes first.
	AssigneeUnknown bool
	// Worker is the review loop's worker, whom a FAIL sends the rework
	// of a parent waiting for its subtasks; WorkerUnknown: the swarm has
	// no agent of that name (taskboard.WorkerUnknown).
	Worker        string
	WorkerUnknown bool
	// ReviewerUnknown: the task waits for the verdict of Reviewer, which
	// the swarm has no agent of that name for (taskboard.ReviewerUnknown).
	Reviewer        string
	ReviewerUnknown bool
}

// Needs lists what needs a person, in a fixed order: the swarm, agents,
// tasks, mail. It is pure: the caller reads the state.
func Needs(st NeedState) []Need {
	var out []Need
	if !st.Running {
		out = append(out, Need{Kind: NeedNotRunning, What: "no swarmd runs on this state dir: nothing happens", Fix: "swarmd run"})
	}
	for _, a := range st.Agents {
		if a.StoppedForGood {
			out = append(out, Need{Kind: NeedAgentStopped, Agent: a.Name,
				What: fmt.Sprintf("agent %s stopped for good: %s", a.Name, oneLine(a.StopReason, 100)), Fix: "swarmd start " + a.Name})
		}
		if a.BudgetExhausted {
			out = append(out, Need{Kind: NeedBudgetExhausted, Agent: a.Name,
				What: fmt.Sprintf("agent %s is paused: its budget is spent", a.Name), Fix: "swarmd budget set " + a.Name + " USD"})
		}
	}
	for _, t := range st.Tasks {
		n := Need{Task: t.ID}
		switch {
		case t.AssigneeUnknown:
			n.Kind, n.What, n.Fix = NeedTaskAssigneeUnknown, fmt.Sprintf("task #%d is %s for %s, which is not an agent of the swarm: %s",
				t.ID, t.State, t.Assignee, oneLine(t.Title, 100)), fmt.Sprintf("swarmd task assign %d AGENT", t.ID)
		case t.WorkerUnknown:
			n.Kind, n.What, n.Fix = NeedTaskWorkerUnknown, fmt.Sprintf("task #%d is %s, its review's rework for %s, which is not an agent of the swarm: %s",
				t.ID, t.State, t.Worker, oneLine(t.Title, 100)), fmt.Sprintf("swarmd task assign %d AGENT", t.ID)
		case t.ReviewerUnknown:
			n.Kind, n.What, n.Fix = NeedTaskReviewerUnknown, fmt.Sprintf("task #%d is %s, waiting for the review of %s, which is not an agent of the swarm: %s",
				t.ID, t.State, t.Reviewer, oneLine(t.Title, 100)), fmt.Sprintf("swarmd task assign %d --reviewer AGENT", t.ID)
		case t.State == "FAILED":
			n.Kind, n.What, n.Fix = NeedTaskFailed, fmt.Sprintf("task #%d failed: %s", t.ID, oneLine(t.Result, 100)), fmt.Sprintf("swarmd task retry %d", t.ID)
		case t.State == "PLANNED":
			n.Kind, n.What, n.Fix = NeedTaskPlanned, fmt.Sprintf("task #%d waits for approval: %s", t.ID, oneLine(t.Title, 100)), fmt.Sprintf("swarmd task approve %d", t.ID)
		case t.State == "BLOCKED":
			n.Kind, n.What, n.Fix = NeedTaskBlocked, fmt.Sprintf("task #%d is blocked: %s", t.ID, oneLine(t.BlockedReason, 100)), fmt.Sprintf("swarmd task show %d", t.ID)
		default:
			continue
		}
		out = append(out, n)
	}
	if st.OperatorMail > 0 {
		out = append(out, Need{Kind: NeedMail, What: fmt.Sprintf("%d unread messages to the operator", st.OperatorMail), Fix: "swarmd mail inbox"})
	}
	return out
}

// oneLine is s on one line, cut to n runes.
// TerminalControl reports whether a terminal acts on r rather than show
// it: the C0 controls but newline and tab, DEL, the C1 controls, and the
// bidirectional overrides, which show text in another order than it
// reads. Agents' text is shown without them (the CLI, swarmd top).
func TerminalControl(r rune) bool {
	return r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || (r >= 0x80 && r < 0xa0) ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "(no reason given)"
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
