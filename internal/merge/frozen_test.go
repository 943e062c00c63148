package merge

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// boardHooks are the daemon's callbacks and staleness check on a real
// task board (internal/daemon/mergewire.go), as far as the board goes.
type boardHooks struct{ b *taskboard.Board }

func (h boardHooks) OnMerged(ctx context.Context, e Entry, commit string) error {
	if _, err := h.b.Merged(ctx, e.Task, e.Head, commit); err != nil && !errors.Is(err, taskboard.ErrState) {
		return err
	}
	return nil
}

func (h boardHooks) OnRejected(ctx context.Context, e Entry, kind Kind, detail string) error {
	if _, _, err := h.b.Rejected(ctx, e.Task, e.Head, "the merge queue rejected it: "+string(kind), detail, 5); err != nil &&
		!errors.Is(err, taskboard.ErrState) {
		return err
	}
	return nil
}

func (h boardHooks) stale(ctx context.Context, e Entry) (string, error) {
	err := h.b.Mergeable(ctx, e.Task, e.Head)
	if errors.Is(err, taskboard.ErrState) || errors.Is(err, taskboard.ErrNotFound) {
		return strings.TrimSuffix(err.Error(), ": "+taskboard.ErrState.Error()), nil
	}
	return "", err
}

// TestRetryOfAReworkedTaskIsNotMerged: a task rejected at commit A (a
// flaky gate), reworked by its worker and reported done at B, is the work
// at B. The operator's `merge retry` of the rejected entry is refused,
// naming the task, its state and both heads; an entry at A that reaches
// the queue all the same (a retry with no check, as before) is dropped
// before its gate: the task is neither closed on A nor sent back. B is
// reviewed, then merged as usual, and closes the task.
func TestRetryOfAReworkedTaskIsNotMerged(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { retryOfAReworkedTask(t, nil) })
	t.Run("postgres", func(t *testing.T) {
		srv := pgtest.Shared(t)
		dbName := srv.NewDB(t, "frozen")
		db, err := store.Open(context.Background(), srv.URL(dbName), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		retryOfAReworkedTask(t, db) // the env closes it
	})
}

func retryOfAReworkedTask(t *testing.T, db *store.DB) {
	e := newEnv(t)
	if db != nil {
		e.db.Close()
		e.db = db
	}
	ctx := context.Background()
	board := taskboard.New(e.db, taskboard.Options{FrozenHead: true}) // a merge queue closes tasks
	hooks := boardHooks{board}
	// A flaky gate: red on its first run, green after.
	flag := filepath.Join(t.TempDir(), "ran-once")
	opts := e.options(`if [ -f "` + flag + `" ]; then exit 0; fi; touch "` + flag + `"; exit 1`)
	opts.Callbacks, opts.Stale = hooks, hooks.stale
	q := e.open(opts)

	tk, err := board.Add(ctx, taskboard.NewTask{Title: "the parser", Reviewer: "rita"})
	if err != nil {
		t.Fatal(err)
	}
	alice := e.worker("alice")
	done := func(session, head string) {
		t.Helper()
		h := taskboard.Holder{Agent: "alice", Session: session}
		if _, err := board.Claim(ctx, tk.ID, "alice", session); err != nil {
			t.Fatal(err)
		}
		if _, err := board.DoneAt(ctx, tk.ID, h, "done", head); err != nil {
			t.Fatal(err)
		}
	}
	pass := func(head string) {
		t.Helper()
		if _, err := board.Verdict(ctx, tk.ID, "rita", head, true, "PASS"); err != nil {
			t.Fatal(err)
		}
	}
	a := commitFile(t, alice, "parser.go", "package parser // A\n", "A")
	done("alice-1-a", a)
	pass(a)
	if _, err := q.Enqueue(ctx, tk.ID, "alice", "swarm/alice/work", a); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeRejected) // the flaky gate's red run: back to alice
	if got := get(t, board, tk.ID); got.State != task.Open {
		t.Fatalf("task after the rejection: %s, want OPEN (back to its worker)", got.State)
	}

	// alice reworks it and reports it done at B; rita has not looked yet.
	b := commitFile(t, alice, "parser.go", "package parser // B\n", "B")
	done("alice-2-a", b)

	// The operator retries the rejected entry at A: refused, in one line.
	st := NewStore(e.db, nil)
	_, err = st.Retry(ctx, tk.ID, "operator", func(ctx context.Context, tx *sql.Tx, e Entry) error {
		return board.MergeableTx(ctx, tx, e.Task, e.Head)
	})
	if !errors.Is(err, taskboard.ErrState) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "task 1 is DONE at frozen head "+b[:12]+", not at "+a[:12]) {
		t.Fatalf("merge retry of the stale entry: %v; want refused naming the task, its state and both heads", err)
	}
	if _, err := q.Retry(ctx, tk.ID); !errors.Is(err, ErrState) {
		t.Fatalf("Queue.Retry of the stale entry: %v; want ErrState", err)
	}

	// An entry at A in the queue all the same is dropped before any gate.
	if _, err := st.Retry(ctx, tk.ID, "operator", nil); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeRejected)
	if got := get(t, board, tk.ID); got.State != task.Done || got.Head != b || got.ReviewState != "reviewing" {
		t.Fatalf("task after the stale entry: %s at %s, review %q; want DONE at %s, still for rita to review",
			got.State, got.Head, got.ReviewState, b)
	}
	if e.fileAtMain(t, "parser.go") != "" {
		t.Fatalf("main has parser.go after the stale entry: %q", e.fileAtMain(t, "parser.go"))
	}
	s, err := q.Status(ctx)
	if err != nil || len(s.Recent) == 0 || s.Recent[0].Result != string(KindStale) ||
		!strings.Contains(s.Recent[0].Detail, "not at "+a[:12]) {
		t.Fatalf("merge status after the drop: %+v, %v; want the entry at A stale, saying why", s.Recent, err)
	}
	if evs := strings.Join(e.events(), "\n"); !strings.Contains(evs, "queued --dropped--> rejected: stale: task 1 is DONE at frozen head "+b[:12]) {
		t.Errorf("merge events lack the drop:\n%s", evs)
	}
	if _, results, gates := e.metrics.snapshot(); results["stale"] != 1 || gates != 1 {
		t.Errorf("results %v after %d gate runs; want one stale, and no gate run for it", results, gates)
	}

	// B is reviewed and merged as any change is.
	pass(b)
	if _, err := q.Enqueue(ctx, tk.ID, "alice", "swarm/alice/work", b); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged)
	if got := get(t, board, tk.ID); got.State != task.Closed {
		t.Fatalf("task after B's merge: %s, want CLOSED", got.State)
	}
	if got := e.fileAtMain(t, "parser.go"); got != "package parser // B" {
		t.Fatalf("main's parser.go = %q, want B's", got)
	}
}

// TestStaleEntryUnderTestDoesNotMove: a task that is not DONE at its
// entry's head any more when the gate has passed does not have the target
// moved over it: the batch is built again without it. No move of the board
// takes a DONE task whose review passed elsewhere today (not even a
// cancel): the test writes the task's row directly, as a defence in depth
// against the next such move.
func TestStaleEntryUnderTestDoesNotMove(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	board := taskboard.New(e.db, taskboard.Options{FrozenHead: true})
	hooks := boardHooks{board}
	started, release := filepath.Join(t.TempDir(), "started"), filepath.Join(t.TempDir(), "release")
	opts := e.options(`touch "` + started + `"; while [ ! -f "` + release + `" ]; do sleep 0.01; done`)
	opts.Callbacks, opts.Stale = hooks, hooks.stale
	q := e.open(opts)
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "moved on"})
	if err != nil {
		t.Fatal(err)
	}
	alice := e.worker("alice")
	head := commitFile(t, alice, "a.txt", "a\n", "a")
	if _, err := board.Claim(ctx, tk.ID, "alice", "alice-1-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := board.DoneAt(ctx, tk.ID, taskboard.Holder{Agent: "alice", Session: "alice-1-a"}, "done", head); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, tk.ID, "alice", "swarm/alice/work", head); err != nil {
		t.Fatal(err)
	}
	before := e.main()
	out := make(chan Outcome, 1)
	go func() {
		o, err := q.Step(ctx)
		if err != nil {
			t.Error(err)
		}
		out <- o
	}()
	waitForFile(t, started)
	if _, err := e.db.SQL().ExecContext(ctx, `UPDATE tasks SET state = 'FAILED' WHERE id = ?`, tk.ID); err != nil {
		t.Fatal(err)
	}
	writeFile(t, release, "")
	if o := <-out; o != OutcomeRebuild {
		t.Fatalf("Step = %s, want rebuild", o)
	}
	if e.main() != before {
		t.Fatal("the target moved over a stale entry")
	}
	step(t, q, OutcomeRejected) // dropped
	if got := get(t, board, tk.ID); got.State != task.Failed {
		t.Fatalf("task %s, want it left FAILED", got.State)
	}
	if e.main() != before {
		t.Fatal("the target moved over a stale entry")
	}
}

func get(t *testing.T, b *taskboard.Board, id int64) taskboard.Task {
	t.Helper()
	tk, err := b.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// fileAtMain is path's content on main, "" when main has no such file.
func (e *env) fileAtMain(t *testing.T, path string) string {
	t.Helper()
	out, err := gitOut(e.repo, "show", "main:"+path)
	if err != nil {
		if _, serr := os.Stat(e.repo); serr != nil {
			t.Fatal(serr)
		}
		return ""
	}
	return out
}

// flakyMerged is boardHooks whose OnMerged fails while fail is set, as the
// daemon's does while it cannot publish the target (a remote away).
type flakyMerged struct {
	boardHooks
	fail *bool
}

func (h flakyMerged) OnMerged(ctx context.Context, e Entry, commit string) error {
	if *h.fail {
		return errors.New("the remote is away")
	}
	return h.boardHooks.OnMerged(ctx, e, commit)
}

// TestMergedFrozenHeadClosesItsTask: the target holds a task's frozen head
// (its entry merged) and the report of it comes late (its first callback
// failed); meanwhile the operator hung a subtask on the task. The merge is
// the task's work: the task is closed on it. Left DONE, it stayed DONE for
// good: once the subtask is merged the task is ready again, but its head
// is merged already, so the queue takes it no more.
func TestMergedFrozenHeadClosesItsTask(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	board := taskboard.New(e.db, taskboard.Options{FrozenHead: true})
	fail := true
	hooks := flakyMerged{boardHooks{board}, &fail}
	opts := e.options()
	opts.Callbacks, opts.Stale = hooks, hooks.stale
	q := e.open(opts)
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "the parser"})
	if err != nil {
		t.Fatal(err)
	}
	alice := e.worker("alice")
	head := commitFile(t, alice, "parser.go", "package parser\n", "parser")
	if _, err := board.Claim(ctx, tk.ID, "alice", "alice-1-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := board.DoneAt(ctx, tk.ID, taskboard.Holder{Agent: "alice", Session: "alice-1-a"}, "done", head); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, tk.ID, "alice", "swarm/alice/work", head); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeMerged) // merged; its report fails
	if got := e.fileAtMain(t, "parser.go"); got != "package parser" {
		t.Fatalf("main's parser.go = %q, want the task's", got)
	}
	if _, err := board.Add(ctx, taskboard.NewTask{Title: "a follow-up", Parent: tk.ID}); err != nil {
		t.Fatal(err)
	}
	fail = false
	step(t, q, OutcomeIdle) // the report again
	if got := get(t, board, tk.ID); got.State != task.Closed {
		t.Fatalf("task whose frozen head %s is merged: %s, want CLOSED", short(head), got.State)
	}
}
