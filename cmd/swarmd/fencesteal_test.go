package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// stealScript is agent x's session on either daemon: it keeps its prompt;
// on A it ends at once with the done signal (x then idles), on B it waits
// for the test's go before it does.
const stealScript = `cat > "$OUT/$WHO-prompt-$SWARM_SESSION_ID"
if [ "$WHO" = b ]; then while [ ! -e "$OUT/go" ]; do sleep 0.05; done; fi
echo DONE
`

// TestPausedDaemonTakesNothingFromItsSuccessor: daemon A runs agent x,
// idle, and is stopped (SIGSTOP) past its lease; daemon B takes x, which
// claims a task and a message and works on them. When A continues, x's
// runner there wakes for the mail and task it heard of while stopped and
// builds a prompt before its session's start is refused: what it writes
// for x on the way (the held task's claim moved to its session, the
// pending mail claimed for it) must be refused as well. Otherwise B's
// session finds its task's claim gone (its DONE refused, the work done
// again) and its mail claimed by a session that never ran (unacknowledged,
// shown again).
func TestPausedDaemonTakesNothingFromItsSuccessor(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "steal")
	url := srv.URL(dbName)
	out := t.TempDir()
	config := func(who string) string {
		return fenceConfig(t, fenceCfg{Store: url, Lease: "2s", Out: out, Who: who, Script: stealScript,
			AgentExtra: "min_session_interval: 50ms"})
	}
	cfgA, cfgB := config("a"), config("b")
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	a := startDaemon(t, cfgA)
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		if t.Failed() {
			t.Logf("daemon A's log:\n%s", a.log())
		}
	})
	// x's first session on A ends with DONE: with nothing to do, x idles.
	a.waitLine("x idle on A", func(m map[string]any) bool {
		return m["msg"] == "transition" && m["agent"] == "x" && m["from"] == "Running"
	})
	a.waitLine("x's second prompt on A", transitionTo("x", "BuildingPrompt"))
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ls, err := db.Leases(ctx)
	if err != nil || len(ls) != 1 {
		t.Fatalf("leases: %+v, %v", ls, err)
	}
	time.Sleep(time.Until(ls[0].Expires) + 100*time.Millisecond)

	// Work for x while A is stopped (A's listener hears of it when it
	// continues); B takes x and its session claims both.
	id := addTask(t, cfgB, "the work", "--to", "x")
	if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--to", "x", "--subject", "the-mail", "hello", "-c", cfgB); code != 0 {
		t.Fatalf("mail send: %s", stderr)
	}
	b := startDaemon(t, cfgB)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon B's log:\n%s", b.log())
		}
	})
	var sessB string
	waitUntil(t, "B's session working on the task with the mail", func() bool {
		var state, claim string
		var mailClaim sql.NullString
		if err := db.ReadSQL().QueryRowContext(ctx, fmt.Sprintf(`SELECT state, claim_session FROM tasks WHERE id = %d`, id)).Scan(&state, &claim); err != nil {
			return false
		}
		if err := db.ReadSQL().QueryRowContext(ctx, `SELECT claimed_session FROM messages WHERE subject = 'the-mail'`).Scan(&mailClaim); err != nil {
			return false
		}
		sessB = claim
		return state == "IN_PROGRESS" && mailClaim.String == claim
	})

	// A continues: x's runner builds a prompt and finds its start refused.
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a.waitLine("A's start of x refused", func(m map[string]any) bool {
		return strings.Contains(fmt.Sprint(m["error"]), "no longer holds its lease")
	})
	var claim string
	var mailClaim sql.NullString
	if err := db.ReadSQL().QueryRowContext(ctx, fmt.Sprintf(`SELECT claim_session FROM tasks WHERE id = %d`, id)).Scan(&claim); err != nil {
		t.Fatal(err)
	}
	if err := db.ReadSQL().QueryRowContext(ctx, `SELECT claimed_session FROM messages WHERE subject = 'the-mail'`).Scan(&mailClaim); err != nil {
		t.Fatal(err)
	}
	if claim != sessB {
		t.Errorf("task %d's claim moved from B's session %s to %s, A's, after A lost x's lease", id, sessB, claim)
	}
	if mailClaim.String != sessB {
		t.Errorf("the mail B's session %s was shown is claimed by %q, A's, after A lost x's lease", sessB, mailClaim.String)
	}

	// B's session finishes: its DONE is the task's, its mail acknowledged,
	// shown to no other session.
	if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitTaskCLI(t, cfgB, id, func(tk taskboard.Task) bool { return tk.StateName != "IN_PROGRESS" && tk.StateName != "CLAIMED" })
	evs, err := db.Events(ctx, store.EventQuery{TaskID: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.To == "DONE" && e.SessionID != sessB {
			t.Errorf("task %d was done by session %s, not B's first session %s (whose DONE was refused)", id, e.SessionID, sessB)
		}
	}
	prompts, _ := filepath.Glob(filepath.Join(out, "b-prompt-*"))
	shown := 0
	for _, p := range prompts {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "the-mail") {
			shown++
		}
	}
	if shown != 1 {
		t.Errorf("the mail was shown in %d of B's prompts, want 1", shown)
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(30 * time.Second)
	b.wait(30 * time.Second)
}
