package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// sharedYAML is agentsYAML on the PostgreSQL store at url.
func sharedYAML(url string, lease time.Duration, names ...string) string {
	return fmt.Sprintf("store: %s\nlease_timeout: %s\n", url, lease) + agentsYAML(names...)
}

// TestLeasesOnASharedStore: daemons share one PostgreSQL store (the others
// are played by their rows: one process has one supervisor). An agent name
// is run by one daemon only: a daemon naming an agent another runs is
// refused, naming the holder. A daemon that stops renewing (dead) loses its
// agents' claimed tasks to the queue once its lease expires, recovered by
// a live daemon exactly once.
func TestLeasesOnASharedStore(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "leases")
	url := srv.URL(dbName)
	ctx := context.Background()

	db, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Another daemon, alive (its lease runs for an hour), runs bob.
	other := store.Lease{Daemon: "other:/srv/swarm", Host: "other", PID: 7}
	if _, _, err := db.AcquireLeases(ctx, other, []string{"bob"}, time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, mustLoad(t, repo(t, sharedYAML(url, time.Second, "alice", "bob"))), Options{})
	var se *SetupError
	if !errors.As(err, &se) || !errors.Is(err, store.ErrLeaseHeld) || !strings.Contains(err.Error(), "other:/srv/swarm") {
		t.Fatalf("a daemon naming bob = %v, want a setup error naming the daemon that runs him", err)
	}
	if ls, _ := db.Leases(ctx); len(ls) != 1 {
		t.Fatalf("leases after the refusal = %+v, want bob's alone (all or none)", ls)
	}
	// Nor did it record itself as running them.
	if ms, err := db.Members(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("the swarm's agents after the refusal = %+v, %v; want none", ms, err)
	}

	d1 := start(t, repo(t, sharedYAML(url, 600*time.Millisecond, "alice")))
	d1.waitRunning(t, "alice")
	if ms, err := db.Members(ctx); err != nil || len(ms) != 1 || ms[0].Agent != "alice" || ms[0].Daemon != d1.leaseHolder().Daemon {
		t.Fatalf("the swarm's agents with alice's daemon running = %+v, %v; want alice, of that daemon", ms, err)
	}

	// A daemon that ran zed died holding a task: its lease ran out. The
	// claim comes first, as it did for that daemon: the live one reaps an
	// expired lease within a second, and would find nothing to requeue.
	board := taskboard.New(db, taskboard.Options{})
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "zed's work", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := board.Claim(ctx, tk.ID, "zed", "zed-1-x"); err != nil {
		t.Fatal(err)
	}
	ghost := store.Lease{Daemon: "ghost:/gone", Host: "ghost", PID: 1}
	if _, _, err := db.AcquireLeases(ctx, ghost, []string{"zed"}, time.Now().Add(-time.Hour), time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "zed's task requeued by the live daemon", func() bool {
		got, err := board.Get(ctx, tk.ID)
		return err == nil && got.StateName == "OPEN" && got.Claimant == ""
	})
	ls, err := db.Leases(ctx)
	if err != nil || len(ls) != 2 || ls[0].Agent != "alice" || ls[1].Agent != "bob" {
		t.Fatalf("leases = %+v, %v; want alice's and bob's (zed's reaped)", ls, err)
	}
	evs, err := db.Events(ctx, store.EventQuery{TaskID: tk.ID})
	if err != nil {
		t.Fatal(err)
	}
	requeued := 0
	for _, e := range evs {
		if e.To == "OPEN" && strings.Contains(e.Reason, "ghost:/gone") {
			requeued++
		}
	}
	if requeued != 1 {
		t.Fatalf("task events = %+v; want one requeue naming the dead daemon", evs)
	}

	// A clean stop gives the leases up: the name is free at once.
	d1.stop(t)
	if ls, err := db.Leases(ctx); err != nil || len(ls) != 1 || ls[0].Agent != "bob" {
		t.Fatalf("leases after a clean stop = %+v, %v; want bob's alone", ls, err)
	}
}

// TestLeaseLossReportedOnce: an agent whose lease another daemon holds is
// news at the first renewal that finds it so, not at the ones after while
// it lasts; lost anew after being held, it is news again.
func TestLeaseLossReportedOnce(t *testing.T) {
	var k leaseKeeper
	for i, step := range []struct {
		still, want []string
	}{
		{still: nil, want: nil},
		{still: []string{"bob"}, want: []string{"bob"}},
		{still: []string{"bob"}, want: nil},
		{still: []string{"alice", "bob"}, want: []string{"alice"}},
		{still: []string{"alice", "bob"}, want: nil},
		{still: []string{"alice"}, want: nil}, // bob's taken back
		{still: []string{"alice", "bob"}, want: []string{"bob"}},
		{still: nil, want: nil},
		{still: []string{"alice"}, want: []string{"alice"}},
	} {
		if got := k.lostNews(step.still); !slices.Equal(got, step.want) {
			t.Errorf("renewal %d, lost %v: news %v, want %v", i, step.still, got, step.want)
		}
	}
}

// The lease guard fired at a deadline that passed before the next renewal:
// a session alive then was its kill, seen before or after that renewal; a
// session that started after it was not.
func TestGuardDeadlinesTellTheGuardsKills(t *testing.T) {
	var g guardDeadlines
	now := time.Now()
	if g.killedSince(now.Add(-time.Hour)) {
		t.Fatal("killed before any deadline")
	}
	g.extended(now.Add(time.Hour), now.Add(-time.Minute))
	if g.killedSince(now.Add(-time.Hour)) {
		t.Fatal("killed before the deadline")
	}
	passed := now.Add(-time.Second)
	g.extended(passed, now.Add(-2*time.Second)) // renewed in time
	if !g.killedSince(now.Add(-time.Minute)) {
		t.Error("the deadline passed with no renewal: not told as the guard's kill")
	}
	g.extended(now.Add(time.Hour), now) // the renewal after it
	if !g.killedSince(now.Add(-time.Minute)) {
		t.Error("the guard's kill forgotten at the next renewal")
	}
	if g.killedSince(passed.Add(time.Millisecond)) {
		t.Error("a session started after the guard fired told as its kill")
	}
}

// TestReapDoesNotUndoARetake: a live daemon reaps the expired lease of a
// daemon that was paused, and recovers its agent: closes the agent's open
// sessions and requeues its tasks. If the paused daemon continues and
// takes the name back before that recovery is done, starting a session
// that claims a task, the recovery must not close that session or
// requeue that claim: the lease, and what it holds, is the retaker's. The
// paused daemon is played by SQL on a connection of its own; a lock on the
// dead session's row holds the reaper inside its recovery (closing that
// session) while the retake is tried.
func TestReapDoesNotUndoARetake(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "retake")
	url := srv.URL(dbName)
	ctx := context.Background()
	db, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	raw, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	board := taskboard.New(db, taskboard.Options{})

	// The paused daemon ran zed: its session zed-1 claimed a task. Its
	// lease expires once the lock below is in place.
	ghost := store.Lease{Daemon: "ghost:/paused", Host: "ghost", PID: 1}
	if _, _, err := db.AcquireLeases(ctx, ghost, []string{"zed"}, time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	now := store.FormatTime(time.Now())
	if _, err := raw.ExecContext(ctx, `INSERT INTO sessions (session_id, agent, seq, started_at, head_before, log_path)
		VALUES ('zed-1', 'zed', 1, $1, '', '')`, now); err != nil {
		t.Fatal(err)
	}
	old, err := board.Add(ctx, taskboard.NewTask{Title: "zed-1's work", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := board.Claim(ctx, old.ID, "zed", "zed-1"); err != nil {
		t.Fatal(err)
	}
	fresh, err := board.Add(ctx, taskboard.NewTask{Title: "zed-2's work", CreatedBy: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	hold, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback()
	if _, err := hold.ExecContext(ctx, `SELECT 1 FROM sessions WHERE session_id = 'zed-1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, `UPDATE agent_leases SET expires_at = $1 WHERE agent = 'zed'`,
		store.FormatTime(time.Now().Add(-time.Second))); err != nil {
		t.Fatal(err)
	}

	// The reaper, a live daemon running alice, reaps zed's lease and stops
	// at zed-1's row. Alice claims nothing: the tasks' states are the
	// reaper's and the retaker's to set (alice's first session, late on a
	// busy machine, claimed zed-1's task the moment it was requeued).
	cfg := strings.Replace(sharedYAML(url, 600*time.Millisecond, "alice"), "role: works}", "role: works, claims: false}", 1)
	start(t, repo(t, cfg))
	waiting := func(query string) bool {
		var n int
		err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`, query+"%").Scan(&n)
		return err == nil && n > 0
	}
	waitFor(t, "the reaper closing zed-1", func() bool { return waiting("UPDATE sessions SET ended_at") })

	// The paused daemon continues: it takes zed back (the name is free, or
	// about to be), starts session zed-2 and claims the other task.
	retaken := make(chan error, 1)
	go func() {
		retaken <- func() error {
			if _, err := raw.ExecContext(ctx, `INSERT INTO agent_leases (agent, daemon, host, pid, acquired_at, expires_at, epoch)
				VALUES ('zed', 'ghost:/paused', 'ghost', 1, $1, $2, 2)`, store.FormatTime(time.Now()), store.FormatTime(time.Now().Add(time.Hour))); err != nil {
				return err
			}
			if _, err := raw.ExecContext(ctx, `INSERT INTO sessions (session_id, agent, seq, started_at, head_before, log_path)
				VALUES ('zed-2', 'zed', 2, $1, '', '')`, store.FormatTime(time.Now())); err != nil {
				return err
			}
			_, err := raw.ExecContext(ctx, `UPDATE tasks SET state = 'CLAIMED', claimant = 'zed', claim_session = 'zed-2' WHERE id = $1`, fresh.ID)
			return err
		}()
	}()
	var retakeErr error
	done := false
	waitFor(t, "the retake done, or waiting for the reaper", func() bool {
		select {
		case retakeErr = <-retaken:
			done = true
			return true
		default:
			return waiting("INSERT INTO agent_leases")
		}
	})
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	if !done {
		retakeErr = <-retaken
	}
	if retakeErr != nil {
		t.Fatal(retakeErr)
	}
	waitFor(t, "zed-1's task requeued", func() bool {
		got, err := board.Get(ctx, old.ID)
		return err == nil && got.StateName == "OPEN"
	})
	got, err := board.Get(ctx, fresh.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.StateName != "CLAIMED" || got.ClaimSession != "zed-2" {
		t.Errorf("the task zed-2 claimed after zed's lease was taken back is %s (claim %q): the reaper's recovery took it away",
			got.StateName, got.ClaimSession)
	}
	ss, err := db.Sessions(ctx, "zed", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.SessionID == "zed-2" && s.Ended != nil {
			t.Errorf("session zed-2, started after zed's lease was taken back, closed by the reaper as %s", s.Outcome)
		}
	}
}

// TestTakenBackLeasesRecordTheAgentsAgain: a daemon forgotten while it was
// away (its rows deleted, as `swarmd daemons forget` may once its leases
// expired) records its agents and its merge target again when it takes a
// lease back, not only at its next start or reload: its agents stay the
// swarm's, and its target counts in other daemons' checks.
func TestTakenBackLeasesRecordTheAgentsAgain(t *testing.T) {
	srv := pgtest.Shared(t)
	url := srv.URL(srv.NewDB(t, "retakemembers"))
	ctx := context.Background()
	db, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := start(t, repo(t, sharedYAML(url, 600*time.Millisecond, "alice")))
	self := d.leaseHolder().Daemon
	recorded := func() bool {
		ms, err := db.Members(ctx)
		return err == nil && len(ms) == 1 && ms[0].Agent == "alice" && ms[0].Daemon == self
	}
	waitFor(t, "alice recorded as this daemon's", recorded)

	// Away: the operator forgets it, and another daemon takes alice for a
	// while (its lease then expires, as a stopped taker's does).
	if _, err := db.ExecCount(ctx, "forget", `DELETE FROM swarm_members WHERE daemon = ?`, self); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecCount(ctx, "forget its settings", `DELETE FROM settings WHERE key LIKE 'daemon/%'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecCount(ctx, "take alice", `UPDATE agent_leases SET daemon = 'ghost:/away', epoch = epoch + 1 WHERE agent = 'alice'`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alice's lease taken back and alice recorded again", func() bool {
		ls, err := db.Leases(ctx)
		return err == nil && len(ls) == 1 && ls[0].Daemon == self && recorded()
	})
	waitFor(t, "its merge target recorded again", func() bool {
		targets, err := db.DaemonSettings(ctx, SettingMergeInto)
		_, ok := targets[self]
		return err == nil && ok
	})
}
