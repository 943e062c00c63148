package taskboard

import (
	"context"
	"strings"
	"testing"

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
