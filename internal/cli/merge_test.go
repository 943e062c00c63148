package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/merge"
)

// TestMergeRefusesBadInput: a negative --limit, a task id that is none, and
// steering a queue that the config does not have are usage errors of one
// line.
func TestMergeRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	o, _ := s.as("operator", "")
	m := &mergeOptions{IO: o.IO}
	wantUsage(t, mergeListRun(ctx, &mergeListOptions{mergeOptions: m, Limit: -1}),
		"merge list: --limit -1: want 0 (all) or more")
	wantUsage(t, mergeRetryRun(ctx, &mergeRetryOptions{mergeOptions: m, Task: "x"}),
		`merge retry "x": want a task id, a positive number such as 7`)
	// Found through SWARM_DB_PATH, with no config: no merge section.
	wantUsage(t, mergeSwitchRun(ctx, &mergeSwitchOptions{mergeOptions: m, Verb: "pause"}),
		"merge pause: swarmd.yaml has no merge section, so there is no merge queue")
}

// TestMergeStatusShowsTheRunAhead: merge status says how many tasks a gate
// run takes and how many runs go at once, and names the gate run ahead of
// the batch under test, its tasks and the command for its log.
func TestMergeStatusShowsTheRunAhead(t *testing.T) {
	since := time.Date(2026, 11, 29, 10, 4, 5, 0, time.Local)
	var b strings.Builder
	cfg := &config.Config{Merge: &config.Merge{Into: "main", Strategy: "merge", Gate: []string{"make test"}, Timeout: 10 * time.Minute,
		Batch: 8, Parallel: 2}}
	err := printMergeStatus(&b, cfg, merge.Status{
		Current: &merge.Entry{Task: 1, Agent: "w1", Branch: "swarm/task/1", Head: "0123456789abcdef", GateSeq: 6},
		Queued:  []merge.Entry{{Task: 2}, {Task: 3}},
		Ahead:   &merge.AheadRun{GateSeq: 7, Tasks: []int64{2, 3}, Since: since},
	})
	if err != nil {
		t.Fatal(err)
	}
	if head := "merge queue into main: strategy merge, gate make test, timeout 10m, batches of up to 8, 2 gate runs at once\n"; !strings.HasPrefix(b.String(), head) {
		t.Errorf("merge status:\n%s\nwant it to start %q", b.String(), head)
	}
	want := "ahead:   tasks 2, 3, on the candidate under test, since " + clock(since) + ", gate run 7 (swarmd logs merge --session 7)\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("merge status:\n%s\nwant the line %q", b.String(), want)
	}
}
