package settle_test

import (
	"context"
	"testing"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// BenchmarkSettle is one settlement of the common kind, on the real
// SQLite file: a session that completed its task with DONE and carried one
// message. Only Settle is timed (the session's begin and claims are not).
func BenchmarkSettle(b *testing.B) {
	e := sqliteEnv(b)
	ctx := context.Background()
	seq := uint32(0)
	for b.Loop() {
		b.StopTimer()
		seq++
		if _, err := e.board.Add(ctx, taskboard.NewTask{Title: "a task"}); err != nil {
			b.Fatal(err)
		}
		if _, err := e.mail.Send(ctx, mailbox.Draft{From: "bob", To: "alice", Subject: "hi", Body: "a message"}); err != nil {
			b.Fatal(err)
		}
		s := e.begin(b, seq)
		st := s.ended("did it\nDONE")
		b.StartTimer()
		if _, err := e.s.Settle(ctx, st, nil); err != nil {
			b.Fatal(err)
		}
	}
}
