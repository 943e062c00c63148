package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
)

// A session's text is the session's: its result, a tool call's input, a
// reason its backend gave, all read from its output, where a NUL is one
// JSON escape ("\u0000") away. SQLite stores it; PostgreSQL's text cannot
// hold one (invalid byte sequence, SQLSTATE 22021), a refusal no retry
// passes. Refused, it left the session's settlement failing for good (its
// row never settled, its outbox record failing every restart's recovery)
// and the journal's batch failing for good, kept and retried ahead of
// every event after it. Both engines take such text, the NUL made U+FFFD
// where the engine cannot hold it.
func TestTextWithANULIsStored(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { textWithANULIsStored(t, filepath.Join(t.TempDir(), "swarm.db")) })
	t.Run("postgres", func(t *testing.T) {
		srv := pgtest.Shared(t)
		if err := srv.CreateDB("nultext"); err != nil {
			t.Fatal(err)
		}
		textWithANULIsStored(t, srv.URL("nultext"))
	})
}

func textWithANULIsStored(t *testing.T, target string) {
	ctx := context.Background()
	db := openTest(t, target, Options{})
	nul := "before\x00after"
	now := time.Now()
	s := SessionRecord{SessionID: "alice-1-abc", Agent: "alice", Seq: 1, Started: now, LogPath: "/l/1"}
	if err := db.BeginSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	s.Ended, s.Outcome, s.ResultText, s.Reason = &now, OutcomeSuccess, nul, nul
	err := db.InTx(ctx, "settle", func(tx *sql.Tx) error {
		_, err := db.SettleSessionTx(ctx, tx, s, now)
		return err
	})
	if err != nil {
		t.Fatalf("settle a session whose result holds a NUL: %v", err)
	}
	if open, err := db.UnsettledSessions(ctx, nil); err != nil || len(open) != 0 {
		t.Fatalf("unsettled = %+v, %v", open, err)
	}
	j := startJournal(t, db, JournalOptions{FlushInterval: time.Millisecond})
	e := ev("alice", 1, "SessionExited")
	e.Reason = nul
	j.Event(e)
	j.ToolCall(ToolCallRecord{SessionID: s.SessionID, Agent: "alice", Seq: 1, Tool: "Bash", Input: nul, Started: now, Status: "ok"})
	j.Event(ev("alice", 2, "After"))
	if err := j.Flush(ctx); err != nil {
		t.Fatalf("journal flush of an event and a tool call holding a NUL: %v", err)
	}
	evs, err := db.Events(ctx, EventQuery{Agent: "alice"})
	if err != nil || len(evs) != 2 || evs[1].Event != "After" || !strings.HasPrefix(evs[0].Reason, "before") {
		t.Fatalf("events = %+v, %v; want both, in order", evs, err)
	}
	if n := countTable(t, db, "tool_calls"); n != 1 {
		t.Fatalf("%d tool calls, want 1", n)
	}
}
