package settle_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/swarmd/swarmd/internal/settle"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// outOfMemoryOnce is the task board on a server that runs out of memory
// (or of the shared memory its locks take) once, at the first DONE.
type outOfMemoryOnce struct {
	settle.Tasks
	failed *bool
}

func (b outOfMemoryOnce) DoneTx(ctx context.Context, tx *sql.Tx, id int64, h taskboard.Holder, summary, head string) error {
	if !*b.failed {
		*b.failed = true
		return fmt.Errorf("taskboard: task %d to DONE: %w", id, &pgconn.PgError{Severity: "ERROR", Code: "53200", Message: "out of shared memory"})
	}
	return b.Tasks.DoneTx(ctx, tx, id, h, summary, head)
}

func (b outOfMemoryOnce) DoneReadTx(ctx context.Context, tx *sql.Tx, t taskboard.Task, h taskboard.Holder, summary, head string) error {
	if !*b.failed {
		*b.failed = true
		return fmt.Errorf("taskboard: task %d to DONE: %w", t.ID, &pgconn.PgError{Severity: "ERROR", Code: "53200", Message: "out of shared memory"})
	}
	return b.Tasks.DoneReadTx(ctx, tx, t, h, summary, head)
}

// A server short of memory refuses a transaction for now, not the
// outcome for good: the whole outcome is retried and its DONE applied,
// not settled in part without it.
func TestServerOutOfMemoryIsWaitedOut(t *testing.T) {
	e := sqliteEnv(t)
	ctx := context.Background()
	tk, err := e.board.Add(ctx, taskboard.NewTask{Title: "one"})
	if err != nil {
		t.Fatal(err)
	}
	s := e.begin(t, 1)
	failed := false
	e.s.Tasks = outOfMemoryOnce{Tasks: e.board, failed: &failed}
	waits := 0
	if _, err := e.s.Settle(ctx, s.ended("did it\nDONE"), func(error) { waits++ }); err != nil {
		t.Fatal(err)
	}
	if !failed || waits == 0 {
		t.Fatalf("refused %v, %d waits: the refusal was not waited out", failed, waits)
	}
	if got := e.task(t, tk.ID); got.StateName != "DONE" && got.StateName != "CLOSED" {
		t.Errorf("task %s, want the DONE applied", got.StateName)
	}
	if evs := inPartEvents(t, e, s.id); len(evs) != 0 {
		t.Errorf("settled in part: %+v", evs)
	}
}
