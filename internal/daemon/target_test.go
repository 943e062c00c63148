package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// Where nothing keeps an agent from writing the merge target, a move the
// queue did not make is seen (at the end of the session that made it, or
// by the watch) and recorded (target_moved), once: an agent that advances
// main past the queue, then one that rewinds it to the root commit. With
// isolation off: in a sandbox the agent cannot write main at all
// (cmd/swarmd's TestSandboxHoldsAHostileSession).
func TestTargetMovedByAnAgentIsRecorded(t *testing.T) {
	script := `p=$(cat)
case "$p" in
*"Your task: #"*rewind*) git update-ref refs/heads/main "$(git rev-list --max-parents=0 HEAD)"; echo DONE;;
*"Your task: #"*advance*) echo a > a.txt; git add a.txt; git commit -qm a; git update-ref refs/heads/main HEAD; echo DONE;;
*) echo idle; echo DONE;;
esac`
	cfg := repo(t, fmt.Sprintf(`
listen: ""
isolation: off
defaults: {backend: worker, grace_period: 1s, min_session_interval: 0s}
merge: {into: main}
backends:
  worker: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: alice, role: works}
`, script))
	r := start(t, cfg)
	ctx := context.Background()
	moves := func() []store.EventRecord {
		_ = r.journal.Flush(ctx)
		evs, err := r.db.Events(ctx, store.EventQuery{Agent: "merge"})
		if err != nil {
			t.Fatal(err)
		}
		var out []store.EventRecord
		for _, e := range evs {
			if e.Event == "target_moved" {
				out = append(out, e)
			}
		}
		return out
	}
	if _, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "advance main"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the advance recorded", func() bool { return len(moves()) == 1 })
	// Seen at the end of alice's session, or by the watch if it looked
	// first.
	if m := moves()[0]; !strings.Contains(m.Reason, "main advanced") || !strings.Contains(m.Reason, "by someone other than the merge queue") {
		t.Fatalf("recorded %q, want main advanced by someone other than the queue", m.Reason)
	}
	if _, err := r.tasks.Add(ctx, taskboard.NewTask{Title: "rewind main"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rewind recorded", func() bool { return len(moves()) == 2 })
	if m := moves()[1]; !strings.Contains(m.Reason, "main rewound") || !strings.Contains(m.Reason, "may no longer be on it") {
		t.Fatalf("recorded %q, want main rewound", m.Reason)
	}
	// Each once: the watch, which looks every 2 s, does not report them again.
	time.Sleep(targetWatchEvery + 500*time.Millisecond)
	if n := len(moves()); n != 2 {
		t.Fatalf("%d moves recorded, want each once", n)
	}
	r.stop(t)
}
