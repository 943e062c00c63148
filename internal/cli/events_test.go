package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/store"
)

// TestEventsShowATasksAbortReason: a task's transition caused by an
// abnormal end of its agent's session (seed 004's abort reason) carries
// the reason to `swarmd events`, in its lines and its JSON, as `task
// show` has it.
func TestEventsShowATasksAbortReason(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "swarm.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	insertEvent(t, db, store.EventRecord{Agent: "alice", From: "IN_PROGRESS", To: "ORPHANED", Effect: "task", Actor: "swarmd",
		Reason: "agent alice stopped", AbortReason: "timeout", SessionID: "alice-1-000000000001", TaskID: 7})
	var out bytes.Buffer
	if err := printEvents(ctx, Streams{Out: &out}, db, store.EventQuery{TaskID: 7}, false, false); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "task 7: IN_PROGRESS --> ORPHANED [timeout] by swarmd: agent alice stopped") {
		t.Errorf("events --task 7:\n%s\nwant the move with its abort reason", got)
	}
	out.Reset()
	if err := printEvents(ctx, Streams{Out: &out}, db, store.EventQuery{TaskID: 7}, false, true); err != nil {
		t.Fatal(err)
	}
	var e control.Event
	if err := json.Unmarshal(out.Bytes(), &e); err != nil || e.AbortReason != "timeout" || e.TaskID != 7 {
		t.Errorf("events --task 7 --json: %s (%v); want abort_reason timeout", out.Bytes(), err)
	}
}
