package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestPauseSurvivesReopen: a pause is durable once SetPause returns, keeps
// its first Since and its freeze when paused again, and ClearPause removes
// it; both record their event.
func TestPauseSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	t0 := t0.Truncate(time.Microsecond) // stored with microseconds
	path := t.TempDir() + "/swarm.db"
	db := openTest(t, path, Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	j.Event(ev("alice", 1, "SessionStarted")) // queued before the pause: its event must come first
	p := PauseRecord{Agent: "alice", Actor: "operator", Reason: "lunch", Freeze: true, Since: t0}
	pe := EventRecord{At: t0, Agent: "alice", From: "Running", Event: EventPaused, To: "Running", Actor: "operator", Reason: "lunch"}
	if err := j.SetPause(ctx, p, pe); err != nil {
		t.Fatal(err)
	}
	again := PauseRecord{Agent: "alice", Actor: "agent:bob", Reason: "wait for me", Since: t0.Add(time.Hour)}
	if err := j.SetPause(ctx, again, pe); err != nil {
		t.Fatal(err)
	}
	if err := db.SetPause(ctx, PauseRecord{Agent: "Bad Name", Since: t0}, pe); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("SetPause(bad name) = %v", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = openTest(t, path, Options{})
	ps, err := db.Pauses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := PauseRecord{Agent: "alice", Actor: "agent:bob", Reason: "wait for me", Freeze: true, Since: t0}
	if len(ps) != 1 || ps["alice"] != want {
		t.Fatalf("Pauses = %+v, want %+v", ps, want)
	}
	re := EventRecord{At: t0.Add(2 * time.Hour), Agent: "alice", From: "BuildingPrompt", Event: EventResumed, To: "BuildingPrompt", Actor: "operator"}
	got, ok, err := db.ClearPause(ctx, "alice", re)
	if err != nil || !ok || got != want {
		t.Fatalf("ClearPause = %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := db.ClearPause(ctx, "alice", re); ok || err != nil {
		t.Fatalf("second ClearPause = %v, %v; want no pause", ok, err)
	}
	if ps, _ := db.Pauses(ctx); len(ps) != 0 {
		t.Fatalf("Pauses after ClearPause = %+v", ps)
	}
	evs, err := db.Events(ctx, EventQuery{Agent: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range evs {
		names = append(names, e.Event)
	}
	if got := strings.Join(names, ","); got != "SessionStarted,Paused,Paused,Resumed" {
		t.Fatalf("events %s", got)
	}
}

// TestToolCallsThroughJournal: tool calls are written by the journal's
// batches and read back by agent, session and tool, newest last; an
// unfinished call keeps no duration.
func TestToolCallsThroughJournal(t *testing.T) {
	ctx := context.Background()
	t0 := t0.Truncate(time.Microsecond) // stored with microseconds
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never, MaxBatch: 3})
	calls := []ToolCallRecord{
		{SessionID: "alice-1-a", Agent: "alice", Seq: 1, CallID: "t1", Tool: "Bash", Input: "make test", Started: t0, Ended: true, Duration: 1500 * time.Millisecond, Status: ToolOK},
		{SessionID: "alice-1-a", Agent: "alice", Seq: 1, CallID: "t2", Tool: "Edit", Input: "main.go", Started: t0.Add(time.Second), Ended: true, Duration: 20 * time.Millisecond, Status: ToolError},
		{SessionID: "bob-1-b", Agent: "bob", Seq: 1, Tool: "Bash", Input: "ls", Started: t0, Ended: true, Status: ToolOK},
		{SessionID: "alice-1-a", Agent: "alice", Seq: 1, CallID: "t3", Tool: "Bash", Input: "sleep 300", Started: t0.Add(2 * time.Second), Status: ToolUnfinished},
	}
	for _, c := range calls {
		j.ToolCall(c)
	}
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	all, err := db.ToolCalls(ctx, ToolCallQuery{})
	if err != nil || len(all) != 4 {
		t.Fatalf("ToolCalls = %d, %v", len(all), err)
	}
	for i, c := range all {
		c.ID = 0
		if c != calls[i] {
			t.Errorf("call %d = %+v, want %+v", i, c, calls[i])
		}
	}
	for _, tc := range []struct {
		q    ToolCallQuery
		want []string
	}{
		{ToolCallQuery{Agent: "alice"}, []string{"make test", "main.go", "sleep 300"}},
		{ToolCallQuery{Agent: "alice", Tool: "Bash"}, []string{"make test", "sleep 300"}},
		{ToolCallQuery{SessionID: "bob-1-b"}, []string{"ls"}},
		{ToolCallQuery{Last: 2}, []string{"ls", "sleep 300"}},
		{ToolCallQuery{AfterID: all[1].ID}, []string{"ls", "sleep 300"}},
	} {
		got, err := db.ToolCalls(ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		var inputs []string
		for _, c := range got {
			inputs = append(inputs, c.Input)
		}
		if strings.Join(inputs, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%+v: %q, want %q", tc.q, inputs, tc.want)
		}
	}
}

// BenchmarkJournalToolCall is the audit's cost per tool call on a session's
// output goroutine: one enqueue (SQLite is the writer's, off that path).
func BenchmarkJournalToolCall(b *testing.B) {
	db := openTest(b, "", Options{})
	j := db.NewJournal(JournalOptions{})
	defer j.Close()
	c := ToolCallRecord{SessionID: "alice-1-a", Agent: "alice", Seq: 1, CallID: "toolu_1", Tool: "Bash",
		Input: "go test ./...", Started: t0, Ended: true, Duration: time.Second, Status: ToolOK}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		j.ToolCall(c)
		if i++; i%100 == 0 {
			j.discardQueued()
		}
	}
}
