package settle_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/settle"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// errBroken is a refusal no retry passes and no known refusal of the
// board's (taskboard.ErrState, ErrNotHolder, ErrInvalid): a constraint, a
// value out of range, a bug in one part of the settlement.
var errBroken = errors.New("injected: the board cannot take this, ever")

// brokenBoard is the task board with some of its settlement's writes
// failing for good.
type brokenBoard struct {
	settle.Tasks
	report  bool  // a worker's DONE and FAIL, a reviewer's verdict
	read    bool  // the read that goes with a DONE's settlement
	keep    bool  // the task's work head
	unclaim bool  // the return of what a session that never started claimed
	err     error // what they fail with; nil: errBroken
}

// refusal is what b's broken writes fail with.
func (b brokenBoard) refusal() error {
	if b.err != nil {
		return b.err
	}
	return errBroken
}

func (b brokenBoard) DoneTx(ctx context.Context, tx *sql.Tx, id int64, h taskboard.Holder, summary, head string) error {
	if b.report {
		return b.refusal()
	}
	return b.Tasks.DoneTx(ctx, tx, id, h, summary, head)
}

func (b brokenBoard) DoneReadTx(ctx context.Context, tx *sql.Tx, t taskboard.Task, h taskboard.Holder, summary, head string) error {
	if b.report {
		return b.refusal()
	}
	return b.Tasks.DoneReadTx(ctx, tx, t, h, summary, head)
}

func (b brokenBoard) FailTx(ctx context.Context, tx *sql.Tx, id int64, h taskboard.Holder, reason string) error {
	if b.report {
		return b.refusal()
	}
	return b.Tasks.FailTx(ctx, tx, id, h, reason)
}

func (b brokenBoard) VerdictTx(ctx context.Context, tx *sql.Tx, id int64, reviewer, head string, pass bool, feedback string) (taskboard.Task, error) {
	if b.report {
		return taskboard.Task{}, b.refusal()
	}
	return b.Tasks.VerdictTx(ctx, tx, id, reviewer, head, pass, feedback)
}

func (b brokenBoard) ReadTx(ctx context.Context, tx *sql.Tx, id int64) (taskboard.Task, error) {
	if b.read {
		return taskboard.Task{}, b.refusal()
	}
	return b.Tasks.ReadTx(ctx, tx, id)
}

func (b brokenBoard) KeepWorkTx(ctx context.Context, tx *sql.Tx, id int64, h taskboard.Holder, head string) error {
	if b.keep {
		return b.refusal()
	}
	return b.Tasks.KeepWorkTx(ctx, tx, id, h, head)
}

func (b brokenBoard) UnclaimTx(ctx context.Context, tx *sql.Tx, session string, started int64) error {
	if b.unclaim {
		return b.refusal()
	}
	return b.Tasks.UnclaimTx(ctx, tx, session, started)
}

// observe sends e's settler's log to a recorder.
func observe(e *env) *observer.ObservedLogs {
	core, rec := observer.New(zapcore.InfoLevel)
	e.s.Logger = zap.New(core)
	return rec
}

// settledAt is session id's settled_at ("" unsettled).
func settledAt(t *testing.T, e *env, id string) string {
	t.Helper()
	var at sql.NullString
	err := e.db.InTx(context.Background(), "read settled_at", func(tx *sql.Tx) error {
		return tx.QueryRowContext(context.Background(), `SELECT settled_at FROM sessions WHERE session_id = ?`, id).Scan(&at)
	})
	if err != nil {
		t.Fatal(err)
	}
	return at.String
}

// inPartEvents are the EventSettledInPart events of session id.
func inPartEvents(t *testing.T, e *env, id string) []store.EventRecord {
	t.Helper()
	evs, err := e.db.Events(context.Background(), store.EventQuery{Agent: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.EventRecord
	for _, ev := range evs {
		if ev.Event == store.EventSettledInPart && ev.SessionID == id {
			out = append(out, ev)
		}
	}
	return out
}

// errorLines are the error lines logged about session id.
func errorLines(rec *observer.ObservedLogs, id string) []observer.LoggedEntry {
	var out []observer.LoggedEntry
	for _, l := range rec.FilterLevelExact(zapcore.ErrorLevel).All() {
		if l.ContextMap()["session"] == id {
			out = append(out, l)
		}
	}
	return out
}

// A session's outcome the store refuses for good, for a reason that is
// not one of the board's known refusals, is recorded in part: the
// session's row settled once with its end and its spend, its mail
// acknowledged (it completed), its task's work head kept so that its
// next session goes on from its commits, the task otherwise untouched and
// still its agent's, why in an event and an error line. Settling it again
// (a retry that did not see the commit) applies nothing. Without the
// part the session stayed unsettled for the whole run, its mail shown
// again as new.
func TestOutcomeRefusedForGoodIsSettledInPart(t *testing.T) {
	const head = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name     string
		keep     bool   // the work head is refused too
		result   string // the session's result
		wantHead string
	}{
		{"done", false, "did it\nDONE", head},
		{"fail", false, "cannot\nFAIL", head},
		{"done, work head refused too", true, "did it\nDONE", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onBoth(t, func(t *testing.T, e *env, _ bool) {
				ctx := context.Background()
				logged := observe(e)
				tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
					t.Fatal(err)
				}
				s := e.begin(t, 1)
				if s.task != tk.ID || s.mail != 1 {
					t.Fatalf("session carried task %d and %d messages", s.task, s.mail)
				}
				e.s.Tasks = brokenBoard{Tasks: e.board, report: true, keep: tc.keep}
				st := s.ended(tc.result)
				st.Session.HeadAfter = head
				st.Session.Result.Usage.CostUSD = 0.25

				sr, err := e.s.Settle(ctx, st, nil)
				if err != nil || !sr.Signalled {
					t.Fatalf("Settle = %+v, %v; want the session settled, signalled", sr, err)
				}
				if open := unsettledIDs(t, e); len(open) != 0 {
					t.Fatalf("unsettled %v", open)
				}
				rows, err := e.db.Sessions(ctx, "alice", 0)
				if err != nil || len(rows) != 1 {
					t.Fatalf("sessions %+v, %v", rows, err)
				}
				if r := rows[0]; r.Outcome != store.OutcomeSuccess || r.Ended == nil || r.CostUSD != 0.25 || r.HeadAfter != head {
					t.Errorf("row: outcome %q, ended %v, cost %v, head after %q; want success, ended, 0.25, %s", r.Outcome, r.Ended, r.CostUSD, r.HeadAfter, head)
				}
				settled := settledAt(t, e, s.id)
				all, err := e.mail.Inbox(ctx, "alice", true)
				if err != nil || len(all) != 1 || all[0].DeliveredAt == nil || all[0].ClaimedSession != s.id {
					t.Fatalf("mail %+v, %v; want the message acknowledged by %s", all, err, s.id)
				}
				got := e.task(t, tk.ID)
				if got.StateName != "IN_PROGRESS" || got.Claimant != "alice" || got.Result != "" || got.WorkHead != tc.wantHead {
					t.Errorf("task: %s held by %q, result %q, work head %q; want IN_PROGRESS with alice, no result, work head %q",
						got.StateName, got.Claimant, got.Result, got.WorkHead, tc.wantHead)
				}
				evs := inPartEvents(t, e, s.id)
				if len(evs) != 1 || !strings.Contains(evs[0].Reason, errBroken.Error()) {
					t.Fatalf("events %+v; want one %s saying why", evs, store.EventSettledInPart)
				}
				if lines := errorLines(logged, s.id); len(lines) == 0 {
					t.Error("no error line about the session")
				}

				// Again, as a retry whose attempt committed unseen.
				e.s.Tasks = e.board
				if r, err := e.s.Apply(ctx, e.s.RecordOf(st)); err != nil || !r.Already {
					t.Fatalf("Apply again = %+v, %v; want the session settled already", r, err)
				}
				e.s.Tasks = brokenBoard{Tasks: e.board, report: true, keep: tc.keep}
				if _, err := e.s.Settle(ctx, st, nil); err != nil {
					t.Fatal(err)
				}
				if at := settledAt(t, e, s.id); at != settled {
					t.Errorf("settled_at %q then %q: settled twice", settled, at)
				}
				if evs := inPartEvents(t, e, s.id); len(evs) != 1 {
					t.Errorf("%d events after settling again, want 1", len(evs))
				}
				if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" {
					t.Errorf("task %s after settling again", got.StateName)
				}
			})
		})
	}
}

// A session that did not complete and whose outcome is refused for good
// (its work head's write, here) leaves its mail pending with its note, as
// the whole outcome would have.
func TestIncompleteSessionRefusedForGoodNotesItsMail(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		if _, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
			t.Fatal(err)
		}
		s := e.begin(t, 1)
		e.s.Tasks = brokenBoard{Tasks: e.board, keep: true}
		st := s.ended("half way")
		st.Completed, st.Note = false, "that session timed out"
		st.Session.HeadAfter = "0123456789abcdef0123456789abcdef01234567"
		if sr, err := e.s.Settle(ctx, st, nil); err != nil || sr.Signalled {
			t.Fatalf("Settle = %+v, %v", sr, err)
		}
		if open := unsettledIDs(t, e); len(open) != 0 {
			t.Fatalf("unsettled %v", open)
		}
		pending, err := e.mail.Inbox(ctx, "alice", false)
		if err != nil || len(pending) != 1 || pending[0].ShownNote != st.Note {
			t.Fatalf("pending %+v, %v; want the message pending with the note %q", pending, err, st.Note)
		}
		if evs := inPartEvents(t, e, s.id); len(evs) != 1 {
			t.Fatalf("events %+v, want one", evs)
		}
	})
}

// The order of the attempts: the whole outcome committed, its answer lost,
// and the retry refused for good before it could see that (the read of
// the task that goes with a DONE's settlement fails): the part finds the
// session settled and records nothing twice, neither the row nor the mail
// nor an event.
func TestInPartAfterAnUnseenCommitAppliesNothing(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
			t.Fatal(err)
		}
		s := e.begin(t, 1)
		st := s.ended("did it\nDONE")
		if r, err := e.s.Apply(ctx, e.s.RecordOf(st)); err != nil || r.Acked != 1 {
			t.Fatalf("the first commit: %+v, %v", r, err) // unseen by Settle below
		}
		settled := settledAt(t, e, s.id)
		e.s.Tasks = brokenBoard{Tasks: e.board, read: true}
		if sr, err := e.s.Settle(ctx, st, nil); err != nil || !sr.Signalled {
			t.Fatalf("Settle = %+v, %v", sr, err)
		}
		if at := settledAt(t, e, s.id); at != settled {
			t.Errorf("settled_at %q then %q: settled twice", settled, at)
		}
		if evs := inPartEvents(t, e, s.id); len(evs) != 0 {
			t.Errorf("events %+v: the part recorded over a whole outcome", evs)
		}
		if got := e.task(t, tk.ID); got.StateName != "CLOSED" {
			t.Errorf("task %s, want CLOSED by the first commit", got.StateName)
		}
	})
}

// The part's own commit, its answer lost (PostgreSQL): its retry finds the
// session settled, and records it once.
func TestInPartWhoseCommitAnswerIsLostIsRecordedOnce(t *testing.T) {
	e, p := cutEnv(t)
	ctx := context.Background()
	logged := observe(e)
	tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	s := e.begin(t, 1)
	e.s.Tasks = brokenBoard{Tasks: e.board, report: true}
	cuts := p.Cuts()
	p.CutNextCommitAfter(store.EventSettledInPart)
	waits := 0
	if _, err := e.s.Settle(ctx, s.ended("did it\nDONE"), func(error) { waits++ }); err != nil {
		t.Fatal(err)
	}
	if p.Cuts() != cuts+1 || waits == 0 {
		t.Fatalf("%d commits cut, %d waits: the part's answer was not lost", p.Cuts()-cuts, waits)
	}
	if open := unsettledIDs(t, e); len(open) != 0 {
		t.Fatalf("unsettled %v", open)
	}
	if evs := inPartEvents(t, e, s.id); len(evs) != 1 {
		t.Fatalf("events %+v, want one", evs)
	}
	if pending, err := e.mail.Inbox(ctx, "alice", false); err != nil || len(pending) != 0 {
		t.Fatalf("pending mail %+v, %v", pending, err)
	}
	if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" {
		t.Fatalf("task %s, want IN_PROGRESS", got.StateName)
	}
	if len(errorLines(logged, s.id)) == 0 {
		t.Error("no error line about the session")
	}
}

// Restart recovery records in part, as a running daemon does, an outcome
// in a session's log that the store refuses for good: the session gets
// its own end and spend and its mail acknowledged, rather than being
// closed as orphaned (its mail shown again with a false note, its cost
// lost).
func TestRecoverRecordsInPartAnOutcomeRefusedForGood(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		logged := observe(e)
		tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
			t.Fatal(err)
		}
		s := e.begin(t, 1)
		st := s.ended("did it\nDONE")
		st.Session.Result.Usage.CostUSD = 0.5
		b, err := json.Marshal(e.s.RecordOf(st))
		if err != nil {
			t.Fatal(err)
		}
		if err := logs.AppendOutcome(s.log, b); err != nil {
			t.Fatal(err)
		}
		e.s.Tasks = brokenBoard{Tasks: e.board, report: true}
		recs, err := e.s.Recover(ctx, []string{"alice"})
		if err != nil || len(recs) != 1 || recs[0].Session.SessionID != s.id || !errors.Is(recs[0].Result.Refused, errBroken) || recs[0].Result.Acked != 1 {
			t.Fatalf("Recover = %+v, %v; want session 1 recorded in part, its message acknowledged", recs, err)
		}
		if open := unsettledIDs(t, e); len(open) != 0 {
			t.Fatalf("unsettled %v: left to the orphan pass", open)
		}
		rows, err := e.db.Sessions(ctx, "alice", 0)
		if err != nil || len(rows) != 1 || rows[0].Outcome != store.OutcomeSuccess || rows[0].CostUSD != 0.5 {
			t.Fatalf("sessions %+v, %v; want session 1 a success costing 0.5", rows, err)
		}
		if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" || got.Claimant != "alice" {
			t.Fatalf("task %s held by %q", got.StateName, got.Claimant)
		}
		if evs := inPartEvents(t, e, s.id); len(evs) != 1 {
			t.Fatalf("events %+v, want one", evs)
		}
		if len(errorLines(logged, s.id)) == 0 {
			t.Error("no error line about the session")
		}
		if recs, err := e.s.Recover(ctx, []string{"alice"}); err != nil || len(recs) != 0 {
			t.Fatalf("second Recover = %+v, %v; want nothing left", recs, err)
		}
	})
}

// brokenMail is the mailbox with its acknowledgements of session's
// (every session's if "") failing for good.
type brokenMail struct {
	settle.Mail
	session string
}

func (m brokenMail) AckTx(ctx context.Context, tx *sql.Tx, session string, ended time.Time) (int, error) {
	if m.session == "" || m.session == session {
		return 0, errBroken
	}
	return m.Mail.AckTx(ctx, tx, session, ended)
}

// When the part is refused for good too (the mail's acknowledgement,
// here), Settle gives up as it did before there was a part: an error,
// logged, the session left unsettled and nothing of its outcome applied.
func TestRefusedEvenInPartIsAnError(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		logged := observe(e)
		if _, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
			t.Fatal(err)
		}
		s := e.begin(t, 1)
		e.s.Mail = brokenMail{Mail: e.mail}
		if _, err := e.s.Settle(ctx, s.ended("did it\nDONE"), nil); !errors.Is(err, errBroken) {
			t.Fatalf("Settle = %v, want the refusal", err)
		}
		if open := unsettledIDs(t, e); len(open) != 1 {
			t.Fatalf("unsettled %v, want the session", open)
		}
		if evs := inPartEvents(t, e, s.id); len(evs) != 0 {
			t.Fatalf("events %+v, want none", evs)
		}
		if len(errorLines(logged, s.id)) == 0 {
			t.Error("no error line about the session")
		}
	})
}

// errEngine is an error of the database engine (an I/O error), not a
// refusal of the outcome.
var errEngine = &pgconn.PgError{Code: "58030", Message: "could not write to file: injected"}

// An outcome that fails because the engine does (an I/O error) is not
// refused for good: it is not recorded in part, which would throw its
// task report away, but left unsettled, with the error, for the log's
// outbox and the next start once the engine is whole.
func TestEngineFaultIsNotSettledInPart(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env, _ bool) {
		ctx := context.Background()
		if _, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"}); err != nil {
			t.Fatal(err)
		}
		s := e.begin(t, 1)
		e.s.Tasks = brokenBoard{Tasks: e.board, report: true, err: errEngine}
		if _, err := e.s.Settle(ctx, s.ended("did it\nDONE"), nil); !errors.Is(err, errEngine) {
			t.Fatalf("Settle = %v, want the engine's error", err)
		}
		if open := unsettledIDs(t, e); len(open) != 1 {
			t.Fatalf("unsettled %v, want the session, for its outbox", open)
		}
		if evs := inPartEvents(t, e, s.id); len(evs) != 0 {
			t.Fatalf("events %+v: settled in part", evs)
		}
	})
}
