package taskboard

import (
	"context"
	"maps"
	"strings"
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
	ctx := context.Background()
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
		rows, err := db.ReadSQL().QueryContext(ctx, `EXPLAIN QUERY PLAN `+q, make([]any, strings.Count(q, "?"))...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
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
