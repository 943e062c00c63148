package view

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestHubMergeQueueLive: the queue's depth, running gate and last results
// are part of the model; a change to any of them alone is published.
func TestHubMergeQueueLive(t *testing.T) {
	src := newFakeSource(running("alice", time.Now()))
	q0 := MergeQueue{Configured: true, Depth: 1, GateRunning: true, GateSeq: 3, Recent: []MergeResult{},
		Items: []MergeItem{{TaskID: 1, Title: "fix it", Agent: "alice", State: "testing"}}}
	src.setMerge(q0)
	h := startHub(t, src, Options{})
	sub, err := h.Subscribe(context.Background(), NoResume, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if q := sub.Snapshot.Merge; q.Depth != 1 || !q.GateRunning || q.GateSeq != 3 || len(q.Items) != 1 {
		t.Fatalf("snapshot's queue %+v", q)
	}
	// The gate passed and the task merged: only Depth, GateRunning and
	// Recent change (Items empties too); then only a result is added.
	merged := MergeQueue{Configured: true, Items: []MergeItem{}, Recent: []MergeResult{{TaskID: 1, Title: "fix it", Agent: "alice",
		Result: "merged", Commit: "abc"}}}
	src.setMerge(merged)
	src.emit(Event{Agent: "merge", From: "testing", To: "merged", TaskID: 1})
	h.Notify()
	if q := nextOf(t, sub, KindMerge).Merge; q.Depth != 0 || q.GateRunning || len(q.Recent) != 1 || q.Recent[0].Commit != "abc" {
		t.Fatalf("after the merge %+v", q)
	}
	merged.Recent = append([]MergeResult{{TaskID: 2, Result: "gate_failed"}}, merged.Recent...)
	src.setMerge(merged)
	src.emit(Event{Agent: "merge", From: "testing", To: "rejected", TaskID: 2})
	h.Notify()
	if q := nextOf(t, sub, KindMerge).Merge; len(q.Recent) != 2 || q.Recent[0].Result != "gate_failed" {
		t.Fatalf("after a rejection %+v", q)
	}
}

func TestEqualMergeSeesEveryField(t *testing.T) {
	base := MergeQueue{Configured: true, Items: []MergeItem{}, Recent: []MergeResult{{TaskID: 1, Result: "merged"}}}
	for name, change := range map[string]func(*MergeQueue){
		"depth":   func(q *MergeQueue) { q.Depth = 1 },
		"gate":    func(q *MergeQueue) { q.GateRunning = true },
		"seq":     func(q *MergeQueue) { q.GateSeq = 2 },
		"ahead":   func(q *MergeQueue) { q.AheadSeq = 3 },
		"result":  func(q *MergeQueue) { q.Recent = []MergeResult{{TaskID: 1, Result: "conflict"}} },
		"results": func(q *MergeQueue) { q.Recent = nil },
	} {
		q := base
		change(&q)
		if equalMerge(base, q) {
			t.Errorf("a change of %s is not seen", name)
		}
	}
	if !equalMerge(base, base) {
		t.Error("a queue differs from itself")
	}
}

// TestShownState: an idle agent (waiting in BuildingPrompt for mail or a
// task) is shown idle; every other keeps its state.
func TestShownState(t *testing.T) {
	for _, c := range []struct {
		a    Agent
		want string
	}{
		{Agent{State: "BuildingPrompt", Visual: Idle, Health: "idle"}, "idle"},
		{Agent{State: "BuildingPrompt", Visual: Spawning}, "BuildingPrompt"},
		{Agent{State: "BuildingPrompt", Visual: Paused, Health: "paused by operator"}, "BuildingPrompt"},
		{Agent{State: "Running", Visual: Stalled, Health: "stalled"}, "Running"},
		{Agent{State: "CoolingDown", Visual: Idle}, "CoolingDown"},
	} {
		if got := c.a.ShownState(); got != c.want {
			t.Errorf("%+v: shown %q, want %q", c.a, got, c.want)
		}
	}
}

// TestTaskViewOverTheSocket: the control socket serves a task's view to
// Client.Task; an unknown task is ErrNotFound, a bad id ErrInvalid, a
// daemon without task views ErrUnsupported.
func TestTaskViewOverTheSocket(t *testing.T) {
	svc := &Service{Task: func(_ context.Context, id int64) (TaskView, error) {
		if id != 7 {
			return TaskView{}, fmt.Errorf("%w: no task %d", ErrNotFound, id)
		}
		return TaskView{Task: Task{ID: 7, Title: "t", State: "DONE"}, Head: "abc",
			Timeline: []TaskEvent{{ID: 3, From: "IN_PROGRESS", To: "DONE", Actor: "agent:alice"}}, Verdicts: []Verdict{},
			Merge: &TaskMerge{State: "testing", Head: "abc", GateSeq: 2, GateLog: "$ make test"}}, nil
	}}
	srv := httptest.NewServer(svc.SocketHandler())
	defer srv.Close()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}}
	defer tr.CloseIdleConnections()
	cl := &Client{HTTP: &http.Client{Transport: tr}}
	ctx := context.Background()
	tv, err := cl.Task(ctx, 7)
	if err != nil || tv.Task.ID != 7 || len(tv.Timeline) != 1 || tv.Timeline[0].To != "DONE" || tv.Merge == nil || tv.Merge.GateLog != "$ make test" {
		t.Fatalf("task 7: %+v, %v", tv, err)
	}
	if _, err := cl.Task(ctx, 8); !errors.Is(err, ErrNotFound) {
		t.Fatalf("task 8: %v, want ErrNotFound", err)
	}
	if _, err := svc.TaskView(ctx, "seven"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("task seven: %v, want ErrInvalid", err)
	}
	if _, err := (&Service{}).TaskView(ctx, "7"); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("no task views: %v, want ErrUnsupported", err)
	}
}
