package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// TestDaemonThatDoesNotLeadFollowsTheTarget: on a shared store with a
// remote, a daemon that does not run the merge queue brings its own target
// up to the remote's when the swarm merges (as the store records it): its
// agents start their lines on the swarm's merges, and a worker told to
// merge the target into a conflicting line merges the current one. A
// commit pushed to the remote's target that no queue made is not taken.
func TestDaemonThatDoesNotLeadFollowsTheTarget(t *testing.T) {
	ctx := context.Background()
	url, db, _ := anotherLeads(t, "follow") // throughout

	r, cfg := newCountedRepo(t, "remote: origin\nmerge: {into: main}\n"+sharedYAML(url, 10*time.Second, "alice"))
	d := start(t, cfg)
	d.waitRunning(t, "alice")
	pushed := r.git("rev-parse", "main")
	record := func(task int, commit string) {
		t.Helper()
		now := store.FormatTime(time.Now())
		if _, err := db.ExecCount(ctx, "a merge", `INSERT INTO merge_queue (task_id, agent, branch, head, state, result, candidate, notified, enqueued_at, finished_at)
			VALUES (?, 'carol', 'swarm/task/1', ?, 'merged', 'merged', ?, 1, ?, ?)`, task, commit, commit, now, now); err != nil {
			t.Fatal(err)
		}
	}

	// The leader merges task 1 and pushes it.
	merged := r.mergeOf(pushed, 1, true, "the leader's")
	gitRun(t, "-C", r.dir, "push", "-q", r.bare, merged+":refs/heads/main")
	record(1, merged)
	waitFor(t, "this daemon's main at the leader's merge", func() bool { return r.git("rev-parse", "main") == merged })
	// The follow is this daemon's own move, for the swarm's queue: a look
	// at the target (a session's end) does not take it for an agent's.
	moves := func() int {
		t.Helper()
		d.lookAtTarget(ctx, "by the test")
		if err := d.journal.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM events WHERE event = 'target_moved'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := moves(); n != 0 {
		t.Fatalf("%d target_moved recorded after the follow of the leader's merge, want none", n)
	}

	// Someone pushes to the remote's target by hand, and the leader then
	// records a merge it has not pushed yet: the follow finds a tip no
	// queue made, reports it and leaves this daemon's target where it is.
	theirs := r.mergeOf(merged, 2, false, "pushed by hand")
	gitRun(t, "-C", r.dir, "push", "-q", r.bare, theirs+":refs/heads/main")
	merged3 := r.mergeOf(theirs, 3, true, "the leader's, on it")
	record(3, merged3)
	waitFor(t, "the hand-pushed tip reported", func() bool {
		var n int
		return db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM events WHERE event = 'target_moved'`).Scan(&n) == nil && n > 0
	})
	if got := r.git("rev-parse", "main"); got != merged {
		t.Errorf("main at %.12s with a hand-pushed tip on the remote, want it left at %.12s", got, merged)
	}
	// The leader (whose operator brought that commit in) pushes its merge.
	gitRun(t, "-C", r.dir, "push", "-q", r.bare, merged3+":refs/heads/main")
	waitFor(t, "this daemon's main at the leader's next merge", func() bool { return r.git("rev-parse", "main") == merged3 })
	if n := moves(); n != 1 {
		t.Errorf("%d target_moved recorded, want the hand-pushed tip's alone", n)
	}
}

// A follow that the daemon's stop cuts off after git moved the target
// (git merge --ff-only ended by the stop's cancellation between its move
// of the ref and its exit) made its move all the same: it is the daemon's
// own, and no look reports it as someone else's, one after the follow's
// end included, nor does the next start. TestSharedStoreStartRecordsNoFollow
// saw it once under load, its stop right after main reached the leader's
// merge: the follow took the cut-off for a move not made (NotTaken), and
// the look at alice's session's end reported the follow.
func TestFollowCutOffByTheStopIsNotReported(t *testing.T) {
	ctx := context.Background()
	url, db, _ := anotherLeads(t, "cutfollow") // throughout
	r, cfg := newCountedRepo(t, "remote: origin\nmerge: {into: main}\n"+sharedYAML(url, 10*time.Second, "alice"))
	// git, but for a fast-forward, which holds on once it has moved the
	// target, until the stop ends it (SIGTERM).
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	moved, hold := filepath.Join(bin, "moved"), filepath.Join(bin, "hold")
	if err := syscall.Mkfifo(hold, 0o600); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(bin, "git"), fmt.Sprintf(`#!/bin/sh
case " $* " in
*" merge --ff-only "*) '%[1]s' "$@" || exit; : > '%[2]s'; exec cat '%[3]s';;
esac
exec '%[1]s' "$@"
`, real, moved, hold))
	if err := os.Chmod(filepath.Join(bin, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	d := start(t, cfg)
	d.waitRunning(t, "alice")
	pushed := r.git("rev-parse", "main")
	merged := r.mergeOf(pushed, 1, true, "the leader's")
	gitRun(t, "-C", r.dir, "push", "-q", r.bare, merged+":refs/heads/main")
	now := store.FormatTime(time.Now())
	if _, err := db.ExecCount(ctx, "the leader's merge", `INSERT INTO merge_queue (task_id, agent, branch, head, state, result, candidate, notified, enqueued_at, finished_at)
		VALUES (1, 'carol', 'swarm/task/1', ?, 'merged', 'merged', ?, 1, ?, ?)`, merged, merged, now, now); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follow's git holding on after its move of main", func() bool {
		_, err := os.Stat(moved)
		return err == nil
	})
	if got := r.git("rev-parse", "main"); got != merged {
		t.Fatalf("main at %.12s, want the leader's merge %.12s", got, merged)
	}
	// The stop begins (d.stop's first step): it ends the follow's git.
	// The follow holds taking until its try is over; a look then comes
	// after whatever the follow made of the cut-off.
	d.cancel()
	d.merge.taking.Lock()
	d.merge.taking.Unlock()
	d.lookAtTarget(ctx, "by the test, after the follow")
	d.stop(t)
	if got := storeMoves(t, db); len(got) != 0 {
		t.Fatalf("target_moved %q after a follow cut off by the stop, want none", got)
	}
	d = start(t, cfg)
	d.waitRunning(t, "alice")
	d.stop(t)
	if got := storeMoves(t, db); len(got) != 0 {
		t.Fatalf("target_moved %q at the start after a follow cut off by the stop, want none", got)
	}
}
