package view

import (
	"testing"
	"time"
)

// The events of a real run (`swarmd events --json` of the demo): two
// agents' sessions interleaved with a task's transitions.
func feedEvents() []Event {
	t0 := time.Date(2026, 11, 28, 1, 12, 11, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	return []Event{
		{ID: 1, At: at(124), Agent: "alice", From: "Initializing", Event: "WorktreeReady", To: "BuildingPrompt", Reason: "/w/alice"},
		{ID: 3, At: at(125), Agent: "alice", From: "BuildingPrompt", Event: "PromptReady", To: "Spawning", SessionID: "alice-1-191d1dd41dd2"},
		{ID: 4, At: at(126), Agent: "carol", From: "BuildingPrompt", Event: "PromptReady", To: "Spawning", SessionID: "carol-1-f0c6f02ff7fa", Seq: 1},
		{ID: 7, At: at(134), Agent: "carol", From: "Spawning", Event: "SessionStarted", To: "Running", SessionID: "carol-1-f0c6f02ff7fa", Seq: 1},
		{ID: 8, At: at(139), Agent: "alice", From: "Spawning", Event: "SessionStarted", To: "Running", SessionID: "alice-1-191d1dd41dd2"},
		{ID: 10, At: at(282), To: "OPEN", Effect: "task", Actor: "operator", TaskID: 1},
		{ID: 11, At: at(288), Agent: "alice", From: "OPEN", To: "CLAIMED", Effect: "task", SessionID: "alice-2-d41a50d1b554", TaskID: 1},
		{ID: 12, At: at(1271), Agent: "carol", From: "Running", Event: "SessionExited", To: "SessionComplete", Reason: "exit status 0", SessionID: "carol-1-f0c6f02ff7fa", Seq: 1},
		{ID: 13, At: at(1271), Agent: "carol", From: "SessionComplete", Event: "WorktreeReady", To: "BuildingPrompt"},
		{ID: 14, At: at(1273), Agent: "alice", From: "Running", Event: "SessionExited", To: "SessionComplete", Reason: "exit status 3", SessionID: "alice-1-191d1dd41dd2"},
		{ID: 15, At: at(1273), Agent: "alice", From: "SessionComplete", Event: "WorktreeReady", To: "CoolingDown"},
		{ID: 16, At: at(1273), Agent: "carol", From: "BuildingPrompt", Event: "Idle", To: "BuildingPrompt"},
		{ID: 17, At: at(1290), Agent: "alice", From: "CoolingDown", Event: "BackoffElapsed", To: "BuildingPrompt"},
		{ID: 18, At: at(1290), Agent: "alice", From: "BuildingPrompt", Event: "PromptReady", To: "Spawning", SessionID: "alice-2-d41a50d1b554", Seq: 2},
		{ID: 19, At: at(1300), Agent: "carol", From: "BuildingPrompt", Event: "OperatorStop", To: "Stopped", Actor: "operator"},
		{ID: 20, At: at(1310), Agent: "carol", From: "Stopped", Event: "Awake", To: "Stopped"},
	}
}

func TestFeedCollapsesASessionIntoOneLine(t *testing.T) {
	lines := Feed(feedEvents())
	type line struct {
		text   string
		events int
	}
	var got []line
	for _, l := range lines {
		got = append(got, line{l.Text, len(l.Events)})
	}
	want := []line{
		{"alice Initializing→BuildingPrompt (WorktreeReady)", 1},
		// The session's id names its seq when the event carries none.
		{"alice #1: exit status 3 → BuildingPrompt (1.1s)", 5},
		{"carol #1: exit status 0 → Stopped (1.1s)", 6},
		{"task #1 OPEN", 1},
		{"task #1 OPEN→CLAIMED alice", 1},
		{"alice #2: Spawning", 1},
		// Stopped closes the session's line: what follows is its own.
		{"carol Stopped (Awake)", 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	// Every event is in exactly one line.
	n := 0
	for _, l := range lines {
		n += len(l.Events)
	}
	if n != len(feedEvents()) {
		t.Errorf("lines hold %d events, want %d", n, len(feedEvents()))
	}
}

func TestFeedShowsAnIdleAgentAsIdle(t *testing.T) {
	evs := feedEvents()[:14] // up to alice's second session, before carol's stop
	var got string
	for _, l := range Feed(evs) {
		if l.Agent == "carol" && l.Session != "" {
			got = l.Text
		}
	}
	if want := "carol #1: exit status 0 → idle (1.1s)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestEventLine: a task's move shows its abort reason, when an abnormal
// end of its agent's session caused it; an agent's its event.
func TestEventLine(t *testing.T) {
	for _, c := range []struct {
		e    Event
		want string
	}{
		{Event{TaskID: 4, From: "CLAIMED", To: "IN_PROGRESS", Agent: "alice"}, "task #4 CLAIMED→IN_PROGRESS alice"},
		{Event{TaskID: 4, From: "IN_PROGRESS", To: "ORPHANED", Agent: "alice", AbortReason: "timeout"}, "task #4 IN_PROGRESS→ORPHANED [timeout] alice"},
		{Event{Agent: "alice", From: "Spawning", To: "Running", Event: "SessionStarted"}, "alice Spawning→Running (SessionStarted)"},
	} {
		if got := EventLine(c.e); got != c.want {
			t.Errorf("EventLine(%+v) = %q, want %q", c.e, got, c.want)
		}
	}
}
