package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/store"
)

const mergeConfig = taskAgents + `
merge:
  into: main
  gate: [make test]
  timeout: 10m
`

// mergeRepo is a repository whose swarm.db holds a merged, a rejected and
// a queued entry, as a daemon's queue leaves them; the rejected entry's
// task is DONE at its head again (its rejection not sent back: the daemon
// stopped first), so that `merge retry` may queue it.
func mergeRepo(t *testing.T, body string) (cfg, db string) {
	t.Helper()
	repo := gitRepo(t)
	cfg = writeConfig(t, repo, body)
	db = filepath.Join(repo, ".swarm", "swarm.db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := store.Open(context.Background(), db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const at = "2025-01-02T03:04:05.000000Z"
	for _, row := range [][]any{
		{1, "alice", "swarm/alice/work", strings.Repeat("a", 40), "merged", "merged", "", strings.Repeat("c", 40), 1},
		{2, "bob", "swarm/bob/work", strings.Repeat("b", 40), "rejected", "conflict", "f.txt\ng.txt", "", 0},
		{3, "carol", "swarm/carol/work", strings.Repeat("d", 40), "queued", "", "", "", 0},
	} {
		if _, err := m.SQL().Exec(`INSERT INTO merge_queue (task_id, agent, branch, head, state, result, detail, candidate,
			gate_seq, enqueued_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, append(row, at, at)...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.SQL().Exec(`INSERT INTO tasks (id, title, state, head, work_head, claimant, created_by, created_at, updated_at)
		VALUES (2, 'the parser', 'DONE', ?, ?, 'bob', 'operator', ?, ?)`, strings.Repeat("b", 40), strings.Repeat("b", 40), at, at); err != nil {
		t.Fatal(err)
	}
	return cfg, db
}

func TestMergeCLI(t *testing.T) {
	cfg, db := mergeRepo(t, mergeConfig)
	op := opEnv()

	out := mustCLI(t, op, "merge", "status", "-c", cfg)
	for _, want := range []string{"merge queue into main: strategy merge, gate make test, timeout 10m", "state:   running",
		"queued:  1\n  task 3 (carol, swarm/carol/work at dddddddddddd)", "task 2 2025-01-02", "conflict: f.txt, g.txt",
		"merged at cccccccccccc"} {
		if !strings.Contains(out, want) {
			t.Errorf("merge status lacks %q:\n%s", want, out)
		}
	}
	out = mustCLI(t, op, "merge", "list", "--json", "-c", cfg)
	var es []merge.Entry
	if err := json.Unmarshal([]byte(out), &es); err != nil || len(es) != 3 || es[1].Detail != "f.txt\ng.txt" || es[2].State != merge.Queued {
		t.Fatalf("merge list --json: %v\n%s", err, out)
	}
	if out := mustCLI(t, op, "merge", "list", "-c", cfg); !strings.Contains(out, "ID  TASK  AGENT  BRANCH") ||
		!strings.Contains(out, "swarm/bob/work    bbbbbbbbbbbb  rejected") {
		t.Errorf("merge list:\n%s", out)
	}

	wantOut(t, "merge retry 2", mustCLI(t, op, "merge", "retry", "#2", "-c", cfg), "task 2 queued again: swarm/bob/work at bbbbbbbbbbbb\n")
	wantOut(t, "merge pause", mustCLI(t, op, "merge", "pause", "-c", cfg), "merge queue paused\n")
	if out := mustCLI(t, op, "merge", "status", "--json", "-c", cfg); !strings.Contains(out, `"paused": true`) ||
		!strings.Contains(out, `"paused_by": "operator"`) {
		t.Errorf("merge status --json after pause:\n%s", out)
	}
	wantOut(t, "merge resume", mustCLI(t, op, "merge", "resume", "-c", cfg), "merge queue resumed\n")

	events := mustCLI(t, op, "events", "--agent", "merge", "-c", cfg)
	for _, want := range []string{"rejected --retried--> queued", "running --paused--> paused", "paused --resumed--> running"} {
		if !strings.Contains(events, want) {
			t.Errorf("events --agent merge lacks %q:\n%s", want, events)
		}
	}
	st := merge.NewStore(openDB(t, db), nil)
	if s, err := st.Status(context.Background(), 5); err != nil || s.Paused || len(s.Queued) != 2 || s.Queued[1].Task != 2 {
		t.Fatalf("stored status = %+v, %v: want running with carol then bob queued", s, err)
	}
}

func openDB(t *testing.T, path string) *store.DB {
	t.Helper()
	m, err := store.Open(context.Background(), path, store.Options{NoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestMergeCLIErrors(t *testing.T) {
	cfg, db := mergeRepo(t, mergeConfig)
	noQueue, _ := mergeRepo(t, taskAgents)
	// Task 2 reworked and reported done at another commit since its
	// rejection: its rejected commit is not its work any more.
	m := openDB(t, db)
	if _, err := m.SQL().Exec(`UPDATE tasks SET head = ? WHERE id = 2`, strings.Repeat("e", 40)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env  []string
		args []string
		code int
		msg  string
	}{
		{opEnv(), []string{"merge", "retry", "1", "-c", cfg}, 1, "merge retry: merge queue: task 1 is merged, not rejected: only a rejected task is retried"},
		{opEnv(), []string{"merge", "retry", "9", "-c", cfg}, 1, "merge retry: merge queue: retry task 9: not in the merge queue"},
		{opEnv(), []string{"merge", "retry", "2", "-c", cfg}, 1, "merge retry: merge queue: retry task 2 at bbbbbbbbbbbb: " +
			"task 2 is DONE at frozen head eeeeeeeeeeee, not at bbbbbbbbbbbb: it was reported done again since"},
		{opEnv(), []string{"merge", "retry", "x", "-c", cfg}, 2, `merge retry "x": want a task id`},
		{opEnv(), []string{"merge", "list", "--limit", "-1", "-c", cfg}, 2, "merge list: --limit -1"},
		{opEnv(), []string{"merge", "pause", "-c", noQueue}, 2, "merge pause: swarmd.yaml has no merge section"},
		{sessionEnv(db, "alice", 1), []string{"merge", "pause"}, 2, "merge pause: an operator command; agent alice's session may not run it"},
	} {
		_, stderr, code := runCLI(t, tt.env, "", tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.msg) {
			t.Errorf("swarmd %s: exit %d, %q; want exit %d with %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.msg)
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 && tt.code == 1 {
			t.Errorf("swarmd %s: a %d-line error, want one line", strings.Join(tt.args, " "), n+1)
		}
	}
	if out := mustCLI(t, opEnv(), "merge", "status", "-c", noQueue); !strings.Contains(out, "no merge queue: swarmd.yaml has no merge section") {
		t.Errorf("merge status without a queue:\n%s", out)
	}
	// An agent may look at the queue from its session.
	if out := mustCLI(t, sessionEnv(db, "alice", 1), "merge", "status"); !strings.Contains(out, "queued:  1") {
		t.Errorf("merge status from a session:\n%s", out)
	}
}

// A gate run's log is read with swarmd logs merge, as written: gate
// output is not an agent CLI's stream.
func TestLogsOfMergeGate(t *testing.T) {
	cfg, _ := mergeRepo(t, mergeConfig)
	dir := filepath.Join(filepath.Dir(cfg), ".swarm", "logs", "merge")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	body := "=== swarmd session merge-1 seq 1 started 2025-01-02T03:04:05Z head abc ===\n$ make test\nFAIL x_test.go\n"
	if err := os.WriteFile(filepath.Join(dir, "1.log"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	wantOut(t, "logs merge", mustCLI(t, opEnv(), "logs", "merge", "-c", cfg), body)
}
