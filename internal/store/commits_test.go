package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// NoCommits names the agents whose last n successful sessions committed
// nothing; older commits and failed sessions do not hide a drought.
func TestNoCommits(t *testing.T) {
	eachEngine(t, "nocommits", func(t *testing.T, db *DB) {
		ctx := context.Background()
		sessions := map[string][]SessionRecord{
			// Committed long ago, then three successes without a commit, with a
			// failed session that committed in between.
			"alice": {{Commits: 4}, {}, {Outcome: OutcomeError, Commits: 1}, {}, {}},
			// Its latest success committed.
			"bob": {{}, {}, {}, {Commits: 1}},
			// Only two successes recorded: too few to tell.
			"carol": {{}, {}},
			// Three successes, none committed, then one still running.
			"dave": {{}, {}, {}, {Outcome: ""}},
		}
		for agent, ss := range sessions {
			for i, s := range ss {
				start := t0.Add(time.Duration(i) * time.Minute)
				outcome := s.Outcome
				if outcome == "" && !(agent == "dave" && i == 3) {
					outcome = OutcomeSuccess
				}
				mustExec(t, db, `INSERT INTO sessions (session_id, agent, seq, started_at, outcome, commits)
						VALUES (?, ?, ?, ?, ?, ?)`, fmt.Sprint(agent, "-", i), agent, i+1, FormatTime(start), outcome, s.Commits)
			}
		}
		got, err := db.NoCommits(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, []string{"alice", "dave"}) {
			t.Errorf("NoCommits(3) = %v, want alice and dave", names)
		}
		if got, err := db.NoCommits(ctx, 4); err != nil || len(got) != 0 {
			t.Errorf("NoCommits(4) = %v, %v; want none (alice's fourth success back committed)", got, err)
		}
	})
}
