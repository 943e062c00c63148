package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

// startJournal starts a journal on db and closes it when the test ends.
func startJournal(t testing.TB, db *DB, opts JournalOptions) *Journal {
	t.Helper()
	j := db.NewJournal(opts)
	j.Start()
	t.Cleanup(func() {
		if err := j.Close(); err != nil {
			t.Errorf("journal Close: %v", err)
		}
	})
	return j
}

// never keeps the writer from committing on its own within a test: only a
// full batch, Flush or Close writes.
const never = time.Hour

func ev(agent string, seq uint32, event string) EventRecord {
	return EventRecord{
		At: t0.Add(time.Duration(seq) * time.Millisecond), Agent: agent, From: "Running", Event: event,
		To: "Evaluating", Effect: "None", Actor: "runner", Reason: "exit 0", SessionID: fmt.Sprintf("%s-%d-abc", agent, seq), Seq: seq,
	}
}

func countTable(t testing.TB, db *DB, table string) int {
	t.Helper()
	var n int
	if err := db.read.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func TestJournalRoundTrip(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})

	// Events: every field, and order across agents.
	var want []EventRecord
	for i := range uint32(6) {
		e := ev([]string{"alice", "bob"}[i%2], i+1, fmt.Sprint("E", i))
		want = append(want, e)
		j.Event(e)
	}
	// Agents: only the latest row per agent survives a batch.
	for i := range uint32(3) {
		j.Agent(AgentRecord{Name: "alice", State: fmt.Sprint("S", i), Seq: i, ConsecutiveErrors: i, TotalErrors: 10 + i, UpdatedAt: t0.Add(time.Duration(i) * time.Second)})
	}
	j.Agent(AgentRecord{Name: "bob", State: "Stopped", Seq: 4, ConsecutiveErrors: 5, TotalErrors: 7,
		StopKind: StopFatal, StopReason: "5 consecutive errors", UpdatedAt: t0})
	j.SessionStarted(SessionRecord{SessionID: "alice-3-abc", Agent: "alice", Seq: 3, Started: t0, HeadBefore: "aaaa", LogPath: "/s/logs/alice/3.log"})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	got, err := db.Events(ctx, EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		w.ID, w.At = g.ID, w.At.Truncate(time.Microsecond)
		if g != w {
			t.Errorf("event %d = %+v\nwant %+v", i, g, w)
		}
		if i > 0 && g.ID <= got[i-1].ID {
			t.Errorf("ids not increasing: %d after %d", g.ID, got[i-1].ID)
		}
	}
	bobs, err := db.Events(ctx, EventQuery{Agent: "bob", AfterID: got[1].ID, Limit: 1})
	if err != nil || len(bobs) != 1 || bobs[0].ID != got[3].ID {
		t.Fatalf("Events(bob, after %d, limit 1) = %+v, %v; want event %d", got[1].ID, bobs, err, got[3].ID)
	}

	agents, err := db.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantAlice := AgentRecord{Name: "alice", State: "S2", Seq: 2, ConsecutiveErrors: 2, TotalErrors: 12, UpdatedAt: t0.Add(2 * time.Second).Truncate(time.Microsecond)}
	if len(agents) != 2 || agents["alice"] != wantAlice || agents["bob"].StopKind != StopFatal || agents["bob"].Resumable() {
		t.Fatalf("agents = %+v\nwant alice %+v and bob fatally stopped", agents, wantAlice)
	}
	// A later batch updates the row.
	j.Agent(AgentRecord{Name: "alice", State: "Stopped", Seq: 3, StopKind: StopOperator, UpdatedAt: t0})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if agents, _ = db.Agents(ctx); agents["alice"].State != "Stopped" || !agents["alice"].Resumable() || len(agents) != 2 {
		t.Fatalf("after update: %+v", agents)
	}

	// Session: start, then end.
	ss, err := db.Sessions(ctx, "alice", 0)
	if err != nil || len(ss) != 1 || ss[0].Ended != nil || ss[0].Outcome != "" || ss[0].HeadBefore != "aaaa" {
		t.Fatalf("started session = %+v, %v", ss, err)
	}
	end := t0.Add(90 * time.Second)
	j.SessionEnded(SessionRecord{SessionID: "alice-3-abc", Agent: "alice", Seq: 3, Started: t0, Ended: &end,
		Outcome: OutcomeError, ExitCode: -1, Signal: "SIGKILL", AbortReason: "killed", Reason: "killed by SIGKILL",
		Duration: 90*time.Second + 7*time.Millisecond, HeadAfter: "bbbb", TokensIn: 1200, TokensOut: 300, CostUSD: 0.25, ToolCalls: 9,
		ResultText: "Committed the parser.", Commits: 2})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ss, err = db.Sessions(ctx, "alice", 0)
	if err != nil || len(ss) != 1 {
		t.Fatalf("sessions = %+v, %v", ss, err)
	}
	s := ss[0]
	if s.Ended == nil || !s.Ended.Equal(end.Truncate(time.Microsecond)) || s.Outcome != OutcomeError || s.ExitCode != -1 || s.Signal != "SIGKILL" ||
		s.AbortReason != "killed" || s.Duration != 90*time.Second+7*time.Millisecond || s.HeadAfter != "bbbb" ||
		s.TokensIn != 1200 || s.TokensOut != 300 || s.CostUSD != 0.25 || s.ToolCalls != 9 || s.ResultText != "Committed the parser." || s.Commits != 2 {
		t.Fatalf("ended session = %+v", s)
	}
	// The end carried no HeadBefore or LogPath; the start's are kept.
	if s.HeadBefore != "aaaa" || s.LogPath != "/s/logs/alice/3.log" || !s.Started.Equal(t0.Truncate(time.Microsecond)) {
		t.Fatalf("end overwrote the start: %+v", s)
	}
}

// TestJournalSessionEndWithoutStart: an end whose start was never written
// (or is in the same batch) still leaves one complete row.
func TestJournalSessionEndWithoutStart(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})

	j.SessionStarted(SessionRecord{SessionID: "a-1", Agent: "alice", Seq: 1, Started: t0, LogPath: "1.log"})
	j.SessionEnded(SessionRecord{SessionID: "a-1", Agent: "alice", Seq: 1, Started: t0, Duration: time.Minute, Outcome: OutcomeSuccess})
	j.SessionEnded(SessionRecord{SessionID: "b-1", Agent: "bob", Seq: 1, Started: t0, Duration: time.Minute, Outcome: OutcomeTimeout, LogPath: "b.log"})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ss, err := db.Sessions(ctx, "", 0)
	if err != nil || len(ss) != 2 {
		t.Fatalf("sessions = %+v, %v", ss, err)
	}
	wantEnd := t0.Add(time.Minute).Truncate(time.Microsecond)
	for _, s := range ss {
		if s.Ended == nil || !s.Ended.Equal(wantEnd) || s.Outcome == "" || s.LogPath == "" ||
			s.TokensIn != 0 || s.CostUSD != 0 || s.ToolCalls != 0 {
			t.Errorf("session %+v: want ended at start+duration, with its log path", s)
		}
	}
	// Unreported figures are NULL, not zero.
	var nulls int
	if err := db.read.QueryRow(`SELECT COUNT(*) FROM sessions WHERE tokens_in IS NULL AND cost_usd IS NULL AND tool_calls IS NULL`).Scan(&nulls); err != nil || nulls != 2 {
		t.Fatalf("rows with NULL figures = %d, %v; want 2", nulls, err)
	}
}

// TestJournalCloseFlushesLargeQueue: a burst far beyond a batch, enqueued
// faster than it can be written, is all on disk after Close, in order.
func TestJournalCloseFlushesLargeQueue(t *testing.T) {
	const n = 50000
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openTest(t, path, Options{})
	var (
		mu      sync.Mutex
		reports []error
	)
	j := db.NewJournal(JournalOptions{OnError: func(err error) { mu.Lock(); reports = append(reports, err); mu.Unlock() }})
	j.Start()
	e := ev("alice", 0, "SessionExited")
	start := time.Now()
	for i := range uint32(n) {
		e.Seq = i
		j.Event(e)
	}
	enqueue := time.Since(start)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("enqueued %d events in %v, closed after %v", n, enqueue, time.Since(start))
	if err := j.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	j.Event(e) // after Close: dropped, and said so
	mu.Lock()
	if len(reports) != 1 || !errors.Is(reports[0], ErrJournalClosed) {
		t.Fatalf("OnError reports = %v, want one ErrJournalClosed", reports)
	}
	mu.Unlock()
	db.Close()

	db2 := openTest(t, path, Options{})
	var count, inOrder int
	if err := db2.read.QueryRow(`SELECT COUNT(*), COUNT(*) FILTER (WHERE seq = id - 1) FROM events`).Scan(&count, &inOrder); err != nil {
		t.Fatal(err)
	}
	if count != n || inOrder != n {
		t.Fatalf("after reopen: %d events, %d in enqueue order; want %d", count, inOrder, n)
	}
	if _, err := db2.Events(ctx, EventQuery{Limit: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestJournalCloseWithoutStart: a journal whose writer never ran still
// writes everything on Close, and Start after Close does nothing.
func TestJournalCloseWithoutStart(t *testing.T) {
	db := openTest(t, "", Options{})
	j := db.NewJournal(JournalOptions{MaxBatch: 7})
	for i := range uint32(100) {
		j.Event(ev("bob", i, "X"))
	}
	j.Agent(AgentRecord{Name: "bob", State: "Running", UpdatedAt: t0})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j.Start() // must not start a goroutine (goleak checks)
	if n := countTable(t, db, "events"); n != 100 {
		t.Fatalf("%d events, want 100", n)
	}
	if n := countTable(t, db, "agents"); n != 1 {
		t.Fatalf("%d agents, want 1", n)
	}
}

func TestJournalFlush(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openTest(t, path, Options{})
	other := openTest(t, path, Options{}) // another handle: what another process sees
	j := startJournal(t, db, JournalOptions{FlushInterval: never})

	for i := range uint32(10) {
		j.Event(ev("alice", i, "X"))
	}
	if n := countTable(t, other, "events"); n != 0 {
		t.Fatalf("%d events visible before any flush (interval %v, batch not full)", n, never)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := j.Flush(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush(cancelled) = %v, want context.Canceled", err)
	}
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countTable(t, other, "events"); n != 10 {
		t.Fatalf("after Flush, another handle sees %d events, want 10", n)
	}
	if err := j.Flush(ctx); err != nil { // nothing queued
		t.Fatal(err)
	}

	// A full batch is written without waiting for the interval.
	full := startJournal(t, db, JournalOptions{FlushInterval: never, MaxBatch: 50})
	for i := range uint32(50) {
		full.Event(ev("bob", i, "Y"))
	}
	waitFor(t, "a full batch to commit", func() bool { return countTable(t, other, "events") == 60 })
}

// TestJournalWritesOnItsOwn: without Flush, the writer commits within about
// FlushInterval.
func TestJournalWritesOnItsOwn(t *testing.T) {
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: 5 * time.Millisecond})
	for round := 1; round <= 3; round++ {
		j.Event(ev("alice", uint32(round), "X"))
		waitFor(t, "the writer to commit", func() bool { return countTable(t, db, "events") == round })
	}
}

// TestJournalRetriesFailedBatch makes SQLite refuse inserts (a trigger),
// then lets them through: nothing is lost, nothing reordered, and both the
// writer and Flush report the failure.
func TestJournalRetriesFailedBatch(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	failed := make(chan error, 100)
	j := startJournal(t, db, JournalOptions{FlushInterval: time.Millisecond, MaxBatch: 3, OnError: func(err error) {
		select {
		case failed <- err:
		default:
		}
	}})
	if _, err := db.SQL().Exec(`CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'injected failure'); END`); err != nil {
		t.Fatal(err)
	}
	for i := range uint32(5) {
		j.Event(ev("alice", i, "X"))
	}
	select {
	case err := <-failed:
		if !strings.Contains(err.Error(), "injected failure") || !strings.HasPrefix(err.Error(), "store: journal: write") {
			t.Fatalf("OnError(%v): want the SQLite error, naming the operation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not report the failing batch")
	}
	if err := j.Flush(ctx); err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("Flush while inserts fail = %v, want the failure", err)
	}
	for i := range uint32(5) {
		j.Event(ev("alice", 5+i, "X"))
	}
	if _, err := db.SQL().Exec(`DROP TRIGGER refuse`); err != nil {
		t.Fatal(err)
	}
	// The writer retries on its own.
	waitFor(t, "the writer to retry", func() bool { return countTable(t, db, "events") == 10 })
	got, err := db.Events(ctx, EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		if e.Seq != uint32(i) {
			t.Fatalf("event %d has seq %d: retried records were reordered", i, e.Seq)
		}
	}
}

// TestJournalBoundedWhileRefused: while the database refuses writes the
// queue stops at MaxQueued: further events are dropped, each reported as
// ErrJournalFull and counted, while agent rows are still kept; once writes
// go through again everything kept lands.
func TestJournalBoundedWhileRefused(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	var mu sync.Mutex
	var full int
	j := db.NewJournal(JournalOptions{MaxQueued: 4, OnError: func(err error) {
		if errors.Is(err, ErrJournalFull) {
			mu.Lock()
			full++
			mu.Unlock()
		}
	}})
	t.Cleanup(func() { j.Close() })
	if _, err := db.SQL().Exec(`CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'injected failure'); END`); err != nil {
		t.Fatal(err)
	}
	for i := range uint32(10) {
		j.Event(ev("alice", i, "X"))
	}
	j.Agent(AgentRecord{Name: "alice", State: "Running", UpdatedAt: time.Now()})
	if err := j.Flush(ctx); err == nil {
		t.Fatal("Flush while inserts fail succeeded")
	}
	mu.Lock()
	gotFull := full
	mu.Unlock()
	if gotFull != 1 || j.Dropped() != 6 || j.Backlog() != 5 {
		t.Fatalf("reported full %d times, Dropped %d, Backlog %d; want 1 (the first), 6, 5 (4 events and the agent row kept)",
			gotFull, j.Dropped(), j.Backlog())
	}
	if _, err := db.SQL().Exec(`DROP TRIGGER refuse`); err != nil {
		t.Fatal(err)
	}
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countTable(t, db, "events"); n != 4 {
		t.Fatalf("%d events written, want the 4 kept", n)
	}
	if ags, err := db.Agents(ctx); err != nil || ags["alice"].State != "Running" {
		t.Fatalf("agent row after the refusal = %+v, %v; want it kept", ags["alice"], err)
	}
}

// TestJournalConcurrentEnqueue: 16 goroutines enqueue and flush at once;
// every record lands once, each goroutine's in its order.
func TestJournalConcurrentEnqueue(t *testing.T) {
	const (
		goroutines = 16
		per        = 1000
	)
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: time.Millisecond, MaxBatch: 256})
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			name := fmt.Sprintf("a%d", g)
			for i := range uint32(per) {
				j.Event(ev(name, i, "X"))
				if i%100 == 0 {
					j.Agent(AgentRecord{Name: name, State: "Running", Seq: i, UpdatedAt: t0})
				}
				if i%250 == 0 {
					if err := j.Flush(ctx); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	events, err := db.Events(ctx, EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != goroutines*per {
		t.Fatalf("%d events, want %d", len(events), goroutines*per)
	}
	next := map[string]uint32{}
	for _, e := range events {
		if e.Seq != next[e.Agent] {
			t.Fatalf("%s: seq %d after %d", e.Agent, e.Seq, next[e.Agent])
		}
		next[e.Agent]++
	}
	agents, err := db.Agents(ctx)
	if err != nil || len(agents) != goroutines {
		t.Fatalf("agents = %d, %v", len(agents), err)
	}
	for name, a := range agents {
		if a.Seq != 900 {
			t.Errorf("%s: seq %d, want the latest row (900)", name, a.Seq)
		}
	}
}

// TestReadWhileJournalWrites: another handle (another process) reads the
// event log while the journal writes it, and sees whole batches in order.
func TestReadWhileJournalWrites(t *testing.T) {
	const n = 5000
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openTest(t, path, Options{})
	reader := openTest(t, path, Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: time.Millisecond, MaxBatch: 100})

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range uint32(n) {
			j.Event(ev("alice", i, "X"))
		}
	}()
	var (
		after int64
		seen  uint32
		reads int
	)
	deadline := time.Now().Add(20 * time.Second)
	for seen < n {
		if time.Now().After(deadline) {
			t.Fatalf("reader saw %d of %d events", seen, n)
		}
		es, err := reader.Events(ctx, EventQuery{Agent: "alice", AfterID: after, Limit: 500})
		if err != nil {
			t.Fatalf("read while writing: %v", err)
		}
		reads++
		for _, e := range es {
			if e.Seq != seen {
				t.Fatalf("reader got seq %d, want %d", e.Seq, seen)
			}
			seen++
			after = e.ID
		}
		if len(es) == 0 {
			time.Sleep(time.Millisecond) // polling a real writer
		}
	}
	<-done
	t.Logf("%d reads", reads)
}

func TestCloseOrphanSessions(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	for _, s := range []SessionRecord{
		{SessionID: "bob-2-x", Agent: "bob", Seq: 2, Started: t0},
		{SessionID: "alice-1-x", Agent: "alice", Seq: 1, Started: t0},
		{SessionID: "alice-2-x", Agent: "alice", Seq: 2, Started: t0},
	} {
		j.SessionStarted(s)
	}
	end := t0.Add(time.Minute)
	j.SessionEnded(SessionRecord{SessionID: "alice-1-x", Agent: "alice", Seq: 1, Started: t0, Ended: &end, Outcome: OutcomeSuccess})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	now := t0.Add(time.Hour)
	orphans, err := db.CloseOrphanSessions(ctx, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) != 2 || orphans[0].SessionID != "alice-2-x" || orphans[1].SessionID != "bob-2-x" {
		t.Fatalf("orphans = %+v, want alice-2-x and bob-2-x in that order", orphans)
	}
	for _, o := range orphans {
		if o.Outcome != OutcomeOrphaned || o.Ended == nil || !o.Ended.Equal(now.Truncate(time.Microsecond)) || o.Reason == "" {
			t.Errorf("orphan %+v: want outcome orphaned, ended now, with a reason", o)
		}
	}
	ss, err := db.Sessions(ctx, "alice", 0)
	if err != nil || len(ss) != 2 || ss[0].Seq != 2 || ss[0].Outcome != OutcomeOrphaned || ss[1].Outcome != OutcomeSuccess || !ss[1].Ended.Equal(end.Truncate(time.Microsecond)) {
		t.Fatalf("alice's sessions, newest first = %+v", ss)
	}
	if again, err := db.CloseOrphanSessions(ctx, now, nil); err != nil || len(again) != 0 {
		t.Fatalf("second call = %+v, %v; want none", again, err)
	}
	if ss, err := db.Sessions(ctx, "", 1); err != nil || len(ss) != 1 {
		t.Fatalf("Sessions(all, limit 1) = %+v, %v", ss, err)
	}
}

func TestResetAgent(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	j.Agent(AgentRecord{Name: "alice", State: "Stopped", Seq: 20, ConsecutiveErrors: 5, TotalErrors: 20,
		StopKind: StopFatal, StopReason: "20 total errors", UpdatedAt: t0})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	if err := db.ResetAgent(ctx, "alice", now, "operator"); err != nil {
		t.Fatal(err)
	}
	agents, err := db.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := AgentRecord{Name: "alice", State: "Stopped", Seq: 20, UpdatedAt: now.Truncate(time.Microsecond)}
	if agents["alice"] != want || !agents["alice"].Resumable() {
		t.Fatalf("after reset: %+v\nwant %+v (counters and stop cleared, seq kept)", agents["alice"], want)
	}
	evs, err := db.Events(ctx, EventQuery{Agent: "alice"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("events = %+v, %v", evs, err)
	}
	e := evs[0]
	if e.Event != EventOperatorStart || e.Actor != "operator" || e.From != "Stopped" || e.Seq != 20 ||
		!e.At.Equal(now.Truncate(time.Microsecond)) ||
		!strings.Contains(e.Reason, "consecutive 5, total 20") || !strings.Contains(e.Reason, "fatal stop: 20 total errors") {
		t.Fatalf("reset event = %+v: want the decision and what it cleared", e)
	}

	// An agent with no row: the decision is still logged, no row invented.
	if err := db.ResetAgent(ctx, "bob", now, ""); err != nil {
		t.Fatal(err)
	}
	if agents, _ := db.Agents(ctx); len(agents) != 1 {
		t.Fatalf("agents = %+v: reset invented a row", agents)
	}
	if evs, _ := db.Events(ctx, EventQuery{Agent: "bob"}); len(evs) != 1 || evs[0].Actor != "operator" {
		t.Fatalf("bob's events = %+v", evs)
	}
	if err := db.ResetAgent(ctx, "Bad Name", now, ""); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("ResetAgent(bad name) = %v, want ErrInvalidName", err)
	}
}

// TestJournalResetAgentOrdering: a fatal-stop row still queued in the
// journal must not overwrite a reset that comes after it.
func TestJournalResetAgentOrdering(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	j.Agent(AgentRecord{Name: "alice", State: "Stopped", Seq: 3, ConsecutiveErrors: 5, TotalErrors: 5, StopKind: StopFatal, UpdatedAt: t0})
	if err := j.ResetAgent(ctx, "alice", t0.Add(time.Second), "operator"); err != nil {
		t.Fatal(err)
	}
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	agents, err := db.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := agents["alice"]; a.StopKind != "" || a.ConsecutiveErrors != 0 || a.TotalErrors != 0 || a.Seq != 3 {
		t.Fatalf("alice = %+v: the queued row overwrote the reset", a)
	}
}

func TestMaxSeq(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	check := func(agent string, want uint32) {
		t.Helper()
		if err := j.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err := db.MaxSeq(ctx, agent); err != nil || got != want {
			t.Fatalf("MaxSeq(%s) = %d, %v; want %d", agent, got, err, want)
		}
	}
	check("alice", 0)
	for _, seq := range []uint32{1, 7, 3} {
		j.SessionStarted(SessionRecord{SessionID: fmt.Sprint("alice-", seq), Agent: "alice", Seq: seq, Started: t0})
	}
	check("alice", 7)
	// The agent row can be ahead of the sessions (a seq whose session never
	// started): that seq is used again.
	j.Agent(AgentRecord{Name: "alice", State: "Spawning", Seq: 9, UpdatedAt: t0})
	check("alice", 7)
	j.Agent(AgentRecord{Name: "bob", State: "Idle", Seq: 2, UpdatedAt: t0})
	j.SessionStarted(SessionRecord{SessionID: "bob-5", Agent: "bob", Seq: 5, Started: t0})
	check("bob", 5)
	check("carol", 0)

	// A restored store's floor: MaxSeq is the floor while the sessions are
	// below it, the sessions' once past it; a lower floor changes nothing.
	if err := db.SetSeqFloor(ctx, "carol", 12); err != nil {
		t.Fatal(err)
	}
	check("carol", 12)
	if err := db.SetSeqFloor(ctx, "carol", 4); err != nil {
		t.Fatal(err)
	}
	check("carol", 12)
	j.SessionStarted(SessionRecord{SessionID: "carol-13", Agent: "carol", Seq: 13, Started: t0})
	check("carol", 13)
	check("bob", 5)
	if err := db.SetSeqFloor(ctx, "no/such", 1); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("SetSeqFloor of a bad name: %v, want ErrInvalidName", err)
	}
}

// waitFor polls cond until it holds or a deadline passes: for conditions a
// background goroutine brings about.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestJournalSessionStartWrittenAtOnce: a session's start row does not wait
// for FlushInterval (after a crash it decides whether the session's mail was
// delivered).
func TestJournalSessionStartWrittenAtOnce(t *testing.T) {
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	j.Event(ev("alice", 1, "PromptReady"))
	j.SessionStarted(SessionRecord{SessionID: "alice-1-x", Agent: "alice", Seq: 1, Started: t0})
	deadline := time.Now().Add(10 * time.Second)
	for countTable(t, db, "sessions") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("session start row not written within 10s (FlushInterval is an hour)")
		}
		time.Sleep(time.Millisecond)
	}
	// Whatever was queued before it went in the same batch.
	if n := countTable(t, db, "events"); n != 1 {
		t.Errorf("events = %d, want 1", n)
	}
}

// TestSpend sums each agent's sessions: tokens and cost not reported
// (NULL) count as zero, a running session counts.
func TestSpend(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	end := t0.Add(time.Minute)
	for i, s := range []SessionRecord{
		{Agent: "alice", TokensIn: 1000, TokensOut: 200, CostUSD: 0.25, Commits: 1},
		{Agent: "alice", TokensIn: 10, TokensOut: 2, CostUSD: 0.5, Outcome: OutcomeInterrupted},
		{Agent: "alice"}, // reported nothing
		{Agent: "bob", TokensIn: 7, Commits: 3},
	} {
		s.SessionID, s.Seq, s.Started, s.Ended = s.Agent+"-"+strconv.Itoa(i), uint32(i+1), t0, &end
		j.SessionEnded(s)
	}
	j.SessionStarted(SessionRecord{SessionID: "carol-1", Agent: "carol", Seq: 1, Started: t0})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sp, err := db.Spend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Spend{
		"alice": {Agent: "alice", Sessions: 3, TokensIn: 1010, TokensOut: 202, CostUSD: 0.75, Commits: 1},
		"bob":   {Agent: "bob", Sessions: 1, TokensIn: 7, Commits: 3},
		"carol": {Agent: "carol", Sessions: 1},
	}
	if len(sp) != len(want) {
		t.Fatalf("Spend = %+v, want %+v", sp, want)
	}
	for a, w := range want {
		if sp[a] != w {
			t.Errorf("Spend[%s] = %+v, want %+v", a, sp[a], w)
		}
	}
}

// TestJournalOnCommit: the hook hears of each committed batch after its rows
// are visible to readers, and not of a batch that failed.
func TestJournalOnCommit(t *testing.T) {
	db := openTest(t, "", Options{})
	var seen []int
	j := startJournal(t, db, JournalOptions{FlushInterval: never, OnCommit: func() {
		seen = append(seen, countTable(t, db, "events")) // runs on the flushing goroutine
	}})
	ctx := context.Background()
	j.Event(ev("alice", 1, "X"))
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := j.Flush(ctx); err != nil { // nothing queued: nothing committed
		t.Fatal(err)
	}
	j.Event(ev("alice", 2, "X"))
	j.Event(ev("alice", 3, "X"))
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "[1 3]" {
		t.Fatalf("OnCommit saw %v rows, want [1 3]", seen)
	}
}

// Records enqueued while the journal waits for the writer's turn go in
// the transaction it is waiting to begin, not in one more after it.
func TestJournalTakesWhatArrivesWhileItWaits(t *testing.T) {
	db := openTest(t, "", Options{})
	var commits int
	j := startJournal(t, db, JournalOptions{FlushInterval: never, OnCommit: func() { commits++ }})
	ctx := context.Background()
	// Its statements prepared first: a first flush prepares them on the
	// write connection, which the holder below keeps.
	if err := j.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	hold, err := db.Begin(ctx) // another writer of this process has the turn
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback() // a failed wait below still lets the journal close
	j.Event(ev("alice", 1, "X"))
	flushed := make(chan error, 1)
	go func() { flushed <- j.Flush(ctx) }()
	waitFor(t, "the flush to wait for the writer's turn", func() bool {
		db.gate.mu.Lock()
		defer db.gate.mu.Unlock()
		return len(db.gate.queues[Normal]) == 1
	})
	j.Event(ev("alice", 2, "X"))
	j.Agent(AgentRecord{Name: "alice", State: "Running", Seq: 2, UpdatedAt: t0})
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if got := countTable(t, db, "events"); got != 2 {
		t.Errorf("events after the flush = %d, want 2: the one enqueued while it waited too", got)
	}
	if got := countTable(t, db, "agents"); got != 1 {
		t.Errorf("agent rows after the flush = %d, want 1", got)
	}
	if commits != 1 {
		t.Errorf("commits = %d, want 1", commits)
	}
	if got := j.Backlog(); got != 0 {
		t.Errorf("backlog after the flush = %d, want 0", got)
	}
}

func TestLastEventID(t *testing.T) {
	db := openTest(t, "", Options{})
	ctx := context.Background()
	if id, err := db.LastEventID(ctx); err != nil || id != 0 {
		t.Fatalf("empty log: %d, %v", id, err)
	}
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	for i := uint32(1); i <= 3; i++ {
		j.Event(ev("alice", i, "X"))
	}
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := db.Events(ctx, EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := db.LastEventID(ctx); err != nil || id != evs[len(evs)-1].ID {
		t.Fatalf("LastEventID %d, %v; newest event %d", id, err, evs[len(evs)-1].ID)
	}
}

// A daemon that fences its writes writes the rows of the agents whose
// leases it holds, and no other: an agent's row after its lease was lost,
// or while its renewal is late, is the row of the daemon that may run it
// now, even a row queued while the lease was held (a daemon paused
// between the two).
func TestJournalAgentRowsFenced(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	epochs := holdLeases(t, db, "alice", "bob")
	j.Agent(AgentRecord{Name: "alice", State: "Running", Seq: 7, UpdatedAt: t0})
	j.Agent(AgentRecord{Name: "bob", State: "Running", Seq: 2, UpdatedAt: t0})
	j.Agent(AgentRecord{Name: "carol", State: "Running", Seq: 1, UpdatedAt: t0}) // never held
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	j.Agent(AgentRecord{Name: "alice", State: "CoolingDown", Seq: 7, UpdatedAt: t0.Add(time.Second)})
	db.DropFence("alice", epochs["alice"])
	j.Agent(AgentRecord{Name: "alice", State: "Stopped", Seq: 7, StopKind: StopOperator, UpdatedAt: t0.Add(time.Second)})
	db.SetFenceDeadline(time.Now().Add(-time.Second)) // bob's renewal is late
	j.Agent(AgentRecord{Name: "bob", State: "Stopped", Seq: 2, StopKind: StopOperator, UpdatedAt: t0.Add(time.Second)})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ags, err := db.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ags) != 2 || ags["alice"].State != "Running" || ags["bob"].State != "Running" {
		t.Fatalf("agents %+v: want alice's and bob's rows, Running, as written while their leases were held", ags)
	}
	db.SetFenceDeadline(time.Now().Add(time.Minute)) // renewed
	j.Agent(AgentRecord{Name: "bob", State: "Idle", Seq: 3, UpdatedAt: t0.Add(2 * time.Second)})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if ags, err = db.Agents(ctx); err != nil || ags["bob"].State != "Idle" {
		t.Fatalf("bob's row after a renewal: %+v, %v", ags["bob"], err)
	}
}

// An agent's row enqueued while the daemon's renewal is late, its lease
// not run out (a slow store), waits for the renewal rather than being
// dropped: renewed, the lease is this daemon's and so is the row (the
// last one of a session the lease guard killed, or of its stop); lost
// meanwhile, or past the lease's expiry, the row is left out.
func TestJournalAgentRowWaitsForALateRenewal(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	epochs := holdLeases(t, db, "alice", "bob")
	db.SetFenceExpiry(time.Now().Add(time.Minute))
	db.SetFenceDeadline(time.Now().Add(time.Minute))
	j.Agent(AgentRecord{Name: "alice", State: "Running", Seq: 7, UpdatedAt: t0})
	j.Agent(AgentRecord{Name: "bob", State: "Running", Seq: 2, UpdatedAt: t0})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	db.SetFenceDeadline(time.Now().Add(-time.Second)) // the renewal is late
	j.Agent(AgentRecord{Name: "alice", State: "Stopped", Seq: 7, StopKind: StopOperator, UpdatedAt: t0.Add(time.Second)})
	j.Agent(AgentRecord{Name: "bob", State: "Stopped", Seq: 2, StopKind: StopOperator, UpdatedAt: t0.Add(time.Second)})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	state := func(name string) string {
		t.Helper()
		ags, err := db.Agents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ags[name].State
	}
	if a, b := state("alice"), state("bob"); a != "Running" || b != "Running" {
		t.Fatalf("rows while the renewal is late: alice %s, bob %s; want both Running (not written yet)", a, b)
	}
	// The renewal: alice's lease held, bob's found another daemon's.
	db.DropFence("bob", epochs["bob"])
	db.SetFenceExpiry(time.Now().Add(time.Minute))
	db.SetFenceDeadline(time.Now().Add(time.Minute))
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := state("alice"), state("bob"); a != "Stopped" || b != "Running" {
		t.Fatalf("rows after the renewal: alice %s, bob %s; want alice's Stopped written, bob's left out", a, b)
	}
	// Late past the lease's expiry: the row is left out, not kept.
	db.SetFenceExpiry(time.Now().Add(-time.Millisecond))
	db.SetFenceDeadline(time.Now().Add(-time.Second))
	j.Agent(AgentRecord{Name: "alice", State: "Idle", Seq: 8, UpdatedAt: t0.Add(2 * time.Second)})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := j.Backlog(); n != 0 || state("alice") != "Stopped" {
		t.Fatalf("a row late past the lease's expiry: backlog %d, alice %s; want left out", n, state("alice"))
	}
}

// holdLeases has daemon d1 take the leases of agents and fence its writes
// by them, and returns their epochs.
func holdLeases(t *testing.T, db *DB, agents ...string) map[string]int64 {
	t.Helper()
	ls, _, err := db.AcquireLeases(context.Background(), Lease{Daemon: "d1", Host: "h1", PID: 1}, agents, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	db.Fence("d1")
	epochs := map[string]int64{}
	for _, l := range ls {
		db.SetFence(l.Agent, l.Epoch)
		epochs[l.Agent] = l.Epoch
	}
	return epochs
}

// An agent's row is written only while the store says the lease is this
// daemon's, checked in the row's own transaction: a daemon paused between
// its check in memory and the commit (a VM's pause), whose lease another
// daemon took meanwhile, must not commit its row over that daemon's.
func TestJournalAgentRowFencedInItsTransaction(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			ctx := context.Background()
			path := ""
			if engine == "postgres" {
				srv := pgtest.Shared(t)
				if err := srv.CreateDB("journalfenced"); err != nil {
					t.Fatal(err)
				}
				path = srv.URL("journalfenced")
			}
			db := openTest(t, path, Options{})
			j := startJournal(t, db, JournalOptions{FlushInterval: never})
			holdLeases(t, db, "alice", "bob", "carol")
			j.Agent(AgentRecord{Name: "alice", State: "Running", Seq: 1, UpdatedAt: t0})
			if err := j.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			// d2 takes alice once d1's lease is gone; d1's fence, in memory,
			// still holds it (paused before it learns).
			if err := db.ReleaseLeases(ctx, "d1", []string{"alice"}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := db.AcquireLeases(ctx, Lease{Daemon: "d2", Host: "h2", PID: 2}, []string{"alice"}, time.Now(), time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := db.ResetAgent(ctx, "alice", t0.Add(time.Second), "d2"); err != nil {
				t.Fatal(err)
			}
			before, err := db.Agents(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Written with the rows of two agents d1 still holds, in one
			// batch (statements of two rows and of one).
			for _, a := range []string{"bob", "alice", "carol"} {
				j.Agent(AgentRecord{Name: a, State: "Stopped", Seq: 1, StopKind: StopOperator, UpdatedAt: t0.Add(2 * time.Second)})
			}
			if err := j.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			after, err := db.Agents(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if after["alice"] != before["alice"] {
				t.Fatalf("alice's row after d2 took her lease: %+v, was %+v; want d1's row left out", after["alice"], before["alice"])
			}
			for _, a := range []string{"bob", "carol"} {
				if got := after[a]; got.State != "Stopped" || got.Seq != 1 {
					t.Errorf("%s's row, whose lease d1 holds: %+v; want d1's Stopped row", a, got)
				}
			}
		})
	}
}
