package taskboard

import (
	"context"
	"errors"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/task"
)

// TestReserveKeepsIDsFromNewTasks: a reserved id is CANCELLED with its
// reason, and the next task added is numbered after it, on both engines
// (PostgreSQL's identity does not move for an id given explicitly).
func TestReserveKeepsIDsFromNewTasks(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			ctx := context.Background()
			path := ""
			if engine == "postgres" {
				srv := pgtest.Shared(t)
				path = srv.URL(srv.NewDB(t, "reserve"))
			}
			b, _ := openBoard(t, path, Options{})
			first := add(t, b, NewTask{Title: "before the backup"})
			r, err := b.Reserve(ctx, first.ID+5, "its line swarm/task/N is in the repository")
			if err != nil {
				t.Fatal(err)
			}
			if r.State != task.Cancelled || r.Result != "its line swarm/task/N is in the repository" {
				t.Fatalf("reserved = %s %q, want CANCELLED with the reason", r.State, r.Result)
			}
			next := add(t, b, NewTask{Title: "after the restore"})
			if got, want := next.ID, first.ID+6; got != want {
				t.Fatalf("next task id = %d, want %d (after the reserved one)", got, want)
			}
			if _, err := b.Reserve(ctx, first.ID, "x"); !errors.Is(err, ErrState) {
				t.Fatalf("reserve of a task on the board: %v, want ErrState", err)
			}
			if _, err := b.Reserve(ctx, first.ID+9, "two\nlines"); !errors.Is(err, ErrInvalid) {
				t.Fatalf("reserve with a two-line reason: %v, want ErrInvalid", err)
			}
			h, err := b.History(ctx, r.ID)
			if err != nil || len(h) != 1 {
				t.Fatalf("history of the reserved id = %v, %v; want its one event", h, err)
			}
			_, _, counts, err := b.Board(ctx, 5)
			if err != nil {
				t.Fatal(err)
			}
			if counts[task.Cancelled] != 1 {
				t.Fatalf("cancelled count = %d, want 1 (the counts' triggers saw it)", counts[task.Cancelled])
			}
		})
	}
}
