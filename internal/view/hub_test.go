package view

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/agent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource is a daemon in memory: events appended like the journal
// commits them, agents and tasks set by the test. It counts the reads the
// Hub makes.
type fakeSource struct {
	mu      sync.Mutex
	events  []Event
	agents  []AgentState
	tasks   []Task
	spend   map[string]Spend
	fault   string
	th      Thresholds
	reads   map[string]int
	merge   *MergeQueue // nil: NotConfigured
	inbox   []Need
	daemons []Daemon
}

func newFakeSource(agents ...AgentState) *fakeSource {
	return &fakeSource{agents: agents, spend: map[string]Spend{}, reads: map[string]int{},
		th: Thresholds{StallAfter: 5 * time.Minute}}
}

func (f *fakeSource) count(what string) {
	f.mu.Lock()
	f.reads[what]++
	f.mu.Unlock()
}

func (f *fakeSource) readCount(what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[what]
}

func (f *fakeSource) Agents() []AgentState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]AgentState(nil), f.agents...)
}

func (f *fakeSource) setAgent(a AgentState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.agents {
		if f.agents[i].Name == a.Name {
			f.agents[i] = a
			return
		}
	}
	f.agents = append(f.agents, a)
}

func (f *fakeSource) removeAgent(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.agents {
		if f.agents[i].Name == name {
			f.agents = append(f.agents[:i], f.agents[i+1:]...)
			return
		}
	}
}

// emit appends events with the next ids and returns the last id.
func (f *fakeSource) emit(evs ...Event) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range evs {
		e.ID = int64(len(f.events) + 1)
		f.events = append(f.events, e)
	}
	return int64(len(f.events))
}

func (f *fakeSource) Events(_ context.Context, after int64, limit int) ([]Event, error) {
	f.count("events")
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Event
	for _, e := range f.events {
		if e.ID > after && (limit <= 0 || len(out) < limit) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (f *fakeSource) LastEventID(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.events)), nil
}

func (f *fakeSource) Tasks(context.Context) (TaskList, error) {
	f.count("tasks")
	f.mu.Lock()
	defer f.mu.Unlock()
	return TaskList{Tasks: append([]Task(nil), f.tasks...)}, nil
}

func (f *fakeSource) setTasks(ts ...Task) {
	f.mu.Lock()
	f.tasks = ts
	f.mu.Unlock()
}

func (f *fakeSource) Spend(context.Context) (map[string]Spend, error) {
	f.count("spend")
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]Spend{}
	for k, v := range f.spend {
		out[k] = v
	}
	return out, nil
}

func (f *fakeSource) Merge(context.Context) (MergeQueue, error) {
	f.count("merge")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.merge != nil {
		return *f.merge, nil
	}
	return NotConfigured, nil
}

func (f *fakeSource) setMerge(q MergeQueue) {
	f.mu.Lock()
	f.merge = &q
	f.mu.Unlock()
}

func (f *fakeSource) Inbox(context.Context) ([]Need, error) {
	f.count("inbox")
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Need(nil), f.inbox...), nil
}

// Daemons counts each daemon's lease live until its LiveUntil, as the
// store does, expired after.
func (f *fakeSource) Daemons(context.Context) ([]Daemon, error) {
	f.count("daemons")
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Daemon, 0, len(f.daemons))
	for _, d := range f.daemons {
		if d.LiveUntil != nil && !time.Now().Before(*d.LiveUntil) {
			d.Live, d.Expired, d.LiveUntil = 0, 1, nil
		}
		out = append(out, d)
	}
	return out, nil
}

func (f *fakeSource) Features() Features { return Features{Tasks: true} }

func (f *fakeSource) Fault() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fault
}

func (f *fakeSource) Thresholds() Thresholds { return f.th }

func running(name string, lastOutput time.Time) AgentState {
	return AgentState{Name: name, Seq: 1, Condition: Condition{State: agent.Running, Since: lastOutput,
		SessionStarted: lastOutput, LastOutput: lastOutput}}
}

func startHub(t *testing.T, src Source, opts Options) *Hub {
	t.Helper()
	h := NewHub(src, opts)
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// next waits for the subscription's next update.
func next(t *testing.T, s *Subscription) Update {
	t.Helper()
	select {
	case u, ok := <-s.C:
		if !ok {
			t.Fatalf("stream ended: %v", s.Err())
		}
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no update within 10s")
	}
	return Update{}
}

// nextOf skips updates until one of kind arrives, within 10 s in all
// (a stream that keeps sending other kinds must not hold the test).
func nextOf(t *testing.T, s *Subscription, kind string) Update {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if u := next(t, s); u.Kind == kind {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s update within 10s", kind)
		}
	}
}

func TestHubStreamsEventsAndAgentChanges(t *testing.T) {
	now := time.Now()
	src := newFakeSource(running("alice", now), running("bob", now))
	src.emit(Event{Agent: "alice", From: "Spawning", To: "Running"})
	h := startHub(t, src, Options{})
	sub, err := h.Subscribe(context.Background(), NoResume, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	snap := sub.Snapshot
	if len(snap.Agents) != 2 || snap.Agents[0].Name != "alice" || snap.Agents[0].Visual != Running || snap.Agents[0].Indicator != "●" {
		t.Fatalf("snapshot agents %+v", snap.Agents)
	}
	if snap.LastEventID != 1 || len(snap.Tasks.States) != 12 || snap.Merge.Note != "not configured" || snap.StallAfter != 300 || snap.SpawnTimeout != 60 {
		t.Fatalf("snapshot %+v", snap)
	}
	var tail []Event
	if err := sub.Backlog(context.Background(), func(e Event) error { tail = append(tail, e); return nil }); err != nil || len(tail) != 1 {
		t.Fatalf("tail %v, %v", tail, err)
	}

	stopped := AgentState{Name: "bob", Seq: 1, Reason: "operator", Condition: Condition{State: agent.Stopped, Since: now}}
	src.setAgent(stopped)
	src.emit(Event{Agent: "bob", From: "Running", Event: "OperatorStop", To: "Stopped", Actor: "operator"})
	h.Notify()
	if u := next(t, sub); u.Kind != KindEvent || u.Event.ID != 2 || u.Event.To != "Stopped" {
		t.Fatalf("first update %+v", u)
	}
	u := nextOf(t, sub, KindAgent)
	if u.Agent.Name != "bob" || u.Agent.Visual != Dead || u.Agent.State != "Stopped" || u.Agent.Reason != "operator" {
		t.Fatalf("agent update %+v", u.Agent)
	}

	src.removeAgent("alice")
	h.Notify()
	if u := nextOf(t, sub, KindRemoved); u.Name != "alice" {
		t.Fatalf("removed %+v", u)
	}
	src.mu.Lock()
	src.fault = "disk full"
	src.mu.Unlock()
	h.Notify()
	if u := nextOf(t, sub, KindFault); *u.Fault != "disk full" {
		t.Fatalf("fault %+v", u)
	}
}

// TestHubResumeMissesNothing: a subscriber that went away resumes after
// the last event it saw and gets every later event once, in order, whether
// the ring still holds them or they must come from the database.
func TestHubResumeMissesNothing(t *testing.T) {
	for _, ring := range []int{1024, 3} {
		t.Run(fmt.Sprint("ring ", ring), func(t *testing.T) {
			src := newFakeSource(running("alice", time.Now()))
			h := startHub(t, src, Options{Ring: ring})
			sub, err := h.Subscribe(context.Background(), NoResume, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				src.emit(Event{Agent: "alice", Event: fmt.Sprint("e", i)})
			}
			h.Notify()
			var last int64
			for last < 2 { // read two of three, then go away
				last = nextOf(t, sub, KindEvent).Event.ID
			}
			sub.Close()
			for i := 3; i < 10; i++ {
				src.emit(Event{Agent: "alice", Event: fmt.Sprint("e", i)})
				h.Notify()
			}
			if _, err := h.Snapshot(context.Background()); err != nil { // the hub has read them all
				t.Fatal(err)
			}
			again, err := h.Subscribe(context.Background(), last, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			var got []int64
			if err := again.Backlog(context.Background(), func(e Event) error { got = append(got, e.ID); return nil }); err != nil {
				t.Fatal(err)
			}
			src.emit(Event{Agent: "alice", Event: "live"})
			h.Notify()
			got = append(got, nextOf(t, again, KindEvent).Event.ID)
			if fmt.Sprint(got) != "[3 4 5 6 7 8 9 10 11]" {
				t.Fatalf("resumed events %v, want 3..11", got)
			}
		})
	}
}

// TestHubLaggingSubscriberIsDropped: a reader that does not keep up is cut
// off (the stream does not grow without bound) and told why.
func TestHubLaggingSubscriberIsDropped(t *testing.T) {
	src := newFakeSource(running("alice", time.Now()))
	h := startHub(t, src, Options{Buffer: 4})
	slow, err := h.Subscribe(context.Background(), NoResume, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		src.emit(Event{Agent: "alice"})
	}
	// The snapshot's round reads and publishes them before anyone reads.
	if _, err := h.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for range slow.C {
		n++
	}
	if !errors.Is(slow.Err(), ErrLagged) || n != 4 {
		t.Fatalf("after %d updates: %v, want ErrLagged after 4", n, slow.Err())
	}
	slow.Close() // after the hub ended it: harmless
}

func TestHubCloseEndsSubscriptions(t *testing.T) {
	src := newFakeSource()
	h := NewHub(src, Options{})
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sub, err := h.Subscribe(context.Background(), NoResume, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	for range sub.C {
	}
	if !errors.Is(sub.Err(), ErrClosed) {
		t.Fatalf("Err %v", sub.Err())
	}
	if _, err := h.Subscribe(context.Background(), NoResume, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
	h.Close()
}

// TestHubTickFindsStalls: nothing is committed when a session goes quiet,
// yet a watching dashboard sees it stall once stall_after has passed, from
// the hub's own look once a tick.
func TestHubTickFindsStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		src := newFakeSource(running("alice", start))
		h := NewHub(src, Options{})
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		sub, err := h.Subscribe(context.Background(), NoResume, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		u := <-sub.C // synctest: time runs only while every goroutine waits
		if u.Kind != KindAgent || u.Agent.Visual != Stalled || time.Since(start) != 5*time.Minute {
			t.Fatalf("%s after %v, want stalled after 5m", u.Agent.Visual, time.Since(start))
		}
	})
}

// TestHubQuietWhenIdle: with nobody watching a notification costs one
// events query; with a watcher and nothing changing, ticks read no table.
func TestHubQuietWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newFakeSource(running("alice", time.Now()))
		h := NewHub(src, Options{})
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		base := src.readCount("events")
		src.emit(Event{Event: "k"})
		h.Notify()
		synctest.Wait()
		if src.readCount("events") != base || src.readCount("tasks")+src.readCount("spend")+src.readCount("merge") != 0 {
			t.Fatalf("reads with nobody watching: %v", src.reads)
		}
		sub, err := h.Subscribe(context.Background(), NoResume, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		tasks, spend := src.readCount("tasks"), src.readCount("spend")
		time.Sleep(time.Minute) // 60 ticks
		synctest.Wait()
		if src.readCount("tasks") != tasks || src.readCount("spend") != spend {
			t.Fatalf("an idle minute read tasks %d and spend %d times", src.readCount("tasks")-tasks, src.readCount("spend")-spend)
		}
		select {
		case u := <-sub.C:
			t.Fatalf("an idle minute sent %+v", u)
		default:
		}
	})
}

// TestHubCatchesUpWhenAsked: events written while nobody watched are read
// when someone asks (Events, Subscribe), and past a ring's worth only the
// newest are read, not every page.
func TestHubCatchesUpWhenAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newFakeSource(running("alice", time.Now()))
		h := NewHub(src, Options{Ring: 10})
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		last := src.emit(Event{Event: "a"}, Event{Event: "b"})
		h.Notify()
		synctest.Wait()
		evs, err := h.Events(context.Background(), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[1].ID != last {
			t.Fatalf("events after a notify nobody watched: %+v", evs)
		}
		for range 2500 { // pages of 1000 when read one after another
			last = src.emit(Event{Event: "c"})
			h.Notify()
		}
		synctest.Wait()
		reads := src.readCount("events")
		sub, err := h.Subscribe(context.Background(), NoResume, 10)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if got := src.readCount("events") - reads; got != 1 {
			t.Errorf("catching up on 2500 events read %d pages, want 1 (the newest ring's worth)", got)
		}
		var ids []int64
		if err := sub.Backlog(context.Background(), func(e Event) error { ids = append(ids, e.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		if sub.Snapshot.LastEventID != last || len(ids) != 10 || ids[9] != last || ids[0] != last-9 {
			t.Fatalf("subscriber after 2500 unwatched events: last %d, tail %v, want the 10 up to %d", sub.Snapshot.LastEventID, ids, last)
		}
	})
}

// TestHubTaskBoard: a task's event refreshes the board, and the agent that
// holds it shows it.
func TestHubTaskBoard(t *testing.T) {
	src := newFakeSource(running("alice", time.Now()))
	h := startHub(t, src, Options{})
	sub, err := h.Subscribe(context.Background(), NoResume, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if sub.Snapshot.Tasks.Counts["OPEN"] != 0 || len(sub.Snapshot.Tasks.Tasks) != 0 {
		t.Fatalf("empty board %+v", sub.Snapshot.Tasks)
	}
	src.setTasks(Task{ID: 1, Title: "fix it", State: "IN_PROGRESS", Claimant: "alice"}, Task{ID: 2, Title: "later", State: "OPEN"})
	src.emit(Event{Agent: "alice", From: "CLAIMED", To: "IN_PROGRESS", TaskID: 1})
	h.Notify()
	b := nextOf(t, sub, KindTasks).Tasks
	if b.Counts["IN_PROGRESS"] != 1 || b.Counts["OPEN"] != 1 || b.Counts["CLOSED"] != 0 || len(b.Tasks) != 2 {
		t.Fatalf("board %+v", b)
	}
	a := nextOf(t, sub, KindAgent).Agent
	if a.Task == nil || a.Task.ID != 1 || a.Task.State != "IN_PROGRESS" {
		t.Fatalf("alice's task %+v", a.Task)
	}
}

// TestHubInbox: the snapshot carries what needs a person; a commit that
// changes it (mail to the operator writes no event) sends the new list,
// and one that does not sends nothing.
func TestHubInbox(t *testing.T) {
	src := newFakeSource(running("alice", time.Now()))
	src.inbox = []Need{{Kind: NeedTaskFailed, Task: 3, What: "task #3 failed: red", Fix: "swarmd task retry 3"}}
	h := startHub(t, src, Options{})
	sub, err := h.Subscribe(context.Background(), NoResume, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if got := sub.Snapshot.Inbox; len(got) != 1 || got[0].Fix != "swarmd task retry 3" {
		t.Fatalf("snapshot inbox %+v", got)
	}
	src.mu.Lock()
	src.inbox = append(src.inbox, Need{Kind: NeedMail, What: "1 unread messages to the operator", Fix: "swarmd mail inbox"})
	src.mu.Unlock()
	h.Notify()
	if got := *nextOf(t, sub, KindInbox).Inbox; len(got) != 2 || got[1].Kind != NeedMail {
		t.Fatalf("inbox update %+v", got)
	}
	src.mu.Lock()
	src.inbox = nil
	src.mu.Unlock()
	h.Notify()
	if got := *nextOf(t, sub, KindInbox).Inbox; got == nil || len(got) != 0 {
		t.Fatalf("emptied inbox %+v, want an empty list", got)
	}
}

// TestHubDaemons: the snapshot carries the swarm's daemons; a daemon whose
// lease expires (no commit says so) is shown expired once it has; a
// renewal, which moves only the expiry, sends nothing; a daemon that
// joins is shown after the next commit.
func TestHubDaemons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newFakeSource(running("alice", time.Now()))
		until := func(d time.Duration) *time.Time { at := time.Now().Add(d); return &at }
		src.daemons = []Daemon{
			{Name: "host1:/a", Agents: []string{"alice"}, Self: true, Live: 1, LiveUntil: until(time.Hour)},
			{Name: "host2:/b", Agents: []string{"bob"}, Live: 1, LiveUntil: until(10 * time.Second)},
		}
		h := startHub(t, src, Options{})
		sub, err := h.Subscribe(context.Background(), NoResume, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if got := sub.Snapshot.Daemons; len(got) != 2 || !got[0].Self || got[1].Live != 1 {
			t.Fatalf("snapshot daemons %+v", got)
		}
		start := time.Now()
		src.mu.Lock()
		src.daemons[0].LiveUntil = until(2 * time.Hour) // a renewal
		src.mu.Unlock()
		u := <-sub.C // synctest: the next update, however late
		if u.Kind != KindDaemons || time.Since(start) < 10*time.Second || time.Since(start) > 12*time.Second {
			t.Fatalf("%s update after %v, want daemons at the lease's expiry (10 s)", u.Kind, time.Since(start))
		}
		if got := *u.Daemons; got[1].Live != 0 || got[1].Expired != 1 || got[0].Live != 1 {
			t.Fatalf("daemons after host2's lease expired: %+v", got)
		}
		src.mu.Lock()
		src.daemons = append(src.daemons, Daemon{Name: "host3:/c", Agents: []string{"cid"}, Live: 1, LiveUntil: until(time.Hour)})
		src.mu.Unlock()
		h.Notify()
		synctest.Wait()
		if got := *nextOf(t, sub, KindDaemons).Daemons; len(got) != 3 || got[2].Name != "host3:/c" {
			t.Fatalf("daemons after host3 joined: %+v", got)
		}
		reads := src.readCount("daemons")
		src.mu.Lock()
		src.daemons[2].LiveUntil = until(2 * time.Hour) // a renewal, with a commit
		src.mu.Unlock()
		h.Notify()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := src.readCount("daemons") - reads; n < 1 || n > 3 {
			t.Errorf("a minute with one commit read the daemons %d times, want 1 to 3 (after it, and every 30 s)", n)
		}
		select {
		case u := <-sub.C:
			t.Fatalf("a renewal sent %+v", u)
		default:
		}
	})
}

func TestBuildBoardKeepsRecentFinished(t *testing.T) {
	var ts []Task
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 1; i <= 50; i++ {
		ts = append(ts, Task{ID: int64(i), State: "CLOSED", UpdatedAt: base.Add(time.Duration(i) * time.Minute)})
	}
	ts = append(ts, Task{ID: 51, State: "OPEN"}, Task{ID: 52, State: "CANCELLED", UpdatedAt: base})
	b := buildBoard(TaskList{Tasks: ts})
	if b.Counts["CLOSED"] != 50 || b.Counts["CANCELLED"] != 1 || b.Counts["OPEN"] != 1 {
		t.Fatalf("counts %v", b.Counts)
	}
	if len(b.Tasks) != RecentFinished+1 || b.Omitted != 31 || b.Tasks[0].ID != 31 || b.Tasks[len(b.Tasks)-1].ID != 51 {
		t.Fatalf("cards %d (first %d, last %d), omitted %d", len(b.Tasks), b.Tasks[0].ID, b.Tasks[len(b.Tasks)-1].ID, b.Omitted)
	}
}
