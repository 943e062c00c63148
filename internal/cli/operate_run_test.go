package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/store"
)

// initedRepo is a git repository with what `swarmd init` writes for
// agents, and the options of an operator command on its config.
func initedRepo(t *testing.T, agents ...string) *operateOptions {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	iopts, _ := initOpts(dir, agents...)
	if err := initRun(context.Background(), iopts); err != nil {
		t.Fatal(err)
	}
	return &operateOptions{IO: iopts.IO, ConfigPath: filepath.Join(dir, "swarmd.yaml")}
}

// insertEvent writes e into db's event log as the board or the journal
// would (e.At zero: now), abort reason and task included.
func insertEvent(t *testing.T, db *store.DB, e store.EventRecord) {
	t.Helper()
	ctx := context.Background()
	if e.At.IsZero() {
		e.At = time.Now()
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var task any
	if e.TaskID != 0 {
		task = e.TaskID
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
		abort_reason, session_id, seq, task_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		store.FormatTime(e.At), e.Agent, e.From, e.Event, e.To, e.Effect, e.Actor, e.Reason, e.AbortReason, e.SessionID, e.Seq, task); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestOperatorVerbsWithNoDaemon: status, stop and start on a config whose
// daemon is not running say so as usage errors (exit 2), naming no daemon.
func TestOperatorVerbsWithNoDaemon(t *testing.T) {
	ctx := context.Background()
	o := initedRepo(t, "alice")
	for name, err := range map[string]error{
		"status": statusRun(ctx, &statusOptions{operateOptions: o}),
		"stop":   agentVerbRun(ctx, &agentVerbOptions{operateOptions: o, Verb: "stop", Agent: "alice"}),
		"start":  agentVerbRun(ctx, &agentVerbOptions{operateOptions: o, Verb: "start", Agent: "alice"}),
	} {
		var ue UsageError
		if !errors.Is(err, control.ErrNoDaemon) || !errors.As(err, &ue) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s with no daemon: %v, want a one-line usage error wrapping ErrNoDaemon", name, err)
		}
	}
	wantUsage(t, pauseRun(ctx, &pauseOptions{operateOptions: o}), "pause: name one agent or give --all")
	wantUsage(t, resumeRun(ctx, &pauseOptions{operateOptions: o, Agents: []string{"alice"}, All: true}), "resume: name one agent or give --all")
	wantUsage(t, pauseRun(ctx, &pauseOptions{operateOptions: o, Agents: []string{"alice"}, Reason: strings.Repeat("r", 70000)}),
		"pause: --reason is 70000 bytes, over the 1024-byte limit")
	wantUsage(t, auditRun(ctx, &auditOptions{operateOptions: o, Query: store.ToolCallQuery{Last: -1}}), "audit: --limit -1: want 0 (all) or more")
	wantUsage(t, sessionsRun(ctx, &sessionsOptions{operateOptions: o, Limit: -2}), "sessions: --limit -2: want 0 (all) or more")
	wantUsage(t, eventsRun(ctx, &eventsOptions{operateOptions: o, Task: "x"}), `events: --task "x": want a task id, a positive number such as 7`)
	wantUsage(t, logsRun(ctx, &logsOptions{operateOptions: o, Agent: "alice", Raw: true, Pretty: true}), "logs: --raw and --pretty exclude each other")

	o.ConfigPath = filepath.Join(filepath.Dir(o.ConfigPath), "missing.yaml")
	if err := statusRun(ctx, &statusOptions{operateOptions: o}); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("status with a missing config: %v, want an error naming it", err)
	}
}

// TestReadsRefuseAnAgentNobodyKnows: sessions, events, audit and logs of an
// agent that neither the config has nor the store has recorded are
// refused, naming the agents, rather than printing nothing; one the config
// has is read, though it has done nothing yet, and so is a name the store
// has recorded (the merge queue's events).
func TestReadsRefuseAnAgentNobodyKnows(t *testing.T) {
	ctx := context.Background()
	o := initedRepo(t, "alice")
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, cfg.StoreTarget(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The merge queue logs its events under its own name.
	insertEvent(t, db, store.EventRecord{Agent: "merge", From: "queued", To: "testing", Actor: "merge-queue", Reason: "candidate"})
	db.Close()
	wantUsage(t, sessionsRun(ctx, &sessionsOptions{operateOptions: o, Agent: "zed"}), `sessions: no agent "zed" (agents: alice)`)
	wantUsage(t, eventsRun(ctx, &eventsOptions{operateOptions: o, Agent: "zed"}), `events: --agent: no agent "zed" (agents: alice)`)
	wantUsage(t, auditRun(ctx, &auditOptions{operateOptions: o, Query: store.ToolCallQuery{Agent: "zed"}}), `audit: --agent: no agent "zed" (agents: alice)`)
	wantUsage(t, logsRun(ctx, &logsOptions{operateOptions: o, Agent: "zed"}), `logs: no agent "zed" with logs (agents: alice)`)
	if err := sessionsRun(ctx, &sessionsOptions{operateOptions: o, Agent: "alice"}); err != nil {
		t.Errorf("sessions alice, in the config: %v", err)
	}
	if err := eventsRun(ctx, &eventsOptions{operateOptions: o, Agent: "alice"}); err != nil {
		t.Errorf("events --agent alice, in the config: %v", err)
	}
	if err := eventsRun(ctx, &eventsOptions{operateOptions: o, Agent: "merge"}); err != nil {
		t.Errorf("events --agent merge, which has events: %v", err)
	}
}
