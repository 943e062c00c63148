package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// A rejection names the target it did not merge into, says what to do for
// its kind, and says it once: the task's feedback carries the instruction
// and the detail (the worker's next prompt shows it), the mail only that
// the task came back.
func TestRejectionSaysWhatToDoOnce(t *testing.T) {
	ctx := context.Background()
	d, board, mb := mergeHooksDaemon(t)
	d.live.cfg = &config.Config{Merge: &config.Merge{Into: "trunk"}}
	for _, tc := range []struct {
		kind   merge.Kind
		detail string
		want   string
	}{
		{merge.KindConflict, "parser.go", "merge trunk into your branch (`git merge trunk`), resolve the conflicts"},
		{merge.KindGateFailed, "FAIL: TestParse", "The merge gate failed on it, merged onto trunk"},
		{merge.KindCorrupt, "objects of the change do not match their names: 0a1b", "they were replaced after they were committed"},
		{merge.KindHistory, "Its history has 2 merge bases with trunk", "it would not be the change its reviewer was shown"},
	} {
		tk, err := board.Add(ctx, taskboard.NewTask{Title: string(tc.kind)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := board.Claim(ctx, tk.ID, "alice", "alice-1-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := board.Done(ctx, tk.ID, taskboard.Holder{Agent: "alice", Session: "alice-1-a"}, "done"); err != nil {
			t.Fatal(err)
		}
		e := merge.Entry{Task: tk.ID, Agent: "alice", Branch: "swarm/alice/work"}
		if err := (mergeHooks{d}).OnRejected(ctx, e, tc.kind, tc.detail); err != nil {
			t.Fatal(err)
		}
		got, err := board.Get(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got.Result, tc.want) || !strings.HasSuffix(got.Result, tc.detail) {
			t.Errorf("%s: the task's feedback %q; want %q and the detail", tc.kind, got.Result, tc.want)
		}
	}
	ms, err := mb.Inbox(ctx, "alice", false)
	if err != nil || len(ms) != 4 {
		t.Fatalf("alice's mail %+v, %v", ms, err)
	}
	// Replaced objects are the operator's to look into, too.
	ops, err := mb.Inbox(ctx, "operator", false)
	if err != nil || len(ops) != 1 || !strings.Contains(ops[0].Body, "0a1b") || !strings.Contains(ops[0].Body, "git fsck") {
		t.Fatalf("the operator's mail %+v, %v; want one naming the objects", ops, err)
	}
	for _, m := range ms {
		if !strings.Contains(m.Body, "did not merge into trunk") || strings.Contains(m.Body, "swarm/alice/work") ||
			strings.Contains(m.Body, "parser.go") || strings.Contains(m.Body, "TestParse") {
			t.Errorf("rejection mail %q: want the target named, and no detail (the prompt has it once)", m.Body)
		}
	}
}

// The rejection that uses up merge.max_rejections fails the task and
// leaves the operator a note (from the daemon: operator to operator, which
// plain mail refuses as mail to oneself).
func TestRejectionGivingUpTellsTheOperator(t *testing.T) {
	ctx := context.Background()
	d, board, mb := mergeHooksDaemon(t)
	d.live.cfg = &config.Config{Merge: &config.Merge{Into: "trunk", MaxRejections: 2}}
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	e := merge.Entry{Task: tk.ID, Agent: "alice", Branch: "swarm/alice/work"}
	for i, session := range []string{"alice-1-a", "alice-2-b"} { // max_rejections 2: the second fails the task
		if _, err := board.Claim(ctx, tk.ID, "alice", session); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if _, err := board.Done(ctx, tk.ID, taskboard.Holder{Agent: "alice", Session: session}, "done"); err != nil {
			t.Fatal(err)
		}
		if err := (mergeHooks{d}).OnRejected(ctx, e, merge.KindGateFailed, "FAIL"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := board.Get(ctx, tk.ID)
	if err != nil || got.State != task.Failed {
		t.Fatalf("task after its last rejection: %+v, %v; want FAILED", got, err)
	}
	ops, err := mb.Inbox(ctx, "operator", false)
	if err != nil || len(ops) != 1 || !strings.Contains(ops[0].Subject, "merge_rejected") || ops[0].From != mailbox.Operator {
		t.Fatalf("the operator's mail %+v, %v; want the note that the task failed", ops, err)
	}
}

// The queue's stale result says why an entry is not merged, in the board's
// words without the sentinel's: a task not DONE, one reported done at
// another commit, one that is gone.
func TestStaleSaysWhyInTheBoardsWords(t *testing.T) {
	ctx := context.Background()
	d, board, _ := mergeHooksDaemon(t)
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "stale"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		task int64
		want string
	}{
		{tk.ID, "task 1 is OPEN (frozen head none), not DONE at 0a1b2c3d4e5f: only a DONE task's frozen head is merged"},
		{99, "no such task"},
	} {
		got, err := mergeHooks{d}.stale(ctx, merge.Entry{Task: tc.task, Head: "0a1b2c3d4e5f60718293"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(got, tc.want) || strings.HasSuffix(got, taskboard.ErrState.Error()) {
			t.Errorf("stale(task %d) = %q, want it to end in %q", tc.task, got, tc.want)
		}
	}
}

// mergeHooksDaemon is a daemon with the mail and the task board of a new
// swarm.db, for the merge queue's hooks (a merge queue closes tasks).
func mergeHooksDaemon(t *testing.T) (*Daemon, *taskboard.Board, *mailbox.Mailbox) {
	t.Helper()
	mb, err := mailbox.Open(context.Background(), filepath.Join(t.TempDir(), "swarm.db"), store.Options{}, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Close() })
	board := taskboard.New(mb.Store(), taskboard.Options{})
	return &Daemon{log: zap.NewNop(), db: mb.Store(), mail: mb, tasks: board}, board, mb
}
