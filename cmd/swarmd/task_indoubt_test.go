package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
)

// TestTaskReportCommitAnswerLost runs a session's task reports against a
// PostgreSQL server whose answer to the report's COMMIT is lost: the report
// is stored, the command cannot know it, and it retries while the store is
// away. The retry finds the task moved on by that very report: the command
// says what it did and exits 0 (told it failed, the agent would report
// again, or otherwise), and the task moved once.
func TestTaskReportCommitAnswerLost(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "taskcut")
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := p.URL(dbName)
	op := append(opEnv(), "SWARM_DB_PATH="+url)
	alice := sessionEnv(url, "alice", 1)
	cut := func(want string, args ...string) {
		t.Helper()
		p.CutNextCommitAfter("UPDATE tasks")
		cuts := p.Cuts()
		out, errOut, code := runCLI(t, alice, "", args...)
		if p.Cuts() != cuts+1 {
			t.Fatalf("swarmd %s: %d commits cut, want 1", strings.Join(args, " "), p.Cuts()-cuts)
		}
		if code != 0 || out != want {
			t.Errorf("swarmd %s after its commit's answer was lost: exit %d, %q %s; want exit 0, %q",
				strings.Join(args, " "), code, out, errOut, want)
		}
	}
	for _, title := range []string{"one", "two", "three"} {
		mustCLI(t, op, "task", "add", title)
	}
	mustCLI(t, alice, "task", "claim", "1")
	cut("task 1 is IN_PROGRESS\n", "task", "start")
	cut("task 1 is CLOSED\n", "task", "done", "--summary", "did it")
	mustCLI(t, alice, "task", "claim", "2")
	cut("task 2 is FAILED\n", "task", "fail", "--reason", "cannot")
	mustCLI(t, alice, "task", "claim", "3")
	cut("4\tpart a\n5\tpart b\n", "task", "split", "part a", "part b")

	got, err := srv.Query(dbName, `SELECT string_agg(task_id || ':' || to_state, ',' ORDER BY id) FROM events
		WHERE agent = 'alice' AND effect = 'task'`)
	if err != nil {
		t.Fatal(err)
	}
	want := "1:CLAIMED,1:IN_PROGRESS,1:DONE,2:CLAIMED,2:FAILED,3:CLAIMED,3:WAITING_FOR_SUBTASKS,4:OPEN,5:OPEN"
	if got != want {
		t.Errorf("the session's moves: %s, want %s (each once)", got, want)
	}
}

// TestTaskClaimCommitAnswerLost: a session's `task claim` whose COMMIT's
// answer is lost retries, finds the claim its lost attempt made, and says
// it holds the task (exit 0), by id and without; the task is claimed once.
func TestTaskClaimCommitAnswerLost(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "claimcut")
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := p.URL(dbName)
	op := append(opEnv(), "SWARM_DB_PATH="+url)
	for _, title := range []string{"one", "two"} {
		mustCLI(t, op, "task", "add", title)
	}
	for i, args := range [][]string{{"task", "claim"}, {"task", "claim", "2"}} {
		alice := sessionEnv(url, "alice", i+1)
		p.CutNextCommitAfter("UPDATE tasks")
		cuts := p.Cuts()
		out, errOut, code := runCLI(t, alice, "", append(args, "--json")...)
		if p.Cuts() != cuts+1 {
			t.Fatalf("swarmd %s: %d commits cut, want 1", strings.Join(args, " "), p.Cuts()-cuts)
		}
		if want := fmt.Sprintf(`"id": %d`, i+1); code != 0 || !strings.Contains(out, want) || !strings.Contains(out, `"state": "CLAIMED"`) {
			t.Fatalf("swarmd %s after its commit's answer was lost: exit %d, %s %s; want exit 0 and task %d CLAIMED",
				strings.Join(args, " "), code, out, errOut, i+1)
		}
		mustCLI(t, alice, "task", "fail", "--reason", "let go")
	}
	got, err := srv.Query(dbName, `SELECT string_agg(task_id || ':' || to_state, ',' ORDER BY id) FROM events
		WHERE agent = 'alice' AND effect = 'task'`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "1:CLAIMED,1:FAILED,2:CLAIMED,2:FAILED"; got != want {
		t.Errorf("the sessions' moves: %s, want %s (each once)", got, want)
	}
}
