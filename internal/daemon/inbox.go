package daemon

import (
	"context"
	"sort"
	"strings"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
	"github.com/swarmd/swarmd/internal/view"
)

// ReadNeeds reads what the inbox is made of (view.Needs) from the store:
// the agents in names (every agent recorded when names is nil), their stop
// and pause records, the tasks that wait for a person, the operator's
// unread mail. A task whose assignee is not in swarm (the swarm's agents,
// SwarmAgents; nil: not checked) waits for a person too, and so does a
// parent waiting for its subtasks whose rework's worker is not
// (taskboard.WorkerUnknown), and a DONE task whose reviewer is not
// (taskboard.ReviewerUnknown). Running is left for the caller, who knows
// whether a daemon runs.
func ReadNeeds(ctx context.Context, db *store.DB, board *taskboard.Board, mb *mailbox.Mailbox, names, swarm []string) (view.NeedState, error) {
	var st view.NeedState
	agents, err := db.Agents(ctx)
	if err != nil {
		return st, err
	}
	if names == nil {
		for n := range agents {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	pauses, err := db.Pauses(ctx)
	if err != nil {
		return st, err
	}
	for _, n := range names {
		a := agents[n]
		st.Agents = append(st.Agents, view.NeedAgent{Name: n, StoppedForGood: a.StopKind == store.StopFatal, StopReason: a.StopReason,
			BudgetExhausted: strings.HasPrefix(pauses[n].Reason, "budget_exhausted")})
	}
	for _, state := range []task.State{task.Failed, task.Planned, task.Blocked, task.Open, task.WaitingForSubtasks} {
		// OPEN: only those assigned, through their index, for an assignee
		// the swarm does not have. WAITING_FOR_SUBTASKS: only those whose
		// assignee, or whose rework's worker, it does not have.
		ts, err := board.List(ctx, taskboard.Filter{State: &state, Assigned: state == task.Open})
		if err != nil {
			return st, err
		}
		for _, t := range ts {
			unknown, workerUnknown := taskboard.AssigneeUnknown(t, swarm), taskboard.WorkerUnknown(t, swarm)
			if (state == task.Open || state == task.WaitingForSubtasks) && !unknown && !workerUnknown {
				continue
			}
			st.Tasks = append(st.Tasks, view.NeedTask{ID: t.ID, State: t.StateName, Title: t.Title, Result: t.Result, BlockedReason: t.BlockedReason,
				Assignee: t.Assignee, AssigneeUnknown: unknown, Worker: t.Worker, WorkerUnknown: workerUnknown})
		}
	}
	// DONE: only those waiting for the verdict of a reviewer the swarm
	// does not have.
	var reviewing []taskboard.Task
	if swarm != nil {
		if reviewing, err = board.Reviewing(ctx); err != nil {
			return st, err
		}
	}
	for _, t := range reviewing {
		if taskboard.ReviewerUnknown(t, swarm) {
			st.Tasks = append(st.Tasks, view.NeedTask{ID: t.ID, State: t.StateName, Title: t.Title,
				Reviewer: t.Reviewer, ReviewerUnknown: true})
		}
	}
	sort.Slice(st.Tasks, func(i, j int) bool { return st.Tasks[i].ID < st.Tasks[j].ID })
	pending, err := mb.PendingCounts(ctx)
	if err != nil {
		return st, err
	}
	st.OperatorMail = pending[mailbox.Operator]
	return st, nil
}

// Inbox is what needs a person now, for the dashboards' inbox panel.
func (s viewSource) Inbox(ctx context.Context) ([]view.Need, error) {
	s.d.readOwnWrites(ctx)
	cfg, _ := s.d.current()
	swarm, err := SwarmAgents(ctx, s.d.db, cfg)
	if err != nil {
		return nil, err
	}
	st, err := ReadNeeds(ctx, s.d.db, s.d.tasks, s.d.mail, cfg.AgentNames(), swarm)
	if err != nil {
		return nil, err
	}
	st.Running = true
	return view.Needs(st), nil
}
