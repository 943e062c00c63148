package router

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/mailbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type call struct {
	agent string
	id    int64
}

type recorder struct {
	mu    sync.Mutex
	calls []call
	seen  chan struct{}
}

func (r *recorder) Interrupt(agent string, id int64, _ time.Time) error {
	if agent == "operator" {
		return fmt.Errorf("unknown agent %q", agent)
	}
	r.mu.Lock()
	r.calls = append(r.calls, call{agent, id})
	r.mu.Unlock()
	select {
	case r.seen <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func openDB(t *testing.T, path string) *mailbox.Mailbox {
	t.Helper()
	db, err := mailbox.Open(context.Background(), path, store.Options{}, mailbox.Options{Agents: []string{"alice", "bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestPollRoutesEachUrgentMessageOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	daemonDB := openDB(t, path)
	sender := openDB(t, path) // another process's connection
	rec := &recorder{seen: make(chan struct{}, 1)}
	r := New(daemonDB, rec, Options{})

	if err := r.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	send := func(from, to string, urgent bool) int64 {
		m, err := sender.Send(ctx, mailbox.Draft{From: from, To: to, Body: "hi", Urgent: urgent})
		if err != nil {
			t.Fatal(err)
		}
		return m.ID
	}
	u1 := send("alice", "bob", true)
	send("alice", "bob", false) // normal mail never interrupts
	u2 := send("bob", "carol", true)
	send("alice", "operator", true) // no runner: waits in the mailbox
	for i := 0; i < 3; i++ {        // repeated polls must not resend
		if err := r.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := rec.snapshot()
	want := []call{{"bob", u1}, {"carol", u2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("interrupts = %v, want %v", got, want)
	}

	// Urgent mail consumed by a prompt before the router saw it needs no interrupt.
	u3 := send("carol", "alice", true)
	if _, err := sender.ConsumeForPrompt(ctx, "alice", "alice-1-x"); err != nil {
		t.Fatal(err)
	}
	u4 := send("carol", "alice", true)
	if err := r.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	got = rec.snapshot()
	if len(got) != 3 || got[2] != (call{"alice", u4}) {
		t.Fatalf("after consume: interrupts = %v (u3=%d must be skipped, u4=%d sent)", got, u3, u4)
	}
}

func TestStartStopRoutesWithinMilliseconds(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	daemonDB := openDB(t, path)
	sender := openDB(t, path)
	rec := &recorder{seen: make(chan struct{}, 1)}
	// A one-hour poll: only the WAL watch can deliver in time.
	r := New(daemonDB, rec, Options{Interval: time.Hour, DBPath: path})
	r.Start(ctx)
	r.Start(ctx) // idempotent
	defer r.Stop()

	start := time.Now()
	if _, err := sender.Send(ctx, mailbox.Draft{From: "alice", To: "bob", Body: "stop", Urgent: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rec.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("urgent mail not routed")
	}
	t.Logf("send → interrupt in %v", time.Since(start))
	r.Stop()
	r.Stop()
}

// idleSet is an Idle that records wake-ups.
type idleSet struct {
	mu    sync.Mutex
	idle  []string
	woken []string
}

func (s *idleSet) IdleAgents() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.idle...)
}
func (s *idleSet) Wake(a string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.woken = append(s.woken, a)
	return nil
}
func (s *idleSet) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.woken
	s.woken = nil
	slices.Sort(w)
	return w
}

// TestWakeIdleOnlyWhoHasWork: new mail wakes its recipient; a task for
// anyone wakes one idle agent, not all; a task assigned to an agent wakes
// that agent; nothing new wakes nobody.
func TestWakeIdleOnlyWhoHasWork(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openDB(t, path)
	board := taskboard.New(db.Store(), taskboard.Options{})
	idle := &idleSet{idle: []string{"alice", "bob", "carol"}}
	r := New(db, &recorder{}, Options{Tasks: board, Idle: idle})
	if err := r.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	idle.take()
	sender := openDB(t, path) // another connection, as another process
	if _, err := sender.Send(ctx, mailbox.Draft{From: "operator", To: "bob", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := idle.take(); !slices.Equal(got, []string{"bob"}) {
		t.Fatalf("mail to bob woke %v", got)
	}
	otherBoard := taskboard.New(sender.Store(), taskboard.Options{})
	if _, err := otherBoard.Add(ctx, taskboard.NewTask{Title: "for anyone"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := idle.take(); len(got) != 1 {
		t.Fatalf("one task for anyone woke %v, want one agent", got)
	}
	if _, err := otherBoard.Add(ctx, taskboard.NewTask{Title: "carol's", Assignee: "carol"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := idle.take(); !slices.Contains(got, "carol") {
		t.Fatalf("carol's task woke %v, not carol", got)
	}
	if err := r.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := idle.take(); len(got) != 0 {
		t.Fatalf("nothing new woke %v", got)
	}
}

// TestOnChangeHearsOtherConnectionsCommits: the hook runs once per change
// another connection committed, not on polls that find nothing new.
func TestOnChangeHearsOtherConnectionsCommits(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	daemonDB := openDB(t, path)
	sender := openDB(t, path)
	changes := 0
	r := New(daemonDB, &recorder{seen: make(chan struct{}, 1)}, Options{OnChange: func(store.Change) { changes++ }})
	poll := func() {
		t.Helper()
		if err := r.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	poll()
	base := changes
	poll()
	if changes != base {
		t.Fatalf("a poll with no commit called OnChange (%d -> %d)", base, changes)
	}
	if _, err := sender.Send(ctx, mailbox.Draft{From: "alice", To: "bob", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	poll()
	poll()
	if changes != base+1 {
		t.Fatalf("OnChange called %d times after one commit, want 1", changes-base)
	}
}

// TestRoutesOnPostgresNotifications: on a shared PostgreSQL store there is
// no WAL file to watch; the store's notifications (store.DB.Changes) wake
// the router, and an urgent message sent by another client is routed with
// an hour-long poll.
func TestRoutesOnPostgresNotifications(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Require(t)
	if err := srv.CreateDB("router"); err != nil {
		t.Fatal(err)
	}
	url := srv.URL("router")
	open := func() *mailbox.Mailbox {
		db, err := mailbox.Open(ctx, url, store.Options{}, mailbox.Options{Agents: []string{"alice", "bob"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	daemonDB, sender := open(), open()
	c := &counting{Mail: daemonDB, n: map[string]int{}}
	rec := &recorder{seen: make(chan struct{}, 1)}
	w := daemonDB.Store().Changes()
	r := New(c, rec, Options{Interval: time.Hour, Wake: w.C, Changed: w.Take, Urgent: w.TakeUrgent})
	r.Start(ctx)
	defer r.Stop()
	// The listener connects in the background, and the router reads the
	// mailbox at its start and once the listener listens (it may have
	// missed announcements until then). Send until a message is routed on
	// its announcement alone: with no read of the mailbox.
	deadline := time.After(20 * time.Second)
	for {
		before := c.counts()
		start := time.Now()
		m, err := sender.Send(ctx, mailbox.Draft{From: "alice", To: "bob", Body: "stop", Urgent: true})
		if err != nil {
			t.Fatal(err)
		}
		routed := false
		for !routed {
			select {
			case <-rec.seen:
				calls := rec.snapshot()
				routed = len(calls) > 0 && calls[len(calls)-1] == call{"bob", m.ID}
			case <-deadline:
				t.Fatalf("no urgent mail routed on its announcement alone (interrupts %v, reads %v)", rec.snapshot(), c.counts())
			}
		}
		if c.counts()["urgent"] == before["urgent"] {
			t.Logf("send → interrupt in %v, with no read", time.Since(start))
			break
		}
	}

	// The listener's connection ends, and a message is sent before it is
	// back: its announcement is lost, and the reconnect's read routes it.
	if err := srv.Exec("router", `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = 'router' AND query LIKE 'LISTEN%'`); err != nil {
		t.Fatal(err)
	}
	missed, err := sender.Send(ctx, mailbox.Draft{From: "alice", To: "bob", Body: "stop while you were away", Urgent: true})
	if err != nil {
		t.Fatal(err)
	}
	waitRouted(t, rec, call{"bob", missed.ID})
}

// waitRouted waits until want is the last interrupt rec saw.
func waitRouted(t *testing.T, rec *recorder, want call) {
	t.Helper()
	for deadline := time.After(20 * time.Second); ; {
		if calls := rec.snapshot(); len(calls) > 0 && calls[len(calls)-1] == want {
			return
		}
		select {
		case <-rec.seen:
		case <-deadline:
			t.Fatalf("%+v not routed (interrupts %v)", want, rec.snapshot())
		}
	}
}

// TestAnnouncedUrgentMail: notifications that name urgent mail route it
// without a read, each message once; notifications that may have missed
// some (ChangedAll) read the mailbox, which has the announced ones too.
func TestAnnouncedUrgentMail(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openDB(t, path)
	c := &counting{Mail: db, n: map[string]int{}}
	wake := make(chan struct{}, 1)
	var next atomic.Uint32
	var mu sync.Mutex
	var pending []store.Urgent
	changes := make(chan store.Change, 1)
	rec := &recorder{seen: make(chan struct{}, 1)}
	r := New(c, rec, Options{Interval: time.Hour, Wake: wake, Changed: func() store.Change { return store.Change(next.Swap(0)) },
		Urgent: func(dst []store.Urgent) []store.Urgent {
			mu.Lock()
			defer mu.Unlock()
			dst = append(dst, pending...)
			pending = nil
			return dst
		},
		OnChange: func(what store.Change) { changes <- what }})
	r.Start(ctx)
	defer r.Stop()
	<-changes // the first look
	notify := func(what store.Change, announced ...store.Urgent) {
		t.Helper()
		mu.Lock()
		pending = append(pending, announced...)
		mu.Unlock()
		next.Store(uint32(what))
		wake <- struct{}{}
		select {
		case <-changes:
		case <-time.After(10 * time.Second):
			t.Fatalf("no read after a notification of %b", what)
		}
	}
	send := func(to string) store.Urgent {
		t.Helper()
		m, err := db.Send(ctx, mailbox.Draft{From: "operator", To: to, Body: "stop", Urgent: true})
		if err != nil {
			t.Fatal(err)
		}
		return store.Urgent{ID: m.ID, To: m.To, CreatedAt: m.CreatedAt}
	}

	a, b := send("alice"), send("bob")
	before := c.counts()
	notify(store.ChangedMail, a, b)
	if got, want := rec.snapshot(), []call{{"alice", a.ID}, {"bob", b.ID}}; !slices.Equal(got, want) {
		t.Fatalf("interrupts %v, want %v", got, want)
	}
	if got := c.counts(); got["urgent"] != before["urgent"] {
		t.Errorf("announced mail: %d reads of urgent mail, want none", got["urgent"]-before["urgent"])
	}
	// Announced again (a duplicate notification): not routed twice.
	notify(store.ChangedMail, b)
	if got := rec.snapshot(); len(got) != 2 {
		t.Errorf("an announcement seen twice: interrupts %v, want two", got)
	}

	// A reconnect: carol's message went by unannounced, alice's second
	// was announced after it. Both are routed, in order, once.
	missed, later := send("carol"), send("alice")
	before = c.counts()
	notify(store.ChangedAll, later)
	if got, want := rec.snapshot()[2:], []call{{"carol", missed.ID}, {"alice", later.ID}}; !slices.Equal(got, want) {
		t.Fatalf("after a reconnect: interrupts %v, want %v", got, want)
	}
	if got := c.counts(); got["urgent"] != before["urgent"]+1 {
		t.Errorf("after a reconnect: %d reads of urgent mail, want one", got["urgent"]-before["urgent"])
	}
}

// counting counts the router's reads.
type counting struct {
	Mail
	Tasks
	mu sync.Mutex
	n  map[string]int
}

func (c *counting) count(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[what]++
}

func (c *counting) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *counting) DataVersion(ctx context.Context) (int64, error) {
	c.count("version")
	return c.Mail.DataVersion(ctx)
}

func (c *counting) PendingUrgent(ctx context.Context, after int64) ([]mailbox.Message, error) {
	c.count("urgent")
	return c.Mail.PendingUrgent(ctx, after)
}

func (c *counting) RecipientsSince(ctx context.Context, after int64) ([]string, int64, error) {
	c.count("recipients")
	return c.Mail.RecipientsSince(ctx, after)
}

func (c *counting) OpenVersion(ctx context.Context) (string, error) {
	c.count("tasks")
	return c.Tasks.OpenVersion(ctx)
}

func (c *counting) Claimable(ctx context.Context, atMost int) (int, map[string]int, error) {
	c.count("claimable")
	return c.Tasks.Claimable(ctx, atMost)
}

// TestNotifiedReadsOnlyWhatChanged: woken by notifications that say what
// changed (a shared store's), the router reads only that: a commit of
// neither mail nor tasks costs it no query, mail no task query, tasks no
// mail query, and none of them the data version (the notification is the
// news).
func TestNotifiedReadsOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openDB(t, path)
	c := &counting{Mail: db, Tasks: taskboard.New(db.Store(), taskboard.Options{}), n: map[string]int{}}
	idle := &idleSet{idle: []string{"alice", "bob", "carol"}}
	wake := make(chan struct{}, 1)
	var next atomic.Uint32
	changes := make(chan store.Change, 1)
	rec := &recorder{seen: make(chan struct{}, 1)}
	r := New(c, rec, Options{Interval: time.Hour, Wake: wake, Changed: func() store.Change { return store.Change(next.Swap(0)) },
		Tasks: c, Idle: idle, OnChange: func(what store.Change) {
			select {
			case changes <- what:
			default:
			}
		}})
	r.Start(ctx)
	defer r.Stop()
	notify := func(what store.Change) {
		t.Helper()
		next.Store(uint32(what))
		wake <- struct{}{}
		select {
		case got := <-changes:
			if got != what {
				t.Fatalf("OnChange(%b), want %b", got, what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no read after a notification of %b", what)
		}
	}
	select { // the first look reads everything
	case first := <-changes:
		if first != store.ChangedAll {
			t.Fatalf("first look: OnChange(%b), want everything", first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no first look")
	}
	sender := openDB(t, path)

	before := c.counts()
	notify(store.ChangedOther)
	if got := c.counts(); !maps.Equal(got, before) {
		t.Errorf("a commit of neither mail nor tasks: reads %v -> %v, want none", before, got)
	}

	if _, err := sender.Send(ctx, mailbox.Draft{From: "operator", To: "bob", Body: "stop", Urgent: true}); err != nil {
		t.Fatal(err)
	}
	before = c.counts()
	notify(store.ChangedMail)
	select {
	case <-rec.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("urgent mail not routed")
	}
	got := c.counts()
	if got["urgent"] != before["urgent"]+1 || got["tasks"] != before["tasks"] || got["version"] != before["version"] {
		t.Errorf("mail: reads %v -> %v, want the urgent mail's alone", before, got)
	}

	// A task write that left the open set alone (a start, a report):
	// nothing to read.
	before = c.counts()
	notify(store.ChangedTasks)
	if got := c.counts(); !maps.Equal(got, before) {
		t.Errorf("tasks outside the open set: reads %v -> %v, want none", before, got)
	}

	if _, err := taskboard.New(sender.Store(), taskboard.Options{}).Add(ctx, taskboard.NewTask{Title: "carol's", Assignee: "carol"}); err != nil {
		t.Fatal(err)
	}
	idle.take()
	before = c.counts()
	notify(store.ChangedTasks | store.ChangedOpen)
	waitWoken(t, idle, "carol")
	got = c.counts()
	if got["claimable"] != before["claimable"]+1 || got["tasks"] != before["tasks"] || got["urgent"] != before["urgent"] ||
		got["recipients"] != before["recipients"] || got["version"] != before["version"] {
		t.Errorf("the open set moved: reads %v -> %v, want the claimable count alone", before, got)
	}

	// The open set moved while nobody was idle: the next look, once
	// someone is, counts the claimable tasks even if its own commit left
	// the set alone.
	idle.mu.Lock()
	idle.idle = nil
	idle.mu.Unlock()
	before = c.counts()
	notify(store.ChangedTasks | store.ChangedOpen)
	if got := c.counts(); !maps.Equal(got, before) {
		t.Errorf("nobody idle: reads %v -> %v, want none", before, got)
	}
	idle.mu.Lock()
	idle.idle = []string{"carol"}
	idle.mu.Unlock()
	idle.take()
	notify(store.ChangedTasks)
	waitWoken(t, idle, "carol")
	if got := c.counts(); got["claimable"] != before["claimable"]+1 || got["tasks"] != before["tasks"] {
		t.Errorf("after a missed move: reads %v -> %v, want one claimable count", before, got)
	}
}

// waitWoken waits until the router has woken agent.
func waitWoken(t *testing.T, idle *idleSet, agent string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if slices.Contains(idle.take(), agent) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not woken", agent)
		}
		time.Sleep(time.Millisecond)
	}
}
