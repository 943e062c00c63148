package taskboard

import (
	"context"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store/storetest"
	"github.com/swarmd/swarmd/internal/task"
)

// Board gives every task not over, the most recent of those over (newest
// first, CLOSED and CANCELLED together) and every state's count, on both
// engines: what the dashboards show, read without reading every task.
func TestBoardReadsWhatIsNotOverAndTheRecentRest(t *testing.T) {
	storetest.Engines(t, "board", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		b := New(storetest.OpenTarget(t, fresh(t)), Options{AutoClose: true, Now: func() time.Time {
			clock = clock.Add(time.Second)
			return clock
		}})
		var closed, cancelled []int64
		for i := range 8 {
			tk, err := b.Add(ctx, NewTask{Title: "old"})
			if err != nil {
				t.Fatal(err)
			}
			if i%3 == 2 {
				if _, err := b.Cancel(ctx, tk.ID); err != nil {
					t.Fatal(err)
				}
				cancelled = append(cancelled, tk.ID)
				continue
			}
			claimed, ok, err := b.ClaimNext(ctx, "alice", "alice-1")
			if err != nil || !ok || claimed.ID != tk.ID {
				t.Fatalf("claim = %+v, %v, %v; want task %d", claimed, ok, err, tk.ID)
			}
			if _, err := b.Done(ctx, tk.ID, Holder{Agent: "alice", Session: "alice-1"}, "done"); err != nil {
				t.Fatal(err)
			}
			if got, _ := b.Get(ctx, tk.ID); got.State != task.Closed {
				t.Fatalf("task %d is %s after DONE with auto-close", tk.ID, got.State)
			}
			closed = append(closed, tk.ID)
		}
		open1 := add(t, b, NewTask{Title: "open"})
		held := add(t, b, NewTask{Title: "held", Priority: 9})
		if _, _, err := b.ClaimNext(ctx, "bob", "bob-1"); err != nil {
			t.Fatal(err)
		}

		open, over, counts, err := b.Board(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(open) != 2 || open[0].ID != open1.ID || open[1].ID != held.ID || open[1].State != task.Claimed {
			t.Fatalf("not over = %+v, want %d OPEN and %d CLAIMED", open, open1.ID, held.ID)
		}
		// Updated last: tasks 8 and 7 (closed), then 6 (cancelled).
		want := []int64{8, 7, 6}
		if len(over) != len(want) {
			t.Fatalf("over = %d tasks, want %v", len(over), want)
		}
		for i, tk := range over {
			if tk.ID != want[i] {
				t.Fatalf("over[%d] = task %d, want %d (newest first): %v", i, tk.ID, want[i], over)
			}
		}
		wantCounts := map[task.State]int{task.Open: 1, task.Claimed: 1, task.Closed: len(closed), task.Cancelled: len(cancelled)}
		for _, st := range task.AllStates {
			if counts[st] != wantCounts[st] {
				t.Errorf("count of %s = %d, want %d", st, counts[st], wantCounts[st])
			}
		}
	})
}
