package store

import (
	"context"
	"slices"
	"testing"
	"time"
)

// PruneHistory deletes the agent events and tool calls older than its
// cutoff, keeps every task's events whatever their age, stops at the first
// row young enough, and goes on from where it stopped; on both engines.
func TestPruneHistory(t *testing.T) {
	eachEngine(t, "history", func(t *testing.T, db *DB) {
		ctx := context.Background()
		exec := func(q string, args ...any) { t.Helper(); mustExec(t, db, q, args...) }
		day := func(d int) string { return FormatTime(t0.Add(time.Duration(d) * 24 * time.Hour)) }
		// ids 1-2500: agent events of day 1, every 7th a task's; then
		// day 5, then one of day 1 again (written a little late).
		for i := 1; i <= 2500; i++ {
			var task any
			if i%7 == 0 {
				task = int64(i)
			}
			exec(`INSERT INTO events (id, at, agent, from_state, event, to_state, task_id) VALUES (?, ?, 'alice', 'A', 'E', 'B', ?)`,
				i, day(1), task)
		}
		exec(`INSERT INTO events (id, at, agent, from_state, event, to_state) VALUES (2501, ?, 'alice', 'A', 'E', 'B')`, day(5))
		exec(`INSERT INTO events (id, at, agent, from_state, event, to_state) VALUES (2502, ?, 'alice', 'A', 'E', 'B')`, day(1))
		for i, d := range []int{1, 1, 5} {
			exec(`INSERT INTO tool_calls (id, session_id, agent, seq, tool, started_at, status) VALUES (?, 's', 'alice', 1, 'Bash', ?, 'ok')`,
				i+1, day(d))
		}
		ids := func(table string) []int64 {
			t.Helper()
			got, err := QueryAll(ctx, db.reads, func(s Scanner) (int64, error) {
				var id int64
				return id, s.Scan(&id)
			}, `SELECT id FROM `+table+` ORDER BY id`)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}

		n, next, err := db.PruneHistory(ctx, AgentEvents, t0.Add(3*24*time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		var want []int64
		for i := int64(7); i <= 2500; i += 7 {
			want = append(want, i)
		}
		want = append(want, 2501, 2502)
		if got := ids("events"); !slices.Equal(got, want) || n != 2500-len(want)+2 || next != 2500 {
			t.Fatalf("after the prune: %d deleted, next %d, %d events left (want %d deleted, next 2500, %d left)",
				n, next, len(got), 2500-len(want)+2, len(want))
		}
		// Later, past day 5: from where it stopped, the late one too;
		// the task's events stay.
		if n, next, err = db.PruneHistory(ctx, AgentEvents, t0.Add(6*24*time.Hour), next); err != nil || n != 2 || next != 2502 {
			t.Fatalf("second prune: %d deleted, next %d, %v; want 2, 2502", n, next, err)
		}
		if got := ids("events"); !slices.Equal(got, want[:len(want)-2]) {
			t.Fatalf("events left %d, want the tasks' %d", len(got), len(want)-2)
		}
		if n, _, err = db.PruneHistory(ctx, ToolCalls, t0.Add(3*24*time.Hour), 0); err != nil || n != 2 {
			t.Fatalf("tool calls pruned %d, %v; want 2", n, err)
		}
		if got := ids("tool_calls"); !slices.Equal(got, []int64{3}) {
			t.Fatalf("tool calls left %v, want [3]", got)
		}
	})
}
