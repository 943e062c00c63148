package taskboard

import (
	"context"
	"maps"
	"strconv"
	"testing"

	"github.com/swarmd/swarmd/internal/store/storetest"
	"github.com/swarmd/swarmd/internal/task"
)

// TestReadsOfTheBoardScanNoHistory: what the dashboards' inbox, a session
// that never started and `swarmd task list --state` read goes through an
// index, never a read of every task ever made. SQLite plans a statement
// before it is given its values, so a bound state matches no partial
// index: each read names its index's term as written (SQLite has no
// statistics here; nothing runs ANALYZE).
func TestReadsOfTheBoardScanNoHistory(t *testing.T) {
	_, db := openBoard(t, "", Options{})
	queries := map[string]string{"reviewing": reviewingSQL, "unclaim": unclaimSQL}
	for _, st := range task.AllStates {
		q, _ := listSQL(Filter{State: &st})
		queries["list "+st.String()] = q
		if st == task.Open {
			q, _ = listSQL(Filter{State: &st, Assigned: true})
			queries["list OPEN assigned"] = q
		}
	}
	for name, q := range queries {
		plan := storetest.Plan(t, db, q)
		for _, line := range plan {
			if line == "SCAN tasks" {
				t.Errorf("%s reads every task ever made: %q", name, plan)
			}
		}
	}
}

// TestTitles: the titles of the tasks named, in one read, on each engine;
// an id no task has is left out.
func TestTitles(t *testing.T) {
	storetest.Engines(t, "titles", func(t *testing.T, fresh func(t *testing.T) string) {
		b := New(storetest.OpenTarget(t, fresh(t)), Options{})
		one, two := add(t, b, NewTask{Title: "one"}), add(t, b, NewTask{Title: "two"})
		got, err := b.Titles(context.Background(), []int64{two.ID, 999, one.ID})
		if want := map[int64]string{one.ID: "one", two.ID: "two"}; err != nil || !maps.Equal(got, want) {
			t.Fatalf("Titles = %v, %v; want %v", got, err, want)
		}
		if got, err := b.Titles(context.Background(), nil); err != nil || len(got) != 0 {
			t.Fatalf("Titles(nil) = %v, %v", got, err)
		}
	})
}

// TestBoardCountsTheTasksOverAsTheyAre: the counts of the tasks over
// (CLOSED, CANCELLED) the board shows are kept by triggers, not counted at
// each read; on each engine they stay what a count gives through the
// board's own moves and through writes of the rows themselves.
func TestBoardCountsTheTasksOverAsTheyAre(t *testing.T) {
	storetest.Engines(t, "over-counts", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		db := storetest.OpenTarget(t, fresh(t))
		b := New(db, Options{AutoClose: true})
		check := func(when string) map[task.State]int {
			t.Helper()
			_, _, counts, err := b.Board(ctx, 5)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range []task.State{task.Closed, task.Cancelled} {
				var want int
				if err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state = ?`, st.String()).Scan(&want); err != nil {
					t.Fatal(err)
				}
				if counts[st] != want {
					t.Errorf("%s: the board counts %d %s, the table holds %d", when, counts[st], st, want)
				}
			}
			return counts
		}
		var ids []int64
		for i := range 4 {
			tk := add(t, b, NewTask{Title: "t" + strconv.Itoa(i)})
			ids = append(ids, tk.ID)
		}
		check("added")
		for i, id := range ids[:3] {
			h := Holder{Agent: "alice", Session: "s" + strconv.Itoa(i)}
			if _, err := b.Claim(ctx, id, h.Agent, h.Session); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Done(ctx, id, h, "done"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Cancel(ctx, ids[3]); err != nil {
			t.Fatal(err)
		}
		if c := check("three closed, one cancelled"); c[task.Closed] != 3 || c[task.Cancelled] != 1 {
			t.Fatalf("counts %v; want 3 CLOSED, 1 CANCELLED", c)
		}
		for what, q := range map[string]string{
			"a closed task reopened by hand": `UPDATE tasks SET state = 'OPEN' WHERE id = ` + strconv.FormatInt(ids[0], 10),
			"a cancelled one deleted":        `DELETE FROM tasks WHERE id = ` + strconv.FormatInt(ids[3], 10),
			"a closed one inserted":          `INSERT INTO tasks (title, body, state, result, created_by, created_at, updated_at) VALUES ('x', '', 'CLOSED', '', 'operator', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`,
			"a closed one updated":           `UPDATE tasks SET result = 'again' WHERE id = ` + strconv.FormatInt(ids[1], 10),
		} {
			if _, err := db.ExecCount(ctx, what, q); err != nil {
				t.Fatal(err)
			}
			check(what)
		}
	})
}
