package settle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// groupEnv is a store with n sessions of alice's begun, and a Settler with
// neither mailbox nor board (the group is about the transaction).
func groupEnv(t *testing.T, n int) (*store.DB, *Settler, []Record) {
	t.Helper()
	return groupEnvAt(t, filepath.Join(t.TempDir(), "swarm.db"), n)
}

// groupEnvAt is groupEnv on the store at target: a SQLite file or a
// PostgreSQL database.
func groupEnvAt(t *testing.T, target string, n int) (*store.DB, *Settler, []Record) {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, target, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var recs []Record
	for i := 1; i <= n; i++ {
		now := time.Now()
		id := fmt.Sprintf("alice-%d", i)
		if err := db.BeginSession(ctx, store.SessionRecord{SessionID: id, Agent: "alice", Seq: uint32(i), Started: now}); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, Record{Completed: true,
			Session: store.SessionRecord{SessionID: id, Agent: "alice", Seq: uint32(i), Started: now, Ended: &now, Outcome: "success"}})
	}
	return db, &Settler{DB: db}, recs
}

type applied struct {
	i   int
	res Result
	err error
}

// waitQueued polls until n outcomes wait in g.
func waitQueued(t *testing.T, g *Group, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := g.w.Queued()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d outcomes queued after 10 s, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func unsettled(t *testing.T, db *store.DB) []string {
	t.Helper()
	ss, err := db.UnsettledSessions(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range ss {
		ids = append(ids, s.SessionID)
	}
	return ids
}

// Outcomes that wait for the store together are committed in one
// transaction, whichever agent's Settler they come through (the daemon
// makes one per agent, sharing a Group); one that fails is rolled back
// alone and told why.
func TestOutcomesWaitingTogetherCommitTogether(t *testing.T) {
	db, _, recs := groupEnv(t, 5)
	recs[2].Signal = "bogus" // cannot be applied
	ctx := context.Background()
	hold, err := db.Begin(ctx) // another writer of this process has the turn
	if err != nil {
		t.Fatal(err)
	}
	var g Group
	out := make(chan applied, len(recs))
	for i, rec := range recs {
		s := &Settler{DB: db, Group: &g}
		go func() {
			res, err := s.Apply(ctx, rec)
			out <- applied{i, res, err}
		}()
	}
	waitQueued(t, &g, len(recs))
	_ = hold.Rollback()
	for range recs {
		a := <-out
		if a.i == 2 {
			if a.err == nil || !strings.Contains(a.err.Error(), "settle session alice-3") {
				t.Errorf("the bad outcome: err = %v, want one naming session alice-3", a.err)
			}
			continue
		}
		if a.err != nil {
			t.Fatalf("outcome %d: %v", a.i, a.err)
		}
		if got, want := a.res.Batch, len(recs); got != want {
			t.Errorf("outcome %d committed in a batch of %d, want %d", a.i, got, want)
		}
	}
	if got := unsettled(t, db); len(got) != 1 || got[0] != "alice-3" {
		t.Fatalf("unsettled after the batch: %v, want only alice-3 (rolled back alone)", got)
	}
}

// The leader of a batch whose context ends while it waits for the store
// leaves; the outcomes it would have carried are committed without it.
func TestOutcomesOutliveTheirLeader(t *testing.T) {
	db, s, recs := groupEnv(t, 4)
	ctx := context.Background()
	hold, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	out := make(chan applied, len(recs))
	go func() {
		res, err := s.Apply(lctx, recs[0])
		out <- applied{0, res, err}
	}()
	waitQueued(t, &s.own, 1)
	for i, rec := range recs[1:] {
		go func() {
			res, err := s.Apply(ctx, rec)
			out <- applied{i + 1, res, err}
		}()
	}
	waitQueued(t, &s.own, len(recs))
	cancel()
	if a := <-out; a.i != 0 || !errors.Is(a.err, context.Canceled) {
		t.Fatalf("first back: outcome %d, err %v; want the leader's, canceled", a.i, a.err)
	}
	waitQueued(t, &s.own, len(recs)-1) // the rest queued again
	_ = hold.Rollback()
	for range recs[1:] {
		if a := <-out; a.err != nil {
			t.Fatalf("outcome %d: %v", a.i, a.err)
		}
	}
	if got := unsettled(t, db); len(got) != 1 || got[0] != "alice-1" {
		t.Fatalf("unsettled: %v, want only alice-1 (its leader left)", got)
	}
}

// Sessions' starts ride in the same batches as outcomes: starts and
// outcomes that wait for the store together are committed in one
// transaction, and a start whose seq another session has is told so
// (with the next free seq) without failing the rest.
func TestStartsAndOutcomesCommitTogether(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		startsAndOutcomesCommitTogether(t, filepath.Join(t.TempDir(), "swarm.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		srv := pgtest.Shared(t)
		trips := startsAndOutcomesCommitTogether(t, srv.URL(srv.NewDB(t, "group")))
		// The starts' inserts are held back and go with the batch's
		// statements that want an answer: the two outcomes' updates, then
		// the notification and the COMMIT. Waited for one by one, as
		// before, they cost three more.
		if trips != 3 {
			t.Errorf("the batch of three starts and two outcomes took %d round trips, want 3", trips)
		}
	})
}

// startsAndOutcomesCommitTogether runs the test on the store at target
// and returns the batch's round trips (PostgreSQL; 0 on SQLite).
func startsAndOutcomesCommitTogether(t *testing.T, target string) int64 {
	db, _, recs := groupEnvAt(t, target, 2) // alice-1 and alice-2 begun, unsettled
	ctx := context.Background()
	hold, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var g Group
	type begun struct {
		agent string
		next  uint32
		err   error
	}
	starts := make(chan begun, 3)
	for _, b := range []runner.SessionBegin{
		{Agent: "bob", SessionID: "bob-1", Seq: 1},
		{Agent: "carol", SessionID: "carol-1", Seq: 1},
		{Agent: "alice", SessionID: "alice-x", Seq: 2}, // alice-2 has seq 2
	} {
		s := &Settler{DB: db, Group: &g}
		b.Started = time.Now()
		go func() {
			next, err := s.Begin(ctx, b, nil)
			starts <- begun{b.Agent, next, err}
		}()
	}
	out := make(chan applied, len(recs))
	for i, rec := range recs {
		s := &Settler{DB: db, Group: &g}
		go func() {
			res, err := s.Apply(ctx, rec)
			out <- applied{i, res, err}
		}()
	}
	waitQueued(t, &g, 5)
	trips := db.WriteRoundTrips()
	_ = hold.Rollback()
	for range recs {
		a := <-out
		if a.err != nil {
			t.Fatalf("outcome %d: %v", a.i, a.err)
		}
		if got, want := a.res.Batch, 5; got != want {
			t.Errorf("outcome %d committed in a batch of %d, want %d (three starts, two outcomes)", a.i, got, want)
		}
	}
	for range 3 {
		b := <-starts
		switch b.agent {
		case "alice":
			if !errors.Is(b.err, runner.ErrSeqTaken) || b.next != 3 {
				t.Errorf("alice's start on a taken seq: next %d, err %v; want 3, ErrSeqTaken", b.next, b.err)
			}
		default:
			if b.err != nil {
				t.Errorf("%s's start: %v", b.agent, b.err)
			}
		}
	}
	trips = db.WriteRoundTrips() - trips
	for _, agent := range []string{"bob", "carol"} {
		if seq, err := db.MaxSeq(ctx, agent); err != nil || seq != 1 {
			t.Errorf("%s's last seq = %d, %v; want its start's row, 1", agent, seq, err)
		}
	}
	return trips
}

// A session's begin starts the task its prompt claimed in the same
// transaction as its row, in the outcomes' next batch: no transaction of
// its own. A begin whose seq is another session's starts nothing (the
// task stays CLAIMED for Release), and leaves the batch's other writes
// alone; a task no longer CLAIMED does not keep its session from starting.
func TestTaskStartsWithItsSessionsBegin(t *testing.T) {
	db, _, recs := groupEnv(t, 2) // alice-1 and alice-2 begun, unsettled
	ctx := context.Background()
	board := taskboard.New(db, taskboard.Options{})
	sessions := map[string]string{"bob": "bob-1", "carol": "carol-1", "dave": "dave-1", "alice": "alice-x"}
	ids := map[string]int64{}
	for _, agent := range []string{"bob", "carol", "dave", "alice"} {
		tk, err := board.Add(ctx, taskboard.NewTask{Title: agent + "'s"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := board.Claim(ctx, tk.ID, agent, sessions[agent]); err != nil {
			t.Fatal(err)
		}
		ids[agent] = tk.ID
	}
	// dave's was cancelled between its claim and its session's start.
	if _, err := board.Cancel(ctx, ids["dave"]); err != nil {
		t.Fatal(err)
	}
	hold, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var g Group
	type begun struct {
		agent string
		next  uint32
		err   error
	}
	starts := make(chan begun, 4)
	for _, agent := range []string{"bob", "carol", "dave", "alice"} {
		seq := uint32(1)
		if agent == "alice" {
			seq = 2 // alice-2 has it
		}
		s := &Settler{DB: db, Tasks: board, Group: &g}
		b := runner.SessionBegin{Agent: agent, SessionID: sessions[agent], Seq: seq, Started: time.Now(), Task: ids[agent]}
		go func() {
			next, err := s.Begin(ctx, b, nil)
			starts <- begun{agent, next, err}
		}()
	}
	out := make(chan applied, 1)
	go func() {
		res, err := (&Settler{DB: db, Group: &g}).Apply(ctx, recs[0])
		out <- applied{0, res, err}
	}()
	waitQueued(t, &g, 5)
	_ = hold.Rollback()
	if a := <-out; a.err != nil || a.res.Batch != 5 {
		t.Fatalf("outcome: batch %d, %v; want committed with the four begins, a batch of 5", a.res.Batch, a.err)
	}
	for range 4 {
		b := <-starts
		if b.agent == "alice" {
			if !errors.Is(b.err, runner.ErrSeqTaken) || b.next != 3 {
				t.Errorf("alice's begin on a taken seq: next %d, err %v; want 3, ErrSeqTaken", b.next, b.err)
			}
		} else if b.err != nil {
			t.Errorf("%s's begin: %v", b.agent, b.err)
		}
	}
	for agent, want := range map[string]task.State{"bob": task.InProgress, "carol": task.InProgress, "dave": task.Cancelled, "alice": task.Claimed} {
		tk, err := board.Get(ctx, ids[agent])
		if err != nil || tk.State != want {
			t.Errorf("%s's task: %s, %v; want %s", agent, tk.StateName, err, want)
		}
		if want == task.InProgress && tk.ClaimSession != sessions[agent] {
			t.Errorf("%s's task is held by session %q, want %s", agent, tk.ClaimSession, sessions[agent])
		}
		evs, err := db.Events(ctx, store.EventQuery{TaskID: ids[agent]})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ev := range evs {
			if ev.From == "CLAIMED" && ev.To == "IN_PROGRESS" {
				n++
			}
		}
		if got := map[bool]int{true: 1, false: 0}[want == task.InProgress]; n != got {
			t.Errorf("%s's task has %d start events, want %d", agent, n, got)
		}
	}
}
