package view

import (
	"slices"
	"strings"
	"testing"
)

func TestNeedsListsWhatNeedsAPersonInOrder(t *testing.T) {
	st := NeedState{
		Running: false,
		Agents: []NeedAgent{
			{Name: "alice"},
			{Name: "bob", StoppedForGood: true, StopReason: "5 consecutive errors\n(max_consecutive_errors)"},
			{Name: "carol", BudgetExhausted: true},
		},
		Tasks: []NeedTask{
			{ID: 2, State: "FAILED", Result: strings.Repeat("x", 300)},
			{ID: 3, State: "PLANNED", Title: "split the parser"},
			{ID: 4, State: "BLOCKED"},
			{ID: 5, State: "OPEN", Title: "not the operator's"},
		},
		OperatorMail: 2,
	}
	got := Needs(st)
	want := []Need{
		{Kind: NeedNotRunning, What: "no swarmd runs on this state dir: nothing happens", Fix: "swarmd run"},
		{Kind: NeedAgentStopped, Agent: "bob", What: "agent bob stopped for good: 5 consecutive errors (max_consecutive_errors)", Fix: "swarmd start bob"},
		{Kind: NeedBudgetExhausted, Agent: "carol", What: "agent carol is paused: its budget is spent", Fix: "swarmd budget set carol USD"},
		{Kind: NeedTaskFailed, Task: 2, What: "task #2 failed: " + strings.Repeat("x", 99) + "…", Fix: "swarmd task retry 2"},
		{Kind: NeedTaskPlanned, Task: 3, What: "task #3 waits for approval: split the parser", Fix: "swarmd task approve 3"},
		{Kind: NeedTaskBlocked, Task: 4, What: "task #4 is blocked: (no reason given)", Fix: "swarmd task show 4"},
		{Kind: NeedMail, What: "2 unread messages to the operator", Fix: "swarmd mail inbox"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d needs %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("need %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if got := Needs(NeedState{Running: true, Agents: []NeedAgent{{Name: "alice"}}}); len(got) != 0 {
		t.Errorf("a healthy swarm needs %+v, want nothing", got)
	}
}

// A task waiting for an assignee the swarm does not have is listed for its
// assign, whatever its state, before what its state would ask; so is a
// parent whose review's rework goes to a worker the swarm does not have,
// once (its assignee's need first when both are unknown).
func TestNeedsListsATaskWaitingForAnUnknownAssignee(t *testing.T) {
	got := Needs(NeedState{Running: true, Tasks: []NeedTask{
		{ID: 6, State: "OPEN", Title: "rework", Assignee: "dave", AssigneeUnknown: true},
		{ID: 7, State: "FAILED", Title: "fix the gate", Result: "red gate", Assignee: "dave", AssigneeUnknown: true},
		{ID: 8, State: "OPEN", Title: "for alice", Assignee: "alice"},
		{ID: 9, State: "WAITING_FOR_SUBTASKS", Title: "the feature", Worker: "dave", WorkerUnknown: true},
		{ID: 10, State: "WAITING_FOR_SUBTASKS", Title: "dave's", Assignee: "dave", AssigneeUnknown: true, Worker: "dave", WorkerUnknown: true},
	}})
	want := []Need{
		{Kind: NeedTaskAssigneeUnknown, Task: 6, What: "task #6 is OPEN for dave, which is not an agent of the swarm: rework", Fix: "swarmd task assign 6 AGENT"},
		{Kind: NeedTaskAssigneeUnknown, Task: 7, What: "task #7 is FAILED for dave, which is not an agent of the swarm: fix the gate", Fix: "swarmd task assign 7 AGENT"},
		{Kind: NeedTaskWorkerUnknown, Task: 9, What: "task #9 is WAITING_FOR_SUBTASKS, its review's rework for dave, which is not an agent of the swarm: the feature",
			Fix: "swarmd task assign 9 AGENT"},
		{Kind: NeedTaskAssigneeUnknown, Task: 10, What: "task #10 is WAITING_FOR_SUBTASKS for dave, which is not an agent of the swarm: dave's",
			Fix: "swarmd task assign 10 AGENT"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Needs = %+v, want %+v", got, want)
	}
}
