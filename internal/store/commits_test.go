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
	ctx := context.Background()
	db := openTest(t, "", Options{})
	j := startJournal(t, db, JournalOptions{FlushInterval: never})
	sessions := map[string][]SessionRecord{
		// Committed long ago, then three successes without a commit, with a
		// failed session that committed in between.
		"alice": {{Commits: 4}, {}, {Outcome: OutcomeError, Commits: 1}, {}, {}},
		// Its latest success committed.
		"bob": {{}, {}, {}, {Commits: 1}},
		// Only two successes recorded: too few to tell.
		"carol": {{}, {}},
		// Three successes, none committed, then one still running.
		"dave": {{}, {}, {}, {Outcome: "running"}},
	}
	for agent, ss := range sessions {
		for i, s := range ss {
			start := t0.Add(time.Duration(i) * time.Minute)
			end := start.Add(time.Second)
			s.SessionID, s.Agent, s.Seq, s.Started = fmt.Sprint(agent, "-", i), agent, uint32(i+1), start
			if s.Outcome == "running" {
				j.SessionStarted(SessionRecord{SessionID: s.SessionID, Agent: agent, Seq: s.Seq, Started: start})
				continue
			}
			if s.Outcome == "" {
				s.Outcome = OutcomeSuccess
			}
			s.Ended = &end
			j.SessionEnded(s)
		}
	}
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
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
}
