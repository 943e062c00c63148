package settle_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the lock holder's own PostgreSQL connection
	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/settle"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(pgtest.Share())) }

// env is one store with its mailbox, board and settler.
type env struct {
	db    *store.DB
	mail  *mailbox.Mailbox
	board *taskboard.Board
	s     *settle.Settler
	dir   string // where session logs go
	// lock takes the store's write lock from another client and returns
	// its release.
	lock func(t testing.TB) (release func())
}

func sqliteEnv(t testing.TB) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "swarm.db")
	e := openEnv(t, path)
	e.lock = func(t testing.TB) func() {
		// Another client of the file: its own connection, holding SQLite's
		// write lock (BEGIN IMMEDIATE) until released.
		other, err := store.Open(context.Background(), path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := other.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback(); _ = other.Close() }
	}
	return e
}

func postgresEnv(t testing.TB) *env {
	t.Helper()
	srv := pgtest.Shared(t)
	url := srv.URL(srv.NewDB(t, "settle"))
	e := openEnv(t, url)
	e.lock = func(t testing.TB) func() {
		// Another client holding the tables an outcome writes, locked.
		c, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := c.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`LOCK TABLE sessions, tasks, messages IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback(); _ = c.Close() }
	}
	return e
}

func openEnv(t testing.TB, target string) *env {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, target, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	mb, err := mailbox.New(ctx, db, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	board := taskboard.New(db, taskboard.Options{AutoClose: true})
	return &env{db: db, mail: mb, board: board, dir: t.TempDir(),
		s: &settle.Settler{DB: db, Mail: mb, Tasks: board, Signals: review.Signals{}}}
}

// session is one session of alice's, begun (row durable), that claimed
// the next task and her pending mail as a prompt would.
type session struct {
	id   string
	seq  uint32
	task int64
	mail int
	log  string
}

func (e *env) begin(t testing.TB, seq uint32) session {
	t.Helper()
	ctx := context.Background()
	s := session{id: fmt.Sprintf("alice-%d-%012x", seq, seq), seq: seq, log: filepath.Join(e.dir, fmt.Sprintf("%d.log", seq))}
	if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: s.id, Seq: seq, Started: time.Now(), LogPath: s.log}, nil); err != nil {
		t.Fatal(err)
	}
	if tk, ok, err := e.board.ClaimNext(ctx, "alice", s.id); err != nil {
		t.Fatal(err)
	} else if ok {
		s.task = tk.ID
		if _, err := e.board.Start(ctx, tk.ID, taskboard.Holder{Agent: "alice", Session: s.id}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := e.mail.ConsumeForPrompt(ctx, "alice", s.id)
	if err != nil {
		t.Fatal(err)
	}
	s.mail = len(ms)
	if err := os.WriteFile(s.log, []byte("=== swarmd session "+s.id+" ===\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// ended is s's settlement: it completed with result text.
func (s session) ended(result string) runner.Settlement {
	now := time.Now()
	return runner.Settlement{
		Session: runner.SessionRecord{Agent: "alice", SessionID: s.id, Seq: s.seq, LogPath: s.log,
			Outcome: agent.ExitOutcome{Kind: agent.Success},
			Result:  backend.Result{Outcome: backend.OutcomeSuccess, Started: now.Add(-time.Second), Ended: now, Text: result}},
		Completed: true, Mail: s.mail, Task: s.task, Result: result,
	}
}

func (e *env) task(t *testing.T, id int64) taskboard.Task {
	t.Helper()
	tk, err := e.board.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// The promise under a held lock: while the only session that saw
// task 1 ends with FAIL, another client holds the store's write lock for
// 14 s. The outcome waits (the wait is reported), then lands exactly: the
// task FAILED, its mail acknowledged once by that session, no later session
// able to report the task, no seq used twice.
func TestLockedStoreDelaysNeverDrops(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(testing.TB) *env
	}{{"sqlite", sqliteEnv}, {"postgres", postgresEnv}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.env(t)
			ctx := context.Background()
			tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "task one"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "see task one"}); err != nil {
				t.Fatal(err)
			}
			s1 := e.begin(t, 1)
			if s1.task != tk.ID || s1.mail != 1 {
				t.Fatalf("session 1 carried task %d and %d messages; want task %d and 1", s1.task, s1.mail, tk.ID)
			}

			release := e.lock(t)
			const hold = 14 * time.Second
			held := time.Now()
			var waits atomic.Int64
			done := make(chan error, 1)
			go func() {
				_, err := e.s.Settle(ctx, s1.ended("the build is broken upstream\nFAIL"), func(error) { waits.Add(1) })
				done <- err
			}()
			timer := time.NewTimer(hold)
			select {
			case err := <-done:
				timer.Stop()
				release()
				t.Fatalf("Settle returned %v after %s while the store was locked", err, time.Since(held))
			case <-timer.C:
			}
			release()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Settle: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Settle did not return 30 s after the lock was released")
			}
			if tc.name == "sqlite" && waits.Load() == 0 {
				t.Error("the wait for SQLite's lock was never reported")
			}
			if got := e.task(t, tk.ID); got.StateName != "FAILED" || !strings.Contains(got.Result, "broken upstream") {
				t.Fatalf("task after its only session said FAIL: %s %q", got.StateName, got.Result)
			}
			// The mail: acknowledged once, by that session.
			all, err := e.mail.Inbox(ctx, "alice", true)
			if err != nil || len(all) != 1 || all[0].DeliveredAt == nil || all[0].ClaimedSession != s1.id || all[0].AckedBy != mailbox.AckSession {
				t.Fatalf("alice's mail after settling = %+v, %v; want 1 acknowledged by %s", all, err, s1.id)
			}

			// A later session cannot report task 1: it was never given it.
			s2 := e.begin(t, 2)
			if s2.task != 0 || s2.mail != 0 {
				t.Fatalf("session 2 was given task %d and %d messages; want none", s2.task, s2.mail)
			}
			st := s2.ended("nothing to do\nDONE")
			st.Task = tk.ID // as if misattributed
			if _, err := e.s.Settle(ctx, st, nil); err != nil {
				t.Fatal(err)
			}
			if got := e.task(t, tk.ID); got.StateName != "FAILED" {
				t.Fatalf("a later session's DONE moved task %d to %s", tk.ID, got.StateName)
			}
			// Settling again changes nothing.
			res, err := e.s.Apply(ctx, e.s.RecordOf(s1.ended("again\nDONE")))
			if err != nil || !res.Already {
				t.Fatalf("second settlement of session 1 = %+v, %v; want Already", res, err)
			}
			// No seq twice: a third session asking for seq 2 is refused with
			// the next free one.
			next, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-2-other", Seq: 2, Started: time.Now()}, nil)
			if !errors.Is(err, runner.ErrSeqTaken) || next != 3 {
				t.Fatalf("Begin of a used seq = %d, %v; want 3, ErrSeqTaken", next, err)
			}
			assertOneRowPerSession(t, e.db, 2)
		})
	}
}

func assertOneRowPerSession(t *testing.T, db *store.DB, want int) {
	t.Helper()
	ss, err := db.Sessions(context.Background(), "alice", 100)
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[uint32]string{}
	for _, s := range ss {
		if other, ok := seqs[s.Seq]; ok {
			t.Errorf("seq %d used by %s and %s", s.Seq, other, s.SessionID)
		}
		seqs[s.Seq] = s.SessionID
	}
	if len(ss) != want {
		t.Errorf("%d session rows, want %d", len(ss), want)
	}
}

// A daemon that dies after the session ended but before the store took its
// outcome: the outcome is in the session's log, and recovery applies it,
// once.
func TestRecoverAppliesTheOutcomeFromTheLog(t *testing.T) {
	e := sqliteEnv(t)
	ctx := context.Background()
	tk, _ := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
	if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	s1 := e.begin(t, 1)
	release := e.lock(t)
	sctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		// The first refusal is the daemon's last moment: it dies (the
		// context ends) before the store takes the outcome.
		_, err := e.s.Settle(sctx, s1.ended("done it\nDONE"), func(error) { cancel() })
		errc <- err
	}()
	err := <-errc
	release()
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Settle = %v, want the context's end", err)
	}
	if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" {
		t.Fatalf("task before recovery: %s", got.StateName)
	}
	if b, ok, err := logs.ReadOutcome(s1.log); err != nil || !ok || !strings.Contains(string(b), s1.id) {
		t.Fatalf("the session log holds no outcome: %q, %v, %v", b, ok, err)
	}
	recs, err := e.s.Recover(ctx, []string{"alice"})
	if err != nil || len(recs) != 1 || recs[0].Session.SessionID != s1.id || recs[0].Result.Acked != 1 {
		t.Fatalf("Recover = %+v, %v; want session 1's outcome with its message", recs, err)
	}
	if got := e.task(t, tk.ID); got.StateName != "CLOSED" {
		t.Fatalf("task after recovery: %s, want CLOSED (DONE, no reviewer)", got.StateName)
	}
	if recs, err := e.s.Recover(ctx, []string{"alice"}); err != nil || len(recs) != 0 {
		t.Fatalf("second Recover = %+v, %v; want nothing left", recs, err)
	}
	// A session whose log holds no outcome stays unsettled: recovery's
	// orphan pass closes it.
	s2 := e.begin(t, 2)
	if recs, err := e.s.Recover(ctx, nil); err != nil || len(recs) != 0 {
		t.Fatalf("Recover of a session with no outcome = %+v, %v", recs, err)
	}
	open, err := e.db.UnsettledSessions(ctx, nil)
	if err != nil || len(open) != 1 || open[0].SessionID != s2.id {
		t.Fatalf("unsettled = %+v, %v; want %s", open, err, s2.id)
	}
}

// A session that did not complete leaves its mail pending with a note, and
// reports nothing, whatever its text says.
func TestIncompleteSessionReportsNothing(t *testing.T) {
	e := sqliteEnv(t)
	ctx := context.Background()
	tk, _ := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
	if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	s1 := e.begin(t, 1)
	st := s1.ended("DONE")
	st.Completed, st.Note = false, "that session timed out"
	if r, err := e.s.Settle(ctx, st, nil); err != nil || r.Signalled {
		t.Fatalf("Settle = %+v, %v", r, err)
	}
	if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" {
		t.Fatalf("task after an incomplete session: %s", got.StateName)
	}
	pending, err := e.mail.Inbox(ctx, "alice", false)
	if err != nil || len(pending) != 1 || pending[0].ShownNote != "that session timed out" {
		t.Fatalf("pending = %+v, %v", pending, err)
	}
}

// A task's line is fenced by attempt, on both stores: an orphaned
// attempt's work head is cleared when the task reopens, the next attempt
// freezes its own head at DONE, and a late outcome of the earlier session
// changes nothing, so only the redo can be merged (the merge queue takes
// Head: ReadyToMerge's test is the board's).
func TestTaskHeadsFencedByAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(testing.TB) *env
	}{{"sqlite", sqliteEnv}, {"postgres", postgresEnv}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.env(t)
			ctx := context.Background()
			tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "the feature"})
			if err != nil {
				t.Fatal(err)
			}
			first, redo := strings.Repeat("a", 40), strings.Repeat("b", 40)
			s1 := e.begin(t, 1)
			st := s1.ended("still working")
			st.Session.HeadAfter = first
			if _, err := e.s.Settle(ctx, st, nil); err != nil {
				t.Fatal(err)
			}
			if got := e.task(t, tk.ID).WorkHead; got != first {
				t.Fatalf("work head after session 1 = %q, want %q", got, first)
			}
			if _, err := e.board.Orphan(ctx, "alice", "alice stopped"); err != nil {
				t.Fatal(err)
			}
			if got := e.task(t, tk.ID); got.WorkHead != "" || got.Head != "" {
				t.Fatalf("orphaned task kept heads %q, %q: its next attempt would continue the earlier one", got.WorkHead, got.Head)
			}
			s2 := e.begin(t, 2)
			if s2.task != tk.ID {
				t.Fatalf("session 2 carried task %d, want %d", s2.task, tk.ID)
			}
			st = s2.ended("redone\nDONE")
			st.Session.HeadAfter = redo
			if _, err := e.s.Settle(ctx, st, nil); err != nil {
				t.Fatal(err)
			}
			// Session 1's DONE arrives late (replayed from its log): refused.
			late := s1.ended("done after all\nDONE")
			late.Session.SessionID = s1.id + "-late" // a row of its own, so that it settles at all
			late.Session.HeadAfter = first
			if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: late.Session.SessionID, Seq: 3, Started: time.Now()}, nil); err != nil {
				t.Fatal(err)
			}
			late.Session.Seq = 3
			if _, err := e.s.Settle(ctx, late, nil); err != nil {
				t.Fatal(err)
			}
			got := e.task(t, tk.ID)
			if got.Head != redo || got.WorkHead != redo {
				t.Fatalf("heads %q, %q after the redo's DONE and a late report, want the redo's %q", got.Head, got.WorkHead, redo)
			}
		})
	}
}

// A review verdict that leaves its task FAILED at max_iterations is told
// (Settler.GaveUp) once, after its commit; a passing one is not.
func TestReviewFailedPastItsIterationsIsTold(t *testing.T) {
	e := sqliteEnv(t)
	ctx := context.Background()
	told := e.toldOfGaveUp(t)
	tk, verdict := e.failAwaited(t, 1, 1, "")
	if _, err := e.s.Settle(ctx, verdict, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.task(t, tk); got.StateName != "FAILED" || len(*told) != 1 || (*told)[0] != tk {
		t.Fatalf("after the failing verdict at max_iterations 1: %s, told %v", got.StateName, *told)
	}
	// The same outcome settled again (a retry whose first commit it did
	// not see) tells nobody again.
	if _, err := e.s.Settle(ctx, verdict, nil); err != nil || len(*told) != 1 {
		t.Fatalf("a second settlement: %v, told %v", err, *told)
	}
}

// TestRecoveredVerdictPastItsIterationsIsTold: a reviewer's FAIL at
// max_iterations whose daemon died before its commit, applied by restart
// recovery from the session's log, tells GaveUp as Settle does: once, and
// not again at the next recovery.
func TestRecoveredVerdictPastItsIterationsIsTold(t *testing.T) {
	e := sqliteEnv(t)
	ctx := context.Background()
	told := e.toldOfGaveUp(t)
	tk := e.verdictInTheLog(t, 1, 1)
	recs, err := e.s.Recover(ctx, []string{"bob"})
	if err != nil || len(recs) != 1 || recs[0].Result.GaveUp != tk {
		t.Fatalf("Recover = %+v, %v; want bob's verdict, its task given up", recs, err)
	}
	if got := e.task(t, tk); got.StateName != "FAILED" || len(*told) != 1 || (*told)[0] != tk {
		t.Fatalf("after the recovered verdict at max_iterations 1: %s, told %v; want FAILED, told once", got.StateName, *told)
	}
	if recs, err := e.s.Recover(ctx, nil); err != nil || len(recs) != 0 || len(*told) != 1 {
		t.Fatalf("second Recover = %+v, %v, told %v; want nothing more", recs, err, *told)
	}
}

// toldOfGaveUp is where e's Settler tells GaveUp: the tasks it was told
// of, each checked to be bob's FAIL ("FAIL: no tests") at max_iterations.
func (e *env) toldOfGaveUp(t *testing.T) *[]int64 {
	told := new([]int64)
	e.s.GaveUp = func(task int64, reviewer, failure, feedback string) {
		if reviewer != "bob" || failure != "max_iterations" || feedback != "FAIL: no tests" {
			t.Errorf("told: reviewer %q, failure %q, feedback %q", reviewer, failure, feedback)
		}
		*told = append(*told, task)
	}
	return told
}

// failAwaited is alice's DONE (session seq) on a task bob reviews at
// maxIterations, recorded, and bob's session seq begun with its log at
// log ("": none); it returns the task and bob's FAIL on it, to settle.
func (e *env) failAwaited(t *testing.T, seq uint32, maxIterations int, log string) (int64, runner.Settlement) {
	t.Helper()
	ctx := context.Background()
	tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one", Reviewer: "bob", MaxIterations: maxIterations})
	if err != nil {
		t.Fatal(err)
	}
	s := e.begin(t, seq)
	if _, err := e.s.Settle(ctx, s.ended("DONE"), nil); err != nil {
		t.Fatal(err)
	}
	if got := e.task(t, tk.ID); got.StateName != "DONE" {
		t.Fatalf("after alice's DONE: %s (%s), want DONE awaiting bob's verdict", got.StateName, got.ReviewState)
	}
	id := fmt.Sprintf("bob-%d-000000000001", seq)
	if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "bob", SessionID: id, Seq: seq, Started: time.Now(), LogPath: log}, nil); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	return tk.ID, runner.Settlement{
		Session: runner.SessionRecord{Agent: "bob", SessionID: id, Seq: seq, LogPath: log, Outcome: agent.ExitOutcome{Kind: agent.Success},
			Result: backend.Result{Outcome: backend.OutcomeSuccess, Started: now.Add(-time.Second), Ended: now, Text: "FAIL: no tests"}},
		Completed: true, Review: tk.ID, Result: "FAIL: no tests",
	}
}

// verdictInTheLog is what a daemon killed as bob's review ended leaves:
// alice's DONE (session seq) on a task bob reviews at maxIterations,
// recorded; bob's FAIL on it (his session seq), in his session's log only,
// as Settle appends it before its commit. It returns the task.
func (e *env) verdictInTheLog(t *testing.T, seq uint32, maxIterations int) int64 {
	t.Helper()
	id := fmt.Sprintf("bob-%d-000000000001", seq)
	log := filepath.Join(e.dir, fmt.Sprintf("bob-%d.log", seq))
	if err := os.WriteFile(log, []byte("=== swarmd session "+id+" ===\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tk, verdict := e.failAwaited(t, seq, maxIterations, log)
	rec, err := json.Marshal(e.s.RecordOf(verdict))
	if err != nil {
		t.Fatal(err)
	}
	if err := logs.AppendOutcome(log, rec); err != nil {
		t.Fatal(err)
	}
	return tk
}

// A DONE session's settlement reads its task with the settlement's own
// write: on PostgreSQL the session's UPDATE (and its lease's check) go to
// the server with that read, one round trip for both under the swarm's
// lock, then the task's move with the COMMIT. The same outcome settled
// again is told it was, on either engine, and moves nothing twice.
func TestDoneReadsItsTaskWithItsSettlement(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, pg bool) {
		ctx := context.Background()
		tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
		if err != nil {
			t.Fatal(err)
		}
		s1 := e.begin(t, 1)
		if s1.task != tk.ID {
			t.Fatalf("alice's session holds task %d, want %d", s1.task, tk.ID)
		}
		before := e.db.WriteRoundTrips()
		rec := e.s.RecordOf(s1.ended("DONE"))
		r, err := e.s.Apply(ctx, rec)
		if err != nil || r.Already || r.Reported != fmt.Sprintf("task %d: done", tk.ID) {
			t.Fatalf("Settle = %+v, %v; want task %d reported DONE", r, err, tk.ID)
		}
		if got, want := e.db.WriteRoundTrips()-before, pgOnly(pg, 2); got != want {
			t.Errorf("the settlement took %d write round trips, want %d", got, want)
		}
		if got := e.task(t, tk.ID); got.StateName != "CLOSED" || got.Result != "DONE" {
			t.Fatalf("task after its DONE: %s, result %q; want CLOSED with the session's result", got.StateName, got.Result)
		}
		evs, err := e.db.Events(ctx, store.EventQuery{TaskID: tk.ID})
		if err != nil {
			t.Fatal(err)
		}
		r, err = e.s.Apply(ctx, rec)
		if err != nil || !r.Already || r.Reported != "" {
			t.Fatalf("Settle again = %+v, %v; want it told the session was settled, nothing reported", r, err)
		}
		again, err := e.db.Events(ctx, store.EventQuery{TaskID: tk.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(again) != len(evs) {
			t.Errorf("the task's events went from %d to %d when its outcome was settled again", len(evs), len(again))
		}
	})
}

// A DONE settlement whose agent's lease another daemon took is refused by
// the lease's check, which travels with the task's read on PostgreSQL: the
// error is ErrFenced, as when it came with the settlement's own write, and
// nothing of it lands.
func TestFencedDoneMovesNothing(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		mine := store.Lease{Daemon: "d1", Host: "h1", PID: 1}
		held, _, err := e.db.AcquireLeases(ctx, mine, []string{"alice"}, time.Now(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		e.db.Fence(mine.Daemon)
		e.db.SetFence("alice", held[0].Epoch)
		tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
		if err != nil {
			t.Fatal(err)
		}
		s1 := e.begin(t, 1)
		// Another daemon takes alice: this one's epoch is stale.
		if err := e.db.ReleaseLeases(ctx, mine.Daemon, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.db.AcquireLeases(ctx, store.Lease{Daemon: "d2", Host: "h2", PID: 2}, []string{"alice"}, time.Now(), time.Minute); err != nil {
			t.Fatal(err)
		}
		r, err := e.s.Apply(ctx, e.s.RecordOf(s1.ended("DONE")))
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("Apply with the lease gone = %+v, %v; want ErrFenced", r, err)
		}
		if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" || got.ClaimSession != s1.id {
			t.Errorf("task after the fenced DONE: %s held by %q; want IN_PROGRESS, %s's", got.StateName, got.ClaimSession, s1.id)
		}
		ss, err := e.db.Sessions(ctx, "alice", 0)
		if err != nil || len(ss) != 1 || ss[0].Ended != nil {
			t.Errorf("alice's sessions after the fenced DONE = %+v, %v; want %s's, not ended", ss, err, s1.id)
		}
	})
}

// A session's task start is written with its row, without reading the
// task first, its event under the same condition as its move: on
// PostgreSQL the lease's check, the row, the event and the move go with the
// batch's commit, one round trip. A begin applied again (its first commit's
// answer lost) is no error and keeps the one start event; a task another
// agent holds is not started, nothing of the start written, and the
// session begins all the same.
func TestTaskStartHeldBack(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, pg bool) {
		ctx := context.Background()
		add := func(title, agent, session string) int64 {
			tk, err := e.board.Add(ctx, taskboard.NewTask{Title: title})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.board.Claim(ctx, tk.ID, agent, session); err != nil {
				t.Fatal(err)
			}
			return tk.ID
		}
		starts := func(id int64) int {
			evs, err := e.db.Events(ctx, store.EventQuery{TaskID: id})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, ev := range evs {
				if ev.From == "CLAIMED" && ev.To == "IN_PROGRESS" {
					n++
				}
			}
			return n
		}

		begin := func(session string, seq uint32, id int64) error {
			_, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: session, Seq: seq, Started: time.Now(), Task: id}, nil)
			return err
		}
		mine := add("alice's", "alice", "alice-1")
		before := e.db.WriteRoundTrips()
		if err := begin("alice-1", 1, mine); err != nil {
			t.Fatalf("Begin: %v", err)
		}
		if got, want := e.db.WriteRoundTrips()-before, pgOnly(pg, 1); got != want {
			t.Errorf("the begin and the start took %d write round trips, want %d", got, want)
		}
		if tk := e.task(t, mine); tk.StateName != "IN_PROGRESS" || tk.ClaimSession != "alice-1" || starts(mine) != 1 {
			t.Errorf("alice's task after Begin: %s, session %q, %d start events; want IN_PROGRESS, alice-1, 1", tk.StateName, tk.ClaimSession, starts(mine))
		}
		// Applied again (an in-doubt commit's retry): no error, no event.
		if err := begin("alice-1", 1, mine); err != nil {
			t.Errorf("Begin again: %v, want none", err)
		}
		if n := starts(mine); n != 1 {
			t.Errorf("%d start events after a second begin, want 1", n)
		}

		bobs := add("bob's", "bob", "bob-1")
		if err := begin("alice-2", 2, bobs); err != nil {
			t.Fatalf("alice's begin naming bob's task = %v, want the session begun", err)
		}
		if tk := e.task(t, bobs); tk.StateName != "CLAIMED" || tk.ClaimSession != "bob-1" || starts(bobs) != 0 {
			t.Errorf("bob's task after alice's begin: %s, session %q, %d start events; want CLAIMED, bob-1, none", tk.StateName, tk.ClaimSession, starts(bobs))
		}
		if err := e.db.SessionBegun(ctx, store.SessionRecord{Agent: "alice", SessionID: "alice-2", Seq: 2}); err != nil {
			t.Errorf("alice-2's row: %v", err)
		}
	})
}

// A session whose begin started its task and whose process then did not
// start gives the task back OPEN, with no retry: Release returns the
// IN_PROGRESS task as it returns a CLAIMED one.
func TestReleaseReturnsATaskItsBeginStarted(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, pg bool) {
		ctx := context.Background()
		tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "parser"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.board.Claim(ctx, tk.ID, "alice", "alice-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-1", Seq: 1, Started: time.Now(), Task: tk.ID}, nil); err != nil {
			t.Fatal(err)
		}
		if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" {
			t.Fatalf("task after Begin: %s, want IN_PROGRESS", got.StateName)
		}
		if err := e.s.Release(ctx, runner.Unstarted{SessionID: "alice-1", Started: tk.ID}, nil); err != nil {
			t.Fatal(err)
		}
		if got := e.task(t, tk.ID); got.StateName != "OPEN" || got.Claimant != "" || got.Retries != 0 {
			t.Errorf("task after Release: %s held by %q, %d retries; want OPEN, free, 0", got.StateName, got.Claimant, got.Retries)
		}
	})
}

// onBoth runs f on a SQLite store and on a PostgreSQL one; pg says which.
func onBoth(t *testing.T, f func(t *testing.T, e *env, pg bool)) {
	t.Run("sqlite", func(t *testing.T) { f(t, sqliteEnv(t), false) })
	t.Run("postgres", func(t *testing.T) { f(t, postgresEnv(t), true) })
}

// pgOnly is n on PostgreSQL and 0 on SQLite: round trips, which SQLite
// does not make.
func pgOnly(pg bool, n int64) int64 {
	if pg {
		return n
	}
	return 0
}

// An outcome refused because the daemon's renewal is late, its lease not
// run out (a slow store), is not one a lost lease refuses (Fenced): a
// stop must keep waiting for it, and it lands with the next renewal.
// Past the lease's expiry, or with the lease lost, it is.
func TestLateRenewalIsNotALostLease(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		mine := store.Lease{Daemon: "d1", Host: "h1", PID: 1}
		held, _, err := e.db.AcquireLeases(ctx, mine, []string{"alice"}, time.Now(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		e.db.Fence(mine.Daemon)
		e.db.SetFence("alice", held[0].Epoch)
		e.db.SetFenceExpiry(time.Now().Add(time.Minute))
		tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
		if err != nil {
			t.Fatal(err)
		}
		s1 := e.begin(t, 1)
		e.db.SetFenceDeadline(time.Now().Add(-time.Second)) // the renewal is late
		var refusals []error
		_, err = e.s.Settle(ctx, s1.ended("DONE"), func(err error) {
			refusals = append(refusals, err)
			e.db.SetFenceDeadline(time.Now().Add(time.Minute)) // renewed
		})
		if err != nil || len(refusals) == 0 {
			t.Fatalf("Settle = %v after %d refusals; want it to wait for the renewal, then land", err, len(refusals))
		}
		for _, r := range refusals {
			if !errors.Is(r, store.ErrFenced) || e.s.Fenced(r) {
				t.Errorf("refusal %v: Fenced %v; want a late renewal's (ErrFenced), not a lost lease's", r, e.s.Fenced(r))
			}
		}
		if got := e.task(t, tk.ID); got.StateName == "IN_PROGRESS" {
			t.Errorf("task %d still IN_PROGRESS after its DONE outcome landed", tk.ID)
		}
		e.db.SetFenceExpiry(time.Now().Add(-time.Millisecond))
		e.db.SetFenceDeadline(time.Now().Add(-time.Second))
		if err := e.db.InTx(ctx, "fenced", func(tx *sql.Tx) error { return e.db.FenceTx(ctx, tx, "alice") }); !e.s.Fenced(err) {
			t.Errorf("a write late past the lease's expiry: %v, Fenced false; want true", err)
		}
		e.db.SetFence("alice", 0)
		if err := e.db.InTx(ctx, "fenced", func(tx *sql.Tx) error { return e.db.FenceTx(ctx, tx, "alice") }); !e.s.Fenced(err) {
			t.Errorf("a write for a lost lease: %v, Fenced false; want true", err)
		}
	})
}

// TestFailAfterDoneMovesNothing: a session that reported its task done
// (`swarmd task done`, which freezes its head and hands it to its reviewer)
// no longer holds it, and its final FAIL is a report on a task it does not
// hold: refused, as `swarmd task fail` would be. Applied, it took the task
// out of its review (DONE -> FAILED, its loop left reviewing), and once
// the operator retried the failed task its worker reported it done again
// at another head, which the review session still running on the first
// head then passed, unseen. The reviewer's verdict here applies to the
// head it was shown.
func TestFailAfterDoneMovesNothing(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one", Reviewer: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		s1 := e.begin(t, 1)
		shown := strings.Repeat("a", 40)
		if _, err := e.board.DoneAt(ctx, tk.ID, taskboard.Holder{Agent: "alice", Session: s1.id}, "done", shown); err != nil {
			t.Fatal(err)
		}
		// bob's review session starts on the frozen head; alice's session
		// goes on and ends with FAIL.
		if got := e.task(t, tk.ID); got.StateName != "DONE" || got.ReviewState != "reviewing" {
			t.Fatalf("after task done: %s, review %q", got.StateName, got.ReviewState)
		}
		if _, err := e.s.Settle(ctx, s1.ended("changed my mind\nFAIL"), nil); err != nil {
			t.Fatal(err)
		}
		got := e.task(t, tk.ID)
		if got.StateName != "DONE" || got.ReviewState != "reviewing" || got.Head != shown {
			t.Fatalf("after the session that reported it done ended with FAIL: %s, review %q, head %q; want DONE, reviewing, %s",
				got.StateName, got.ReviewState, got.Head, shown)
		}
		id := "bob-1-000000000001"
		if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "bob", SessionID: id, Seq: 1, Started: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if _, err := e.s.Settle(ctx, runner.Settlement{
			Session: runner.SessionRecord{Agent: "bob", SessionID: id, Seq: 1, Outcome: agent.ExitOutcome{Kind: agent.Success},
				Result: backend.Result{Outcome: backend.OutcomeSuccess, Started: now.Add(-time.Second), Ended: now, Text: "PASS"}},
			Completed: true, Review: tk.ID, ReviewHead: shown, Result: "PASS",
		}, nil); err != nil {
			t.Fatal(err)
		}
		if got := e.task(t, tk.ID); got.StateName != "CLOSED" || got.Head != shown {
			t.Errorf("after bob's PASS: %s at %q; want CLOSED at the head bob was shown, %s", got.StateName, got.Head, shown)
		}
	})
}

// A session that continues the task its agent holds IN_PROGRESS, and whose
// process then does not start (a session_start hook that blocks it, a
// backend that fails to start), gives back its mail and nothing of the
// task: the agent keeps the task it has been working on, its next session
// continues it. Only the task the session's own begin started goes back.
func TestReleaseKeepsAContinuedTask(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "parser"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.board.Claim(ctx, tk.ID, "alice", "alice-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-1", Seq: 1, Started: time.Now(), Task: tk.ID}, nil); err != nil {
			t.Fatal(err)
		}
		// alice-1 ends without a report; alice-2's prompt continues the task.
		if err := e.board.Continue(ctx, tk.ID, "alice", "alice-2"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-2", Seq: 2, Started: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.s.Release(ctx, runner.Unstarted{SessionID: "alice-2"}, nil); err != nil {
			t.Fatal(err)
		}
		if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" || got.Claimant != "alice" {
			t.Errorf("continued task after its session's Release: %s held by %q; want IN_PROGRESS, alice", got.StateName, got.Claimant)
		}
	})
}
