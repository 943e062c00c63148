package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// TestMergedTaskClosedOnlyOnceTheRemoteHoldsIt: on a shared store the
// swarm's target is the remote's. The merging daemon closes a merged task
// only once its push put the merge there: while the remote refuses the
// push, the task stays DONE and its result unreported; once the remote
// takes it, the task is closed. Before, the task was closed at once and
// the push went out in the background: a leader killed in between left
// the task closed with its work on its own disk alone.
func TestMergedTaskClosedOnlyOnceTheRemoteHoldsIt(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "publish")
	ctx := context.Background()
	r, cfg := newCountedRepo(t, "store: "+srv.URL(dbName)+"\nlease_timeout: 5s\nremote: origin\nmerge: {into: main, gate: [\"true\"]}\n"+taskWorker)
	r.git("checkout", "-q", "-b", "elsewhere") // main is the queue's
	// The remote refuses every push to main while refuse exists, and says
	// so in refused.
	refuse, refused := filepath.Join(t.TempDir(), "refuse"), filepath.Join(t.TempDir(), "refused")
	writeFile(t, refuse, "")
	hook := filepath.Join(r.bare, "hooks", "pre-receive")
	writeFile(t, hook, "#!/bin/sh\nwhile read old new ref; do\n  if [ \"$ref\" = refs/heads/main ] && [ -e "+refuse+" ]; then echo no >> "+refused+"; exit 1; fi\ndone\n")
	if err := os.Chmod(hook, 0o755); err != nil {
		t.Fatal(err)
	}

	d := start(t, cfg)
	tk, err := d.tasks.Add(ctx, taskboard.NewTask{Title: "work", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	queue := d.merge.queue.Store()
	waitFor(t, "the task merged and a push of it refused", func() bool {
		e, err := queue.Latest(ctx, tk.ID)
		_, serr := os.Stat(refused)
		return err == nil && e.State == merge.Merged && serr == nil
	})
	if got, err := d.tasks.Get(ctx, tk.ID); err != nil || got.StateName != "DONE" {
		t.Fatalf("task while the remote refuses its merge: %s, %v; want DONE (closed only once the remote holds it)", got.StateName, err)
	}
	if err := os.Remove(refuse); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task closed", func() bool {
		got, err := d.tasks.Get(ctx, tk.ID)
		return err == nil && got.StateName == "CLOSED"
	})
	e, err := queue.Latest(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("git", "--git-dir", r.bare, "merge-base", "--is-ancestor", e.Candidate, "main").Run(); err != nil {
		t.Errorf("the task is closed and the remote's main lacks its merge %s", e.Candidate)
	}
}
