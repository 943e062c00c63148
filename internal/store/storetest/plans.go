package storetest

import (
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/store"
)

// Plan is SQLite's plan of q on db (EXPLAIN QUERY PLAN, every placeholder
// NULL), a detail a step: what a test of the index a read goes through
// checks. Statistics play no part: the store runs no ANALYZE.
func Plan(t testing.TB, db *store.DB, q string) []string {
	t.Helper()
	rows, err := db.SQL().Query(`EXPLAIN QUERY PLAN `+q, make([]any, strings.Count(q, "?"))...)
	if err != nil {
		t.Fatalf("plan of %s: %v", q, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}
