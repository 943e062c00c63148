package settle_test

import (
	"context"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// cutEnv is a PostgreSQL env whose store is reached through a proxy that
// can drop a COMMIT's answer.
func cutEnv(t *testing.T) (*env, *pgtest.Proxy) {
	t.Helper()
	srv := pgtest.Shared(t)
	name := srv.NewDB(t, "settle")
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return openEnv(t, p.URL(name)), p
}

// TestGaveUpToldWhenTheVerdictsCommitAnswerIsLost: a reviewer's FAIL at
// max_iterations leaves its task FAILED for good, and the operator is told
// (Settler.GaveUp). When the answer to that settlement's COMMIT is lost,
// the retry finds the session settled already: the task is FAILED all the
// same, and the operator must be told all the same, once.
func TestGaveUpToldWhenTheVerdictsCommitAnswerIsLost(t *testing.T) {
	e, p := cutEnv(t)
	ctx := context.Background()
	told := e.toldOfGaveUp(t)
	// alice's DONE on a task reviewed by bob, then bob's FAIL on it, the
	// answer to its settlement's COMMIT lost; the task as it is after.
	verdictCut := func(seq uint32, maxIterations int) taskboard.Task {
		t.Helper()
		tk, verdict := e.failAwaited(t, seq, maxIterations, "")
		cuts := p.Cuts()
		p.CutNextCommitAfter("review_rounds")
		waits := 0
		if _, err := e.s.Settle(ctx, verdict, func(error) { waits++ }); err != nil {
			t.Fatal(err)
		}
		if p.Cuts() != cuts+1 || waits == 0 {
			t.Fatalf("%d commits cut, %d waits: the settlement's answer was not lost", p.Cuts()-cuts, waits)
		}
		return e.task(t, tk)
	}
	if got := verdictCut(1, 1); got.StateName != "FAILED" || len(*told) != 1 || (*told)[0] != got.ID {
		t.Fatalf("after the failing verdict at max_iterations 1, its commit's answer lost: %s, told %v; want FAILED, told once", got.StateName, *told)
	}
	// A FAIL with rounds left sends the task back: nothing to tell.
	if got := verdictCut(2, 2); got.StateName != "OPEN" || len(*told) != 1 {
		t.Fatalf("after a failing verdict with a round left, its commit's answer lost: %s, told %v; want OPEN, told nothing more", got.StateName, *told)
	}
}

// TestGaveUpToldWhenARecoveredVerdictsCommitAnswerIsLost: restart
// recovery applying a reviewer's FAIL at max_iterations from its log, the
// answer to that COMMIT lost, finds the session settled at its retry; the
// operator is told all the same, once, as Settle tells it.
func TestGaveUpToldWhenARecoveredVerdictsCommitAnswerIsLost(t *testing.T) {
	e, p := cutEnv(t)
	ctx := context.Background()
	told := e.toldOfGaveUp(t)
	tk := e.verdictInTheLog(t, 1, 1)
	cuts := p.Cuts()
	p.CutNextCommitAfter("review_rounds")
	recs, err := e.s.Recover(ctx, []string{"bob"})
	if err != nil || len(recs) != 1 || !recs[0].Result.Already {
		t.Fatalf("Recover = %+v, %v; want bob's verdict, found settled at the retry", recs, err)
	}
	if p.Cuts() != cuts+1 {
		t.Fatalf("%d commits cut: the recovery's answer was not lost", p.Cuts()-cuts)
	}
	if got := e.task(t, tk); got.StateName != "FAILED" || len(*told) != 1 || (*told)[0] != tk {
		t.Fatalf("after the recovered verdict, its commit's answer lost: %s, told %v; want FAILED, told once", got.StateName, *told)
	}
}

// A session's begin whose COMMIT's answer is lost is tried again: the
// session's row is found its own, the task its begin started is
// IN_PROGRESS once, with one start event.
func TestBeginWhoseCommitAnswerIsLostStartsItsTaskOnce(t *testing.T) {
	e, p := cutEnv(t)
	ctx := context.Background()
	tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "parser"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.board.Claim(ctx, tk.ID, "alice", "alice-1"); err != nil {
		t.Fatal(err)
	}
	cuts := p.Cuts()
	p.CutNextCommitAfter("IN_PROGRESS")
	waits := 0
	if _, err := e.s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: "alice-1", Seq: 1, Started: time.Now(), Task: tk.ID},
		func(error) { waits++ }); err != nil {
		t.Fatal(err)
	}
	if p.Cuts() != cuts+1 || waits == 0 {
		t.Fatalf("%d commits cut, %d waits: the begin's answer was not lost", p.Cuts()-cuts, waits)
	}
	if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" || got.ClaimSession != "alice-1" {
		t.Fatalf("task %s, claim %q; want IN_PROGRESS, alice-1", got.StateName, got.ClaimSession)
	}
	evs, err := e.db.Events(ctx, store.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, ev := range evs {
		if ev.TaskID == tk.ID && ev.To == "IN_PROGRESS" {
			started++
		}
	}
	if started != 1 {
		t.Errorf("%d start events, want 1", started)
	}
}
