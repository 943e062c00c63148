package settle_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/settle"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// With a merge queue the board refuses a worker's DONE that freezes no
// commit (taskboard.Options.FrozenHead): the worktree's HEAD could not be
// read when the session ended (the session broke its worktree, or left
// an orphan branch checked out). That refusal is the board's, as a report
// the fence refuses is: the session is settled all the same, its mail
// acknowledged once, the task left with its agent; and a daemon killed
// before the store took it recovers it at its next start instead of
// failing that start for good.
func TestDoneWithoutAHeadIsRefusedNotUnsettled(t *testing.T) {
	e := sqliteEnv(t)
	ctx := context.Background()
	e.board = taskboard.New(e.db, taskboard.Options{FrozenHead: true})
	e.s.Tasks = e.board
	tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
			t.Fatal(err)
		}
		s := e.begin(t, uint32(i+1))
		if i == 1 { // the next prompt continues the task alice holds
			if err := e.board.Continue(ctx, tk.ID, "alice", s.id); err != nil {
				t.Fatal(err)
			}
			s.task = tk.ID
		}
		if s.task != tk.ID || s.mail != 1 {
			t.Fatalf("session %d carried task %d and %d messages", i+1, s.task, s.mail)
		}
		st := s.ended("did it\nDONE") // HeadAfter "": HEAD unreadable
		if i == 0 {
			if _, err := e.s.Settle(ctx, st, nil); err != nil {
				t.Fatalf("Settle of a DONE the board refuses: %v", err)
			}
		} else {
			// The daemon dies once the outcome is in the log.
			b, err := json.Marshal(e.s.RecordOf(st))
			if err != nil {
				t.Fatal(err)
			}
			if err := logs.AppendOutcome(s.log, b); err != nil {
				t.Fatal(err)
			}
			recs, err := e.s.Recover(ctx, []string{"alice"})
			if err != nil || len(recs) != 1 {
				t.Fatalf("Recover = %+v, %v: a start would fail on this outcome for good", recs, err)
			}
		}
		if open := unsettledIDs(t, e); len(open) != 0 {
			t.Fatalf("after session %d: unsettled %v", i+1, open)
		}
		if pending, err := e.mail.Inbox(ctx, "alice", false); err != nil || len(pending) != 0 {
			t.Fatalf("after session %d: pending mail %+v, %v; want it acknowledged", i+1, pending, err)
		}
		if got := e.task(t, tk.ID); got.StateName != "IN_PROGRESS" || got.Claimant != "alice" {
			t.Fatalf("after session %d: task %s held by %q; want IN_PROGRESS with alice", i+1, got.StateName, got.Claimant)
		}
	}
}

func unsettledIDs(t *testing.T, e *env) []string {
	t.Helper()
	ss, err := e.db.UnsettledSessions(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range ss {
		ids = append(ids, s.SessionID)
	}
	return ids
}

// An outcome in a session's log that the store refuses for good, even in
// part (here a signal this version does not know, as a newer swarmd's
// record would be, and a mailbox that refuses the session's
// acknowledgement), must not fail every start: recovery leaves that
// session to the orphan pass, as one whose log holds no outcome, and
// applies the others.
func TestRecoverSkipsAnOutcomeTheStoreRefuses(t *testing.T) {
	e := sqliteEnv(t)
	ctx := context.Background()
	var recs []settle.Record
	for seq := uint32(1); seq <= 2; seq++ {
		if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
			t.Fatal(err)
		}
		s := e.begin(t, seq)
		rec := e.s.RecordOf(s.ended("DONE"))
		if seq == 1 {
			rec.Signal = "blocked" // not a signal this version has
		}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := logs.AppendOutcome(s.log, b); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	e.s.Mail = brokenMail{Mail: e.mail, session: recs[0].Session.SessionID}
	got, err := e.s.Recover(ctx, []string{"alice"})
	if err != nil {
		t.Fatalf("Recover = %v: the daemon's start fails on it, every time", err)
	}
	if len(got) != 1 || got[0].Session.SessionID != recs[1].Session.SessionID {
		t.Fatalf("recovered %+v, want only session 2", got)
	}
	if open := unsettledIDs(t, e); len(open) != 1 || open[0] != recs[0].Session.SessionID {
		t.Fatalf("unsettled %v, want session 1 alone, for the orphan pass", open)
	}
}

// An outcome a newer swarmd wrote (a signal this version does not know)
// is recorded in part: the session settled with its end, its mail
// acknowledged, the signal not applied.
func TestRecoverRecordsANewerOutcomeInPart(t *testing.T) {
	e := sqliteEnv(t)
	ctx := context.Background()
	if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	s := e.begin(t, 1)
	rec := e.s.RecordOf(s.ended("DONE"))
	rec.Signal = "blocked"
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := logs.AppendOutcome(s.log, b); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.Recover(ctx, []string{"alice"})
	if err != nil || len(got) != 1 || got[0].Result.Refused == nil || got[0].Result.Acked != 1 {
		t.Fatalf("Recover = %+v, %v; want session 1 recorded in part, its message acknowledged", got, err)
	}
	if open := unsettledIDs(t, e); len(open) != 0 {
		t.Fatalf("unsettled %v", open)
	}
}
