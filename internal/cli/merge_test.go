package cli

import (
	"context"
	"testing"
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
