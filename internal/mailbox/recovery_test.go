package mailbox

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// TestRecoveryAfterKill runs a "daemon" in a child process that records two
// agents' state through a Journal and is killed with SIGKILL mid-session,
// then does what swarmd does at its next start.
func TestRecoveryAfterKill(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openTest(t, path, Options{Agents: testAgents})
	for _, to := range []string{"alice", "bob", "carol"} {
		if _, err := db.Send(ctx, Draft{From: Operator, To: to, Body: "work for " + to}); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperKilledDaemon$", "-test.v=false")
	cmd.Env = append(os.Environ(), "MAILBOX_HELPER_DB="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
				return
			}
		}
		ready <- errors.New("helper exited without saying ready")
	}()
	select {
	case err := <-ready:
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("helper not ready")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, want killed by SIGKILL", err)
	}

	// The next daemon start.
	now := time.Date(2025, 3, 2, 0, 0, 0, 0, time.UTC)
	orphans, err := db.Store().CloseOrphanSessions(ctx, now, nil)
	if err != nil || len(orphans) != 1 || orphans[0].SessionID != "alice-4-live" {
		t.Fatalf("orphans = %+v, %v; want alice's running session", orphans, err)
	}
	n, err := db.ReleaseUnstartedClaims(ctx, nil)
	if err != nil || n != 1 {
		t.Fatalf("released %d, %v; want carol's one message, claimed for a session that never started", n, err)
	}
	for _, agent := range []string{"bob", "carol"} {
		if ms, _ := db.Inbox(ctx, agent, false); len(ms) != 1 {
			t.Fatalf("%s's pending mail = %+v, want 1", agent, ms)
		}
	}
	// alice's session was cut off by the crash: her mail is still pending, to
	// be shown again with a note, and still claimed by the session that saw it.
	alice, _ := db.Inbox(ctx, "alice", false)
	if len(alice) != 1 || alice[0].ClaimedSession != "alice-4-live" || alice[0].ShownNote != store.NoteCrash {
		t.Fatalf("alice's mail after the crash = %+v; want pending, claimed by alice-4-live, noted", alice)
	}
	agents, err := db.Store().Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := agents["alice"]; !a.Resumable() || a.TotalErrors != 3 {
		t.Fatalf("alice = %+v: want resumable with total errors kept", a)
	}
	if b := agents["bob"]; b.Resumable() || b.StopKind != store.StopFatal {
		t.Fatalf("bob = %+v: a fatal stop must survive the restart", b)
	}
	// bob's agent row says seq 6, but no session of his was recorded.
	for agent, want := range map[string]uint32{"alice": 4, "bob": 0, "carol": 0} {
		if got, err := db.Store().MaxSeq(ctx, agent); err != nil || got != want {
			t.Fatalf("MaxSeq(%s) = %d, %v; want %d", agent, got, err, want)
		}
	}
	if evs, err := db.Store().Events(ctx, store.EventQuery{}); err != nil || len(evs) != 2 {
		t.Fatalf("events = %+v, %v; want the two flushed ones", evs, err)
	}
}

// TestHelperKilledDaemon is the child of TestRecoveryAfterKill.
func TestHelperKilledDaemon(t *testing.T) {
	path := os.Getenv("MAILBOX_HELPER_DB")
	if path == "" {
		t.Skip("helper process for TestRecoveryAfterKill")
	}
	ctx := context.Background()
	db, err := Open(ctx, path, store.Options{}, Options{Agents: testAgents})
	if err != nil {
		t.Fatal(err)
	}
	j := db.Store().NewJournal(store.JournalOptions{FlushInterval: time.Hour})
	j.Start()
	// alice: running session 4, with her mail claimed for it.
	if _, err := db.ConsumeForPrompt(ctx, "alice", "alice-4-live"); err != nil {
		t.Fatal(err)
	}
	j.SessionStarted(store.SessionRecord{SessionID: "alice-4-live", Agent: "alice", Seq: 4, Started: t0})
	j.Agent(store.AgentRecord{Name: "alice", State: "Running", Seq: 4, ConsecutiveErrors: 1, TotalErrors: 3, UpdatedAt: t0})
	j.Event(store.EventRecord{At: t0, Agent: "alice", From: "Spawning", Event: "SpawnSucceeded", To: "Running", Actor: "runner", SessionID: "alice-4-live", Seq: 4})
	// bob: stopped by his error threshold.
	j.Agent(store.AgentRecord{Name: "bob", State: "Stopped", Seq: 6, ConsecutiveErrors: 5, TotalErrors: 9,
		StopKind: store.StopFatal, StopReason: "5 consecutive errors", UpdatedAt: t0})
	j.Event(store.EventRecord{At: t0, Agent: "bob", From: "CoolingDown", Event: "FatalError", To: "Stopped", Actor: "runner", Seq: 6})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Then a prompt for carol claims her mail, and the daemon dies before
	// the session starts; a record enqueued but not flushed dies with it.
	if _, err := db.ConsumeForPrompt(ctx, "carol", "carol-1-never"); err != nil {
		t.Fatal(err)
	}
	// A journal of its own for that record: j's writer may still hold a
	// wake-up from SessionStarted (it asks for an immediate write) if it was
	// scheduled late, and would write the record at once.
	late := db.Store().NewJournal(store.JournalOptions{FlushInterval: time.Hour})
	late.Start()
	late.Event(store.EventRecord{At: t0, Agent: "carol", Event: "lost"})
	os.Stdout.WriteString("ready\n")
	select {} // until SIGKILL
}
