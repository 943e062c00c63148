package settle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// claimed is a task claimed for alice's session, as her prompt claims it.
func (e *env) claimed(t *testing.T, session string) int64 {
	t.Helper()
	ctx := context.Background()
	tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "parser"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.board.Claim(ctx, tk.ID, "alice", session); err != nil {
		t.Fatal(err)
	}
	return tk.ID
}

// neverStarted is the Unstarted the runner gives Release for alice's
// session begun at start, whose process did not start for why.
func neverStarted(session string, seq uint32, task int64, start time.Time, why string) runner.Unstarted {
	res := backend.Result{Outcome: backend.OutcomeError, Started: start, Ended: time.Now(), Reason: "never started: " + why}
	return runner.Unstarted{SessionID: session, Started: task, Ended: &runner.SessionRecord{Agent: "alice", SessionID: session, Seq: seq,
		Outcome: agent.ExitOutcome{Kind: agent.Error, Msg: res.Reason}, Result: res}}
}

// restarted runs what a daemon's next start runs before any agent:
// outcomes recovered from the logs, open sessions closed as orphaned,
// held tasks taken back; it returns the sessions closed and the tasks
// taken back as a crash's (a retry).
func (e *env) restarted(t *testing.T) (orphans []store.SessionRecord, orphaned []taskboard.Task) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.s.Recover(ctx, nil); err != nil {
		t.Fatal(err)
	}
	orphans, err := e.db.CloseOrphanSessions(ctx, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.board.Recover(ctx, taskboard.Recovery{Why: "swarmd restarted: the session working on it is gone"})
	if err != nil {
		t.Fatal(err)
	}
	return orphans, got.Orphaned
}

// row is session id's row.
func (e *env) row(t *testing.T, id string) store.SessionRecord {
	t.Helper()
	rows, err := e.db.Sessions(context.Background(), "alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.SessionID == id {
			return r
		}
	}
	t.Fatalf("no row of session %s", id)
	return store.SessionRecord{}
}

// reopened counts the events that sent task id back OPEN from a holder.
func (e *env) reopened(t *testing.T, id int64) int {
	t.Helper()
	evs, err := e.db.Events(context.Background(), store.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.TaskID == id && ev.To == "OPEN" && (ev.From == "CLAIMED" || ev.From == "IN_PROGRESS") {
			n++
		}
	}
	return n
}

// A begin whose commit's answer is lost, then a stop in the backoff
// before its retry: the runner gives the session up as never started and
// returns its claims, but the row was committed. Release closes it in the
// same step, as a session that never started, once (its own commit's
// answer lost too): neither `swarmd status` nor the next start sees a
// session running that never ran, nor charges its task a retry.
func TestReleaseClosesTheRowOfABeginGivenUpInDoubt(t *testing.T) {
	e, p := cutEnv(t)
	tk := e.claimed(t, "alice-1")
	if _, err := e.mail.Send(context.Background(), mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	if ms, err := e.mail.ConsumeForPrompt(context.Background(), "alice", "alice-1"); err != nil || len(ms) != 1 {
		t.Fatalf("claimed %d messages, %v", len(ms), err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	start := time.Now()
	cuts := p.Cuts()
	p.CutNextCommitAfter("IN_PROGRESS")
	_, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-1", Seq: 1, Started: start, Task: tk},
		func(error) { stop() }) // the stop comes in the backoff
	if !errors.Is(err, context.Canceled) || p.Cuts() != cuts+1 {
		t.Fatalf("Begin = %v after %d cuts; want its answer lost, then cut short by the stop", err, p.Cuts()-cuts)
	}
	if open := unsettledIDs(t, e); len(open) != 1 {
		t.Fatalf("unsettled %v: the begin's commit did not take, the test proves nothing", open)
	}
	p.CutNextCommitAfter("claimed_session = NULL") // the release's own answer lost
	waits := 0
	if err := e.s.Release(context.Background(), neverStarted("alice-1", 1, tk, start, "stopped"), func(error) { waits++ }); err != nil {
		t.Fatal(err)
	}
	if p.Cuts() != cuts+2 || waits == 0 {
		t.Fatalf("%d commits cut, %d waits: the release's answer was not lost", p.Cuts()-cuts, waits)
	}
	if open := unsettledIDs(t, e); len(open) != 0 {
		t.Fatalf("unsettled %v after the claims went back: a session shown running that never ran", open)
	}
	if r := e.row(t, "alice-1"); r.Outcome != store.OutcomeError || !strings.HasPrefix(r.Reason, "never started: ") || r.Ended == nil {
		t.Errorf("row %s, %q; want closed as an error that never started", r.Outcome, r.Reason)
	}
	if got := e.task(t, tk); got.StateName != "OPEN" || got.Retries != 0 || e.reopened(t, tk) != 1 {
		t.Errorf("task %s, %d retries, sent back OPEN %d times; want OPEN once, no retry", got.StateName, got.Retries, e.reopened(t, tk))
	}
	if orphans, orphaned := e.restarted(t); len(orphans) != 0 || len(orphaned) != 0 {
		t.Errorf("the next start closed %+v as orphaned and took back %+v as a crash's", orphans, orphaned)
	}
	// Shown to no session: pending as before, with no note of a crash.
	if ms, err := e.mail.Inbox(context.Background(), "alice", false); err != nil || len(ms) != 1 || ms[0].ClaimedSession != "" || ms[0].ShownNote != "" {
		t.Errorf("inbox %+v, %v; want the message pending, unclaimed, with no note", ms, err)
	}
}

// Release closes a row only if a begin made it, and only once: a begin
// given up may have made none, and a row made for it would hold its seq
// for a session that never used it.
func TestReleaseClosesARowOnlyIfABeginMadeIt(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		start := time.Now()
		if err := e.s.Release(ctx, neverStarted("alice-1", 1, 0, start, "stopped"), nil); err != nil {
			t.Fatal(err)
		}
		if rows, err := e.db.Sessions(ctx, "alice", 0); err != nil || len(rows) != 0 {
			t.Fatalf("rows %+v, %v after the release of a session no begin made; want none", rows, err)
		}
		if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-2", Seq: 1, Started: start}, nil); err != nil {
			t.Fatalf("the next session's begin at the seq no session used: %v", err)
		}
		u := neverStarted("alice-2", 1, 0, start, "exec: no such file")
		if err := e.s.Release(ctx, u, nil); err != nil {
			t.Fatal(err)
		}
		first := settledAt(t, e, "alice-2")
		if first == "" {
			t.Fatal("alice-2 not closed by its release")
		}
		u.Ended.Result.Reason = "never started: again"
		if err := e.s.Release(ctx, u, nil); err != nil {
			t.Fatal(err)
		}
		if at, r := settledAt(t, e, "alice-2"), e.row(t, "alice-2"); at != first || r.Reason != "never started: exec: no such file" {
			t.Errorf("after a second release: settled at %q (first %q), reason %q; want the first's alone", at, first, r.Reason)
		}
	})
}

// The row of a session that never started and the claims it leaves go
// back in one transaction: a failure in the task's return, the last of the
// step's writes (as a daemon killed there), leaves the row open too. Two
// transactions left it closed with its task IN_PROGRESS, which the next
// start took back as a crash's: a retry for a session that never ran.
func TestReleaseClosesTheRowWithItsClaimsOrNotAtAll(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		tk := e.claimed(t, "alice-1")
		start := time.Now()
		if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-1", Seq: 1, Started: start, Task: tk}, nil); err != nil {
			t.Fatal(err)
		}
		u := neverStarted("alice-1", 1, tk, start, "exec: no such file")
		e.s.Tasks = brokenBoard{Tasks: e.board, unclaim: true}
		if err := e.s.Release(ctx, u, nil); !errors.Is(err, errBroken) {
			t.Fatalf("Release = %v, want the task's return refused", err)
		}
		if open, got := unsettledIDs(t, e), e.task(t, tk); len(open) != 1 || got.StateName != "IN_PROGRESS" {
			t.Fatalf("after a release that failed: unsettled %v, task %s; want both as the begin left them", open, got.StateName)
		}
		e.s.Tasks = e.board
		if err := e.s.Release(ctx, u, nil); err != nil {
			t.Fatal(err)
		}
		if open := unsettledIDs(t, e); len(open) != 0 {
			t.Fatalf("unsettled %v after the release", open)
		}
		if got := e.task(t, tk); got.StateName != "OPEN" || got.Retries != 0 {
			t.Errorf("task %s, %d retries; want OPEN, no retry", got.StateName, got.Retries)
		}
		if orphans, orphaned := e.restarted(t); len(orphans) != 0 || len(orphaned) != 0 {
			t.Errorf("the next start closed %+v as orphaned and took back %+v as a crash's", orphans, orphaned)
		}
	})
}
