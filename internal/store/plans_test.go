package store

import (
	"strings"
	"testing"
)

// TestSessionsNewestReadsNoHistory: `swarmd sessions` (every agent's, to a
// limit) reads the newest sessions along an index, not every session ever
// recorded, sorted (SQLite has no statistics here: nothing runs ANALYZE).
func TestSessionsNewestReadsNoHistory(t *testing.T) {
	db := openTest(t, "", Options{})
	rows, err := db.read.Query(`EXPLAIN QUERY PLAN `+sessionsNewestSQL, 20)
	if err != nil {
		t.Fatal(err)
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
	if got := strings.Join(plan, "; "); got != "SCAN sessions USING INDEX sessions_started" {
		t.Errorf("plan %q, want a read along sessions_started alone", got)
	}
}

// TestMaxSeqReadsNoHistory: a session's seq at an agent's (re)start is one
// step down the sessions' key, not a scan of the agent's sessions.
func TestMaxSeqReadsNoHistory(t *testing.T) {
	db := openTest(t, "", Options{})
	rows, err := db.read.Query(`EXPLAIN QUERY PLAN `+maxSeqSQL, "alice", seqFloorKey("alice"))
	if err != nil {
		t.Fatal(err)
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
	for _, p := range plan {
		if strings.HasPrefix(p, "SCAN ") && !strings.Contains(p, "SUBQUERY") && !strings.HasPrefix(p, "SCAN seqs") {
			t.Errorf("plan %q scans a table", strings.Join(plan, "; "))
		}
	}
	t.Log(strings.Join(plan, "; "))
}
