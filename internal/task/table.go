package task

// Row is one allowed transition of seed 004's exhaustive table, with the
// seed's trigger text.
type Row struct {
	From, To State
	Trigger  string
}

// NumTransitions is the number of rows of the seed's table.
const NumTransitions = 30

// rows is seed 004's "Task Transition Table (exhaustive)", in seed order.
// Every guard there is _always, so a row is all it takes.
var rows = [NumTransitions]Row{
	{Planned, Open, "Human approves the planned task"},
	{Planned, Cancelled, "Human rejects the planned task"},
	{Open, Claimed, "Agent claims the task"},
	{Open, WaitingForSubtasks, "Task decomposed before agent assignment"},
	{Open, Cancelled, "Manual cancellation"},
	{Claimed, InProgress, "Agent begins execution"},
	{Claimed, Open, "Unclaim / force-reassign to different agent"},
	{Claimed, Done, "Fast completion (task was trivial)"},
	{Claimed, Failed, "Immediate failure (e.g., scope violation)"},
	{Claimed, Cancelled, "Manual cancellation"},
	{Claimed, WaitingForSubtasks, "Agent splits task into subtasks"},
	{Claimed, Blocked, "Dependency discovered after claim"},
	{InProgress, Done, "Agent reports successful completion"},
	{InProgress, Failed, "Agent reports failure"},
	{InProgress, Blocked, "External dependency blocks progress"},
	{InProgress, WaitingForSubtasks, "Agent decomposes task mid-execution"},
	{InProgress, Open, "Force-requeue for different agent"},
	{InProgress, Cancelled, "Manual cancellation"},
	{InProgress, Orphaned, "Heartbeat timeout / agent crash detected"},
	{Orphaned, Done, "Partial work saved and merged"},
	{Orphaned, Failed, "Crash recovery failed"},
	{Orphaned, Open, "Requeued for retry by another agent"},
	{Blocked, Open, "Blocking dependency resolved"},
	{Blocked, Cancelled, "Manual cancellation"},
	{WaitingForSubtasks, Done, "All child subtasks completed"},
	{WaitingForSubtasks, Blocked, "Subtask timeout escalation"},
	{WaitingForSubtasks, Cancelled, "Manual cancellation"},
	{Failed, Open, "Retry (respects max_retries, default 3)"},
	{Done, Closed, "Janitor verification passed + branch merged"},
	{Done, Failed, "Janitor verification rejected the result"},
}

// allowed[from] has bit `to` set for every row: one load and a shift per
// lookup, so Transition stays allocation-free.
var allowed = func() (m [NumStates]uint16) {
	for _, r := range rows {
		m[r.From] |= 1 << r.To
	}
	return m
}()

// Transitions returns seed 004's table, in seed order. It is a copy.
func Transitions() [NumTransitions]Row { return rows }

// CanTransition reports whether the table allows from → to.
func CanTransition(from, to State) bool {
	return from.Valid() && to.Valid() && allowed[from]&(1<<to) != 0
}
