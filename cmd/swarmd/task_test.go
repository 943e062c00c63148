package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/cli"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

const taskAgents = `
listen: ""
defaults:
  backend: idle
backends:
  idle:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; sleep 3600"]
agents:
  - {name: alice, role: x}
  - {name: bob, role: x}
  - {name: carol, role: x}
`

// taskRepo is a repository with a config and swarm.db as the daemon leaves
// them: the operator's commands find the database through the config.
func taskRepo(t *testing.T) (cfg, db string) {
	t.Helper()
	repo := gitRepo(t)
	cfg = writeConfig(t, repo, taskAgents)
	db = filepath.Join(repo, ".swarm", "swarm.db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := mailbox.Open(context.Background(), db, store.Options{}, mailbox.Options{Agents: []string{"alice", "bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	return cfg, db
}

// opEnv is the operator's shell: no session variables, whatever the
// environment the tests run in holds.
func opEnv() []string {
	return []string{"SWARM_DB_PATH=", "SWARM_AGENTS=", "SWARM_AGENT_ID=", "SWARM_SESSION_ID=", proc.MarkerEnv + "="}
}

// sessionID is a session id of agent in runner.newSessionID's form.
func sessionID(agent string, seq int) string { return fmt.Sprintf("%s-%d-0123456789ab", agent, seq) }

// sessionEnv is what session seq of agent gives the commands it runs: the
// SWARM_* variables and the process-tree marker that proves the session.
func sessionEnv(db, agent string, seq int) []string {
	id := sessionID(agent, seq)
	return []string{"SWARM_DB_PATH=" + db, "SWARM_AGENTS=alice,bob,carol", "SWARM_AGENT_ID=" + agent,
		"SWARM_SESSION_ID=" + id, proc.MarkerEnv + "=swarmd\x1ftest\x1f" + id}
}

// mustCLI runs swarmd and fails the test unless it exits 0.
func mustCLI(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, stderr, code := runCLI(t, env, "", args...)
	if code != 0 {
		t.Fatalf("swarmd %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return out
}

// recordReviewersAsTheDaemon writes cfg's agents and their reviewers into
// db, as a daemon running cfg does at start and on reload.
func recordReviewersAsTheDaemon(t *testing.T, cfg, db string) {
	t.Helper()
	c, err := cli.LoadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mailbox.Open(context.Background(), db, store.Options{NoCreate: true}, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := daemon.RecordMembers(context.Background(), m.Store(), "test-host:"+c.StateDir, c); err != nil {
		t.Fatal(err)
	}
}

// recordSession writes an ended session's row into db, as the daemon's
// settlement does.
func recordSession(t *testing.T, db string, rec store.SessionRecord) {
	t.Helper()
	ctx := context.Background()
	m, err := mailbox.Open(ctx, db, store.Options{NoCreate: true}, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	end := rec.Started.Add(time.Second)
	rec.Ended, rec.Outcome = &end, "success"
	tx, err := m.Store().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := m.Store().SettleSessionTx(ctx, tx.Tx, rec, end); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func taskBoard(t *testing.T, db string) *taskboard.Board {
	t.Helper()
	m, err := mailbox.Open(context.Background(), db, store.Options{NoCreate: true}, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	b, err := daemon.OpenTaskBoard(context.Background(), m.Store(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantTask(t *testing.T, b *taskboard.Board, id int64, state string) taskboard.Task {
	t.Helper()
	tk, err := b.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.StateName != state {
		t.Fatalf("task %d is %s, want %s", id, tk.StateName, state)
	}
	return tk
}

func wantOut(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s printed %q, want %q", what, got, want)
	}
}

// TestTaskCLI walks every command's happy path: the operator's backlog,
// agents claiming and reporting from their sessions, dependencies and
// subtasks moving by themselves, and the history in show and events.
func TestTaskCLI(t *testing.T) {
	cfg, db := taskRepo(t)
	b := taskBoard(t, db)
	op := func(args ...string) string { t.Helper(); return mustCLI(t, opEnv(), append(args, "-c", cfg)...) }
	alice, bob, carol := sessionEnv(db, "alice", 1), sessionEnv(db, "bob", 1), sessionEnv(db, "carol", 1)

	// add prints the new id alone, nothing on stderr.
	out, stderr, code := runCLI(t, opEnv(), "", "task", "add", "Fix the parser", "--priority", "5", "-c", cfg)
	if code != 0 || out != "1\n" || stderr != "" {
		t.Fatalf("task add: exit %d, stdout %q, stderr %q; want the id alone", code, out, stderr)
	}
	wantOut(t, "add --after --to", op("task", "add", "Write the docs", "--after", "1", "--to", "bob"), "2\n")
	out, stderr, code = runCLI(t, opEnv(), "line one\nline two\n", "task", "add", "Review", "--body", "-", "--plan", "-c", cfg)
	if code != 0 || out != "3\n" {
		t.Fatalf("add --body - --plan: exit %d %q %q", code, out, stderr)
	}
	wantOut(t, "add --priority -1", op("task", "add", "Tidy up", "--priority=-1"), "4\n")
	wantTask(t, b, 2, "BLOCKED")
	if tk := wantTask(t, b, 3, "PLANNED"); tk.Body != "line one\nline two\n" {
		t.Errorf("body from stdin = %q", tk.Body)
	}

	table := op("task", "list")
	for _, row := range []string{"ID  STATE", "1   OPEN     5", "2   BLOCKED  0         bob", "3   PLANNED", "4   OPEN     -1"} {
		if !strings.Contains(table, row) {
			t.Errorf("task list lacks %q:\n%s", row, table)
		}
	}
	if ids := listIDs(t, op("task", "list", "--state", "blocked", "--json")); !slices.Equal(ids, []int64{2}) {
		t.Errorf("list --state blocked = %v, want [2]", ids)
	}
	if ids := listIDs(t, op("task", "list", "--agent", "bob", "--json")); !slices.Equal(ids, []int64{2}) {
		t.Errorf("list --agent bob = %v, want [2]", ids)
	}
	wantOut(t, "list --json with no match", op("task", "list", "--state", "CANCELLED", "--json"), "[]\n")

	// alice claims the best task, works on it, finishes; its dependent opens.
	out = mustCLI(t, alice, "task", "claim")
	if !strings.HasPrefix(out, "task 1: Fix the parser\n") || !strings.Contains(out, "CLAIMED") {
		t.Fatalf("claim printed:\n%s", out)
	}
	wantOut(t, "start", mustCLI(t, alice, "task", "start"), "task 1 is IN_PROGRESS\n")
	wantOut(t, "done", mustCLI(t, alice, "task", "done", "--summary", "fixed, with a test"), "task 1 is CLOSED\n")
	if tk := wantTask(t, b, 1, "CLOSED"); tk.Result != "fixed, with a test" || tk.Claimant != "alice" {
		t.Errorf("task 1 after done: %+v", tk)
	}
	wantTask(t, b, 2, "OPEN")

	// bob claims his task by id, blocks, is requeued, claims it, fails; retry.
	var claimed map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, bob, "task", "claim", "2", "--json")), &claimed); err != nil {
		t.Fatal(err)
	}
	if claimed["state"] != "CLAIMED" || claimed["claimant"] != "bob" || claimed["claim_session"] != sessionID("bob", 1) {
		t.Errorf("claim 2 --json = %v", claimed)
	}
	wantOut(t, "block --reason", mustCLI(t, bob, "task", "block", "--reason", "needs a password"), "task 2 is BLOCKED\n")
	wantOut(t, "requeue", op("task", "requeue", "2"), "task 2 is OPEN\n")
	if out := mustCLI(t, bob, "task", "claim"); !strings.HasPrefix(out, "task 2: ") {
		t.Fatalf("bob's claim took %q, want his task 2", out)
	}
	wantOut(t, "fail", mustCLI(t, bob, "task", "fail", "--reason", "the API is gone"), "task 2 is FAILED\n")
	wantOut(t, "retry", op("task", "retry", "2"), "task 2 is OPEN\n")
	if tk := wantTask(t, b, 2, "OPEN"); tk.Retries != 1 {
		t.Errorf("retries after retry = %d, want 1", tk.Retries)
	}

	// The planned task is approved; carol claims it and splits it; the
	// subtasks finished, it finishes by itself.
	wantOut(t, "approve", op("task", "approve", "3"), "task 3 is OPEN\n")
	if out := mustCLI(t, carol, "task", "claim"); !strings.HasPrefix(out, "task 3: Review") || !strings.Contains(out, "line one\nline two") {
		t.Fatalf("carol's claim:\n%s", out)
	}
	wantOut(t, "split", mustCLI(t, carol, "task", "split", "Part A", "Part B"), "5\tPart A\n6\tPart B\n")
	wantTask(t, b, 3, "WAITING_FOR_SUBTASKS")
	mustCLI(t, carol, "task", "claim", "5")
	mustCLI(t, carol, "task", "done")
	mustCLI(t, alice, "task", "claim", "6")
	mustCLI(t, alice, "task", "done")
	wantTask(t, b, 3, "CLOSED")

	// block --on waits for another task; the operator cancels it.
	mustCLI(t, alice, "task", "claim", "4")
	wantOut(t, "block --on", mustCLI(t, alice, "task", "block", "--on", "2"), "task 4 is BLOCKED\n")
	if tk := wantTask(t, b, 4, "BLOCKED"); !slices.Equal(tk.Deps, []int64{2}) {
		t.Errorf("task 4 waits for %v, want [2]", tk.Deps)
	}
	wantOut(t, "cancel", op("task", "cancel", "4"), "task 4 is CANCELLED\n")

	transitions := []string{
		"(new) --> OPEN by operator: added: Fix the parser",
		"OPEN --> CLAIMED by agent:alice: claimed",
		"CLAIMED --> IN_PROGRESS by agent:alice: started",
		"IN_PROGRESS --completed--> DONE by agent:alice: done: fixed, with a test",
		"DONE --completed--> CLOSED by swarmd: done, and nothing reviews or merges it",
	}
	show := op("task", "show", "1")
	for _, want := range append([]string{"task 1: Fix the parser", "result:", "fixed, with a test", "history:"}, transitions...) {
		if !strings.Contains(show, want) {
			t.Errorf("task show 1 lacks %q:\n%s", want, show)
		}
	}
	events := strings.Split(strings.TrimSpace(op("events", "--task", "1")), "\n")
	if len(events) != len(transitions) {
		t.Fatalf("events --task 1 printed %d lines, want %d:\n%s", len(events), len(transitions), strings.Join(events, "\n"))
	}
	for i, l := range events {
		if !strings.HasSuffix(l, " task 1: "+transitions[i]) {
			t.Errorf("events --task 1 line %d = %q, want it to end with %q", i, l, "task 1: "+transitions[i])
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(op("events", "--task", "2", "--json")), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil || e["task_id"] != float64(2) || e["effect"] != "task" {
			t.Errorf("events --task 2 --json line %q (%v)", l, err)
		}
	}
	// The whole log renders task transitions the same way.
	if all := op("events"); !strings.Contains(all, " task 4: BLOCKED --aborted--> CANCELLED by operator: cancelled") {
		t.Errorf("events lacks task 4's cancel:\n%s", all)
	}
}

func listIDs(t *testing.T, out string) []int64 {
	t.Helper()
	var ts []struct{ ID int64 }
	if err := json.Unmarshal([]byte(out), &ts); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	ids := make([]int64, 0, len(ts))
	for _, tk := range ts {
		ids = append(ids, tk.ID)
	}
	return ids
}

// TestTaskJSONShape pins the documented JSON: the keys of a task object
// (list, show, add, claim and every verb print the same one), show's
// history, and states by their seed names.
func TestTaskJSONShape(t *testing.T) {
	cfg, db := taskRepo(t)
	op := func(args ...string) string { t.Helper(); return mustCLI(t, opEnv(), append(args, "-c", cfg)...) }
	op("task", "add", "First")
	// Task 2 is claimed by alice, whom bob reviews: the review keys show.
	writeConfig(t, filepath.Dir(cfg), strings.Replace(taskAgents, "{name: alice, role: x}", "{name: alice, role: x, reviewer: bob}", 1))
	var added map[string]any
	if err := json.Unmarshal([]byte(op("task", "add", "Second", "--body", "b", "--to", "alice", "--after", "1", "--parent", "1", "--json")), &added); err != nil {
		t.Fatal(err)
	}
	alice := sessionEnv(db, "alice", 1)
	mustCLI(t, alice, "task", "claim", "1")
	mustCLI(t, alice, "task", "done", "--summary", "ok")
	recordReviewersAsTheDaemon(t, cfg, db)
	mustCLI(t, alice, "task", "claim", "2")

	var list []map[string]any
	if err := json.Unmarshal([]byte(op("task", "list", "--json")), &list); err != nil || len(list) != 2 {
		t.Fatalf("list --json: %v %v", list, err)
	}
	always := []string{"id", "title", "priority", "state", "retries", "max_retries", "max_iterations", "created_by", "created_at", "updated_at"}
	want := append(slices.Clone(always), "body", "assignee", "parent", "after", "claimant", "claim_session",
		"reviewer", "review_state", "iteration", "worker")
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(list[1])); !slices.Equal(got, want) {
		t.Errorf("task 2's keys = %v, want %v", got, want)
	}
	for _, k := range always {
		if _, ok := added[k]; !ok {
			t.Errorf("add --json lacks %q: %v", k, added)
		}
	}
	if list[0]["state"] != "CLOSED" || list[1]["state"] != "CLAIMED" || added["state"] != "BLOCKED" {
		t.Errorf("states by name: %v, %v, added %v", list[0]["state"], list[1]["state"], added["state"])
	}
	if list[1]["after"].([]any)[0] != float64(1) || list[1]["parent"] != float64(1) {
		t.Errorf("after/parent: %v", list[1])
	}

	// alice's session that claimed and finished task 1 used tokens (its
	// settlement records the task); her session on task 2 (not recorded)
	// and bob's session on nothing did not.
	recordSession(t, db, store.SessionRecord{SessionID: sessionID("alice", 1), Agent: "alice", Seq: 1,
		Started: time.Now().Add(-time.Second), TokensIn: 1200, TokensOut: 300, CostUSD: 0.42, Task: 1})
	recordSession(t, db, store.SessionRecord{SessionID: sessionID("bob", 1), Agent: "bob", Seq: 1,
		Started: time.Now().Add(-time.Second), TokensIn: 99999, TokensOut: 9999, CostUSD: 9})
	var show map[string]any
	if err := json.Unmarshal([]byte(op("task", "show", "1", "--json")), &show); err != nil {
		t.Fatal(err)
	}
	if sp, _ := json.Marshal(show["spend"]); string(sp) != `{"cost_usd":0.42,"session_ids":["alice-1-0123456789ab"],"sessions":1,"tokens_in":1200,"tokens_out":300}` {
		t.Errorf("show --json spend = %s", sp)
	}
	if text := op("task", "show", "1"); !strings.Contains(text, "\nspend: 1 session: 1200 tokens in, 300 out, cost $0.4200\n") {
		t.Errorf("task show 1 lacks its spend:\n%s", text)
	}
	hist, _ := show["history"].([]any)
	if show["id"] != float64(1) || show["result"] != "ok" || len(hist) != 4 {
		t.Fatalf("show --json: %v", show)
	}
	first, last := hist[0].(map[string]any), hist[3].(map[string]any)
	if first["from"] != "" || first["to"] != "OPEN" || last["from"] != "DONE" || last["to"] != "CLOSED" ||
		last["transition_reason"] != "completed" || last["actor"] != "swarmd" {
		t.Errorf("history: first %v, last %v", first, last)
	}
	for _, e := range hist {
		for k := range e.(map[string]any) {
			if !slices.Contains([]string{"id", "at", "from", "to", "actor", "reason", "transition_reason", "session"}, k) {
				t.Errorf("history entry has undocumented key %q", k)
			}
		}
	}
}

// TestTaskCLIErrors: a request the state or holder forbids and an unknown id
// exit 1 naming the task's state; usage errors and invalid requests exit 2;
// every error is one line.
func TestTaskCLIErrors(t *testing.T) {
	cfg, db := taskRepo(t)
	op := opEnv()
	alice, bob := sessionEnv(db, "alice", 1), sessionEnv(db, "bob", 1)
	mustCLI(t, op, "task", "add", "For bob", "--to", "bob", "-c", cfg) // 1
	mustCLI(t, op, "task", "add", "Anyone's", "-c", cfg)               // 2
	mustCLI(t, alice, "task", "claim", "2")
	mustCLI(t, alice, "task", "start")

	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"unknown id", op, []string{"task", "show", "99"}, 1, "task 99: no such task"},
		{"unknown id to cancel", op, []string{"task", "cancel", "99"}, 1, "no such task"},
		{"unknown dependency", op, []string{"task", "add", "x", "--after", "99"}, 1, "no such task"},
		{"approve an OPEN task", op, []string{"task", "approve", "1"}, 1, "task 1 is OPEN"},
		{"retry an OPEN task", op, []string{"task", "retry", "1"}, 1, "task 1 is OPEN"},
		{"requeue an OPEN task", op, []string{"task", "requeue", "1"}, 1, "task 1 is OPEN"},
		{"start twice", alice, []string{"task", "start"}, 1, "task 2 is IN_PROGRESS"},
		{"claim while holding", alice, []string{"task", "claim"}, 1, "alice already holds task 2 (IN_PROGRESS)"},
		{"claim another's task", alice, []string{"task", "claim", "1"}, 1, "assigned to bob"},
		{"holds nothing", bob, []string{"task", "done"}, 1, "bob holds no task"},
		{"nothing to claim", sessionEnv(db, "carol", 1), []string{"task", "claim"}, 1, "no OPEN task that carol may claim"},
		{"bad id", op, []string{"task", "show", "abc"}, 2, `id "abc": want a task id`},
		{"zero id", op, []string{"task", "cancel", "0"}, 2, "want a task id"},
		{"bad --after", op, []string{"task", "add", "x", "--after", "one"}, 2, `--after "one"`},
		{"bad state", op, []string{"task", "list", "--state", "nope"}, 2, "unknown task state"},
		{"bad priority", op, []string{"task", "add", "x", "--priority", "high"}, 2, `--priority: "high" is not a number`},
		{"empty title", op, []string{"task", "add", " "}, 2, "a task needs a title"},
		{"two-line title", op, []string{"task", "add", "a\nb"}, 2, "one line"},
		{"unknown assignee", op, []string{"task", "add", "x", "--to", "dave"}, 2, `no agent "dave"`},
		{"missing id", op, []string{"task", "show"}, 2, "accepts 1 arg"},
		{"unknown verb", op, []string{"task", "frob"}, 2, `unknown command "frob"`},
		{"session verb outside a session", op, []string{"task", "done"}, 2, "for an agent inside its session"},
		{"operator verb inside a session", alice, []string{"task", "cancel", "1"}, 2, "an operator command"},
		{"fail without a reason", alice, []string{"task", "fail"}, 2, "--reason TEXT is required"},
		{"block with both", alice, []string{"task", "block", "--on", "1", "--reason", "x"}, 2, "exactly one of"},
		{"block with neither", alice, []string{"task", "block"}, 2, "exactly one of"},
		{"split with no title", alice, []string{"task", "split"}, 2, "requires at least 1 arg"},
		{"split with an empty title", alice, []string{"task", "split", " "}, 2, "subtask title"},
		{"assign a held task", op, []string{"task", "assign", "2", "bob"}, 1, "task 2 is IN_PROGRESS, held by alice: requeue it first"},
		{"assign an unknown task", op, []string{"task", "assign", "99", "bob"}, 1, "task 99: no such task"},
		{"assign to nobody", op, []string{"task", "assign", "1"}, 2, "give exactly one of AGENT, --anyone or --reviewer AGENT"},
		{"assign to one and anyone", op, []string{"task", "assign", "1", "carol", "--anyone"}, 2, "give exactly one of AGENT, --anyone or --reviewer AGENT"},
		{"assign to an unknown agent", op, []string{"task", "assign", "1", "dave"}, 2, `no agent "dave"`},
		{"assign inside a session", alice, []string{"task", "assign", "1", "carol"}, 2, "an operator command"},
		{"events of an unknown task", op, []string{"events", "--task", "99"}, 1, "no such task"},
		{"events with a bad task id", op, []string{"events", "--task", "x"}, 2, `--task "x"`},
	} {
		args := c.args
		if !slices.Contains(c.env, "SWARM_DB_PATH="+db) {
			args = append(slices.Clone(args), "-c", cfg)
		}
		_, stderr, code := runCLI(t, c.env, "", args...)
		if code != c.code || !strings.Contains(stderr, c.want) || !strings.HasPrefix(stderr, "swarmd: ") ||
			strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line containing %q", c.name, code, stderr, c.code, c.want)
		}
	}
	// The refused requests changed nothing.
	b := taskBoard(t, db)
	if tk := wantTask(t, b, 1, "OPEN"); tk.Assignee != "bob" {
		t.Errorf("task 1 assigned to %q", tk.Assignee)
	}
	if tk := wantTask(t, b, 2, "IN_PROGRESS"); tk.Claimant != "alice" || tk.Assignee != "" {
		t.Errorf("task 2 held by %q, assigned to %q", tk.Claimant, tk.Assignee)
	}
	if ts, _ := b.List(context.Background(), taskboard.Filter{}); len(ts) != 2 {
		t.Errorf("%d tasks, want 2: a refused add stored one", len(ts))
	}
}

// TestTaskSessionIdentity: inside a session the process-tree marker decides
// who acts, as for mail: the claim is the session's agent's and session's,
// a SWARM_AGENT_ID naming anyone else is refused, and a stale session of
// the same agent is fenced out of the task a newer one took over.
func TestTaskSessionIdentity(t *testing.T) {
	cfg, db := taskRepo(t)
	b := taskBoard(t, db)
	mustCLI(t, opEnv(), "task", "add", "Only task", "-c", cfg)
	// The marker alone, with no SWARM_AGENT_ID: alice's session 1.
	s1 := []string{"SWARM_DB_PATH=" + db, "SWARM_AGENTS=alice,bob,carol", "SWARM_AGENT_ID=", "SWARM_SESSION_ID=",
		proc.MarkerEnv + "=swarmd\x1ftest\x1f" + sessionID("alice", 1)}
	mustCLI(t, s1, "task", "claim")
	if tk := wantTask(t, b, 1, "CLAIMED"); tk.Claimant != "alice" || tk.ClaimSession != sessionID("alice", 1) {
		t.Fatalf("claim from alice's session: claimant %q session %q", tk.Claimant, tk.ClaimSession)
	}
	_, stderr, code := runCLI(t, append(slices.Clone(s1), "SWARM_AGENT_ID=bob"), "", "task", "done")
	if code != 2 || !strings.Contains(stderr, "SWARM_AGENT_ID is bob, but this session is alice's") {
		t.Errorf("SWARM_AGENT_ID=bob in alice's session: exit %d %q", code, stderr)
	}
	// Session 2 of alice continues the task (start moves the claim to it);
	// session 1, still running somewhere, may no longer report on it.
	s2 := sessionEnv(db, "alice", 2)
	mustCLI(t, s2, "task", "start")
	_, stderr, code = runCLI(t, s1, "", "task", "done")
	if code != 1 || !strings.Contains(stderr, "belongs to session "+sessionID("alice", 2)) {
		t.Errorf("stale session's done: exit %d %q", code, stderr)
	}
	wantTask(t, b, 1, "IN_PROGRESS")
	mustCLI(t, s2, "task", "done")
	out := mustCLI(t, opEnv(), "events", "--task", "1", "-c", cfg)
	if !strings.Contains(out, "IN_PROGRESS --completed--> DONE by agent:alice") {
		t.Errorf("events do not name alice:\n%s", out)
	}
}

// TestTaskClaimFollowsTheReviewer: a claim from the CLI starts the review
// loop as the runner's does: with the claimant's reviewer from the config
// (outside a session) or from what the daemon recorded in swarm.db (inside
// one), so that DONE waits for the reviewer instead of closing the task. A
// session that clears SWARM_REVIEWER does not escape its review.
func TestTaskClaimFollowsTheReviewer(t *testing.T) {
	cfg, db := taskRepo(t)
	writeConfig(t, filepath.Dir(cfg), strings.Replace(taskAgents, "{name: alice, role: x}", "{name: alice, role: x, reviewer: bob, max_iterations: 2}", 1))
	b := taskBoard(t, db)
	for range 3 {
		mustCLI(t, opEnv(), "task", "add", "Reviewed", "-c", cfg)
	}
	// alice's shell, the database found through the config.
	shell := append(opEnv(), "SWARM_AGENT_ID=alice")
	mustCLI(t, shell, "task", "claim", "1", "-c", cfg)
	wantOut(t, "done", mustCLI(t, shell, "task", "done", "-c", cfg), "task 1 is DONE\n")
	// alice's session, which tries to skip its review: the daemon's record
	// decides, not the environment.
	recordReviewersAsTheDaemon(t, cfg, db)
	session := append(sessionEnv(db, "alice", 1), "SWARM_REVIEWER=", "SWARM_MAX_ITERATIONS=0")
	mustCLI(t, session, "task", "claim", "2")
	wantOut(t, "done", mustCLI(t, session, "task", "done"), "task 2 is DONE\n")
	for _, id := range []int64{1, 2} {
		if tk := wantTask(t, b, id, "DONE"); tk.Reviewer != "bob" || tk.ReviewState != "reviewing" || tk.MaxIterations != 2 || tk.Worker != "alice" {
			t.Errorf("task %d: reviewer %q, review state %q, max_iterations %d, worker %q", id, tk.Reviewer, tk.ReviewState, tk.MaxIterations, tk.Worker)
		}
	}
	// A session whose agent nobody reviews closes its task at once, even
	// if it names a reviewer itself.
	carol := append(sessionEnv(db, "carol", 1), "SWARM_REVIEWER=bob")
	mustCLI(t, carol, "task", "claim", "3")
	wantOut(t, "done", mustCLI(t, carol, "task", "done"), "task 3 is CLOSED\n")
}

// TestTaskDoneFromARealSession: the runner claims a task for the session it
// starts; the session runs the CLI found on its PATH with only the
// environment swarmd gave it, finishes that task as its own agent and
// session (the holder of the runner's claim), then claims and finishes
// another itself, which goes to alice's reviewer as the first did.
func TestTaskDoneFromARealSession(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
backends:
  worker:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; swarmd task done --summary \"done by $SWARM_AGENT_ID\" && swarmd task claim 2 >/dev/null && swarmd task done --summary second; exec sleep 3600"]
  idle:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; exec sleep 3600"]
agents:
  - {name: alice, role: x, backend: worker, reviewer: bob}
  - {name: bob, role: x, backend: idle}
`)
	db := filepath.Join(repo, ".swarm", "swarm.db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := mailbox.Open(context.Background(), db, store.Options{}, mailbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	mustCLI(t, opEnv(), "task", "add", "First", "--to", "alice", "-c", cfg)
	mustCLI(t, opEnv(), "task", "add", "Second", "--to", "alice", "-c", cfg)
	d := startDaemon(t, cfg)
	b := taskBoard(t, db)
	var tk taskboard.Task
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if tk, err = b.Get(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		if tk.StateName == "DONE" || tk.StateName == "CLOSED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task 2 is %s after 20s; daemon log:\n%s", tk.StateName, d.log())
		}
	}
	wantTask(t, b, 2, "DONE") // reviewed: not closed
	first := wantTask(t, b, 1, "DONE")
	if agent, ok := runner.AgentOfSession(first.ClaimSession); first.Claimant != "alice" || !ok || agent != "alice" || first.Result != "done by alice" {
		t.Errorf("task 1: claimant %q, session %q, result %q", first.Claimant, first.ClaimSession, first.Result)
	}
	if tk.ClaimSession != first.ClaimSession || tk.Result != "second" {
		t.Errorf("task 2: session %q (task 1's %q), result %q", tk.ClaimSession, first.ClaimSession, tk.Result)
	}
	for _, x := range []taskboard.Task{first, tk} {
		if x.Reviewer != "bob" || x.ReviewState != "reviewing" {
			t.Errorf("task %d: reviewer %q, review state %q; want bob reviewing", x.ID, x.Reviewer, x.ReviewState)
		}
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
}

// TestTaskClaimConcurrent: 10 processes claim and finish, each as its own
// agent in its own session, until 100 OPEN tasks are gone: every task is
// claimed exactly once and no process sees "database is locked".
func TestTaskClaimConcurrent(t *testing.T) {
	claimants, tasks := 10, 100
	if testing.Short() {
		claimants, tasks = 5, 30
	}
	_, db := taskRepo(t)
	b := taskBoard(t, db)
	for i := range tasks {
		if _, err := b.Add(context.Background(), taskboard.NewTask{Title: fmt.Sprintf("task %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		claimed = make(map[int64][]string) // task -> agents that claimed it
		wg      sync.WaitGroup
	)
	failures := make(chan string, claimants*(tasks+1))
	for p := range claimants {
		agent := fmt.Sprintf("w%02d", p)
		env := []string{"SWARM_DB_PATH=" + db, "SWARM_AGENTS=", "SWARM_AGENT_ID=" + agent,
			"SWARM_SESSION_ID=" + sessionID(agent, 1), proc.MarkerEnv + "=swarmd\x1ftest\x1f" + sessionID(agent, 1)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// No claimant can claim more tasks than there are: a claim
			// that succeeds without taking one ends the loop all the same.
			for range tasks + 1 {
				out, stderr, code := runCLI(t, env, "", "task", "claim", "--json")
				if code == 1 && strings.Contains(stderr, "no OPEN task") {
					return
				}
				var tk taskboard.Task
				if code != 0 || json.Unmarshal([]byte(out), &tk) != nil {
					failures <- fmt.Sprintf("%s: claim: exit %d %q %q", agent, code, out, stderr)
					return
				}
				mu.Lock()
				claimed[tk.ID] = append(claimed[tk.ID], agent)
				mu.Unlock()
				if _, stderr, code := runCLI(t, env, "", "task", "done"); code != 0 {
					failures <- fmt.Sprintf("%s: done %d: exit %d %q", agent, tk.ID, code, stderr)
					return
				}
			}
			failures <- fmt.Sprintf("%s: claimed more than the %d tasks there are", agent, tasks)
		}()
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f) // "database is locked" would land here
	}
	if len(claimed) != tasks {
		t.Errorf("%d tasks claimed, want %d", len(claimed), tasks)
	}
	for id, who := range claimed {
		if len(who) != 1 {
			t.Errorf("task %d claimed by %v", id, who)
		}
	}
	// The event log agrees: one claim per task, every task CLOSED.
	sqldb, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	var claims, distinct, closed int
	if err := sqldb.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT task_id) FROM events WHERE to_state = 'CLAIMED' AND task_id IS NOT NULL`).Scan(&claims, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := sqldb.QueryRow(`SELECT COUNT(*) FROM tasks WHERE state = 'CLOSED'`).Scan(&closed); err != nil {
		t.Fatal(err)
	}
	if claims != tasks || distinct != tasks || closed != tasks {
		t.Errorf("%d claim events for %d tasks, %d closed; want %d of each", claims, distinct, closed, tasks)
	}
}

// TestTaskHelpAndCompletion: every task command says in one line what it
// does and shows an example; completion offers states and task ids.
func TestTaskHelpAndCompletion(t *testing.T) {
	s := streams{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &bytes.Buffer{}, getenv: func(string) string { return "" }}
	cmds := []*cobra.Command{cli.NewTaskCommand(s.cli()), cli.NewEventsCommand(s.cli())}
	cmds = append(cmds, cmds[0].Commands()...)
	names := map[string]bool{}
	for _, c := range cmds {
		names[c.Name()] = true
		if c.Short == "" || strings.Contains(c.Short, "\n") || c.Example == "" {
			t.Errorf("%s: Short %q, Example %q: want a one-line Short and an Example", c.CommandPath(), c.Short, c.Example)
		}
	}
	for _, verb := range []string{"add", "list", "show", "approve", "cancel", "retry", "requeue", "assign", "claim", "start", "done", "fail", "block", "split"} {
		if !names[verb] {
			t.Errorf("no task %s command", verb)
		}
	}

	cfg, _ := taskRepo(t)
	mustCLI(t, opEnv(), "task", "add", "Complete me", "-c", cfg)
	out := mustCLI(t, opEnv(), "__complete", "task", "show", "-c", cfg, "")
	if !strings.Contains(out, "1\tOPEN Complete me") {
		t.Errorf("task id completion:\n%s", out)
	}
	out = mustCLI(t, opEnv(), "__complete", "task", "list", "--state", "")
	if !strings.Contains(out, "IN_PROGRESS\n") || !strings.Contains(out, "WAITING_FOR_SUBTASKS\n") {
		t.Errorf("--state completion:\n%s", out)
	}
	out = mustCLI(t, opEnv(), "__complete", "task", "add", "x", "-c", cfg, "--to", "")
	if !strings.Contains(out, "alice\nbob\ncarol\n") {
		t.Errorf("--to completion:\n%s", out)
	}
	out = mustCLI(t, opEnv(), "__complete", "task", "assign", "-c", cfg, "")
	if !strings.Contains(out, "1\tOPEN Complete me") {
		t.Errorf("task assign's id completion:\n%s", out)
	}
	out = mustCLI(t, opEnv(), "__complete", "task", "assign", "1", "-c", cfg, "")
	if !strings.Contains(out, "alice\nbob\ncarol\n") {
		t.Errorf("task assign's agent completion:\n%s", out)
	}
}

// FuzzTaskArgs runs the task CLI in-process on arbitrary arguments and
// standard input, as the operator or from alice's session: it never panics,
// exits 0, 1 or 2, and an error is one line.
func FuzzTaskArgs(f *testing.F) {
	for _, seed := range []string{
		"add\x00Fix it\x00--priority\x003",
		"add\x00x\x00--body\x00-\x00--to\x00bob\x00--after\x001,2\x00--plan",
		"add\x00\xff\xfe\x00--parent\x00#1",
		"list\x00--state\x00in_progress\x00--json",
		"list\x00--agent\x00../../etc",
		"show\x001\x00--json",
		"claim", "claim\x00-1", "start", "done\x00--summary\x00ok",
		"fail\x00--reason\x00\x1b[2J", "block\x00--on\x001", "block\x00--reason\x00wait",
		"split\x00a\x00b\x00\n",
		"approve\x001", "cancel\x002", "retry\x001", "requeue\x00#1",
		"assign\x001\x00bob", "assign\x00#1\x00--anyone", "assign\x001", "assign\x001\x00zed\x00--anyone",
	} {
		f.Add(seed, "stdin body", false)
		f.Add(seed, "", true)
	}
	db := filepath.Join(f.TempDir(), "swarm.db")
	m, err := mailbox.Open(context.Background(), db, store.Options{}, mailbox.Options{Agents: []string{"alice", "bob", "carol"}})
	if err != nil {
		f.Fatal(err)
	}
	m.Close()
	operator := map[string]string{"SWARM_DB_PATH": db, "SWARM_AGENTS": "alice,bob,carol"}
	session := map[string]string{"SWARM_DB_PATH": db, "SWARM_AGENTS": "alice,bob,carol", "SWARM_AGENT_ID": "alice",
		"SWARM_SESSION_ID": sessionID("alice", 1), proc.MarkerEnv: "swarmd\x1ftest\x1f" + sessionID("alice", 1)}
	f.Fuzz(func(t *testing.T, args, stdin string, inSession bool) {
		env := operator
		if inSession {
			env = session
		}
		var out, errb bytes.Buffer
		argv := append([]string{"task"}, strings.Split(args, "\x00")...)
		code := Main(context.Background(), argv, streams{
			in: strings.NewReader(stdin), out: &out, err: &errb,
			getenv: func(k string) string { return env[k] },
		})
		if code < 0 || code > 2 {
			t.Fatalf("exit code %d", code)
		}
		if code != 0 {
			msg := strings.TrimSuffix(errb.String(), "\n")
			if msg == "" || strings.Contains(msg, "\n") {
				t.Fatalf("error output is not one line: %q", errb.String())
			}
		}
	})
}

// TestTaskAddReviewer: --reviewer starts the task's review loop; bad uses
// are usage errors.
func TestTaskAddReviewer(t *testing.T) {
	cfg, db := taskRepo(t)
	b := taskBoard(t, db)
	wantOut(t, "add --reviewer", mustCLI(t, opEnv(), "task", "add", "Reviewed", "--reviewer", "carol", "--max-iterations", "2", "-c", cfg), "1\n")
	if tk := wantTask(t, b, 1, "OPEN"); tk.Reviewer != "carol" || tk.MaxIterations != 2 || tk.ReviewState != "init" {
		t.Fatalf("task %+v", tk)
	}
	for _, args := range [][]string{
		{"task", "add", "x", "--reviewer", "nobody"},
		{"task", "add", "x", "--reviewer", "bob", "--to", "bob"},
		{"task", "add", "x", "--max-iterations", "2"},
	} {
		if _, stderr, code := runCLI(t, opEnv(), "", append(args, "-c", cfg)...); code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, stderr)
		}
	}
	// Who reviews is the operator's: a session that adds a task for itself
	// naming a lenient reviewer would pass review.
	for _, args := range [][]string{
		{"task", "add", "mine", "--to", "alice", "--reviewer", "carol"},
		{"task", "add", "mine", "--max-iterations", "9"},
	} {
		_, stderr, code := runCLI(t, sessionEnv(db, "alice", 1), "", args...)
		if code != 2 || !strings.Contains(stderr, "are the operator's") {
			t.Errorf("%v from alice's session: exit %d, stderr %q; want refused", args, code, stderr)
		}
	}
	if ts, err := b.List(context.Background(), taskboard.Filter{}); err != nil || len(ts) != 1 {
		t.Errorf("tasks: %d, %v; want the operator's one", len(ts), err)
	}
}

// TestTaskReportWaitsForABusyStore: `swarmd task fail` run inside a session
// while another client holds swarm.db's write lock longer than SQLite's busy
// timeout waits for it and then records the failure; with a short
// --store-wait it gives up saying that nothing was recorded, and nothing was.
func TestTaskReportWaitsForABusyStore(t *testing.T) {
	t.Parallel()
	cfg, db := taskRepo(t)
	mustCLI(t, opEnv(), "task", "add", "one", "-c", cfg)
	mustCLI(t, opEnv(), "task", "add", "two", "-c", cfg)
	s1 := sessionEnv(db, "alice", 1)
	mustCLI(t, s1, "task", "claim")
	mustCLI(t, s1, "task", "start")

	lock := func() func() {
		other, err := store.Open(context.Background(), db, store.Options{NoCreate: true})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := other.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback(); _ = other.Close() }
	}

	release := lock()
	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		o, e, c := runCLI(t, s1, "", "task", "fail", "--reason", "upstream is broken")
		done <- result{o, e, c}
	}()
	const hold = 11 * time.Second // past the busy timeout (10 s): the command must retry, not fail
	timer := time.NewTimer(hold)
	select {
	case r := <-done:
		timer.Stop()
		release()
		t.Fatalf("task fail returned while the store was locked: exit %d: %s%s", r.code, r.out, r.errOut)
	case <-timer.C:
	}
	release()
	r := <-done
	if r.code != 0 || r.out != "task 1 is FAILED\n" {
		t.Fatalf("task fail after the lock: exit %d: %q %s", r.code, r.out, r.errOut)
	}
	board := taskBoard(t, db)
	wantTask(t, board, 1, "FAILED")

	// With a short wait it gives up, says so, and records nothing.
	s2 := sessionEnv(db, "alice", 2)
	mustCLI(t, s2, "task", "claim")
	release = lock()
	start := time.Now()
	out, errOut, code := runCLI(t, s2, "", "task", "done", "--store-wait", "1s")
	took := time.Since(start)
	release()
	if code != 1 || out != "" || !strings.Contains(errOut, "nothing was recorded") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("task done on a locked store: exit %d, out %q, err %q; want exit 1 and one line saying nothing was recorded", code, out, errOut)
	}
	if took > 15*time.Second { // one try waits up to SQLite's busy timeout (10 s)
		t.Errorf("--store-wait 1s gave up after %s", took)
	}
	wantTask(t, board, 2, "CLAIMED")
}

// TestTaskReviewerClaimsNoWork: bob reviews alice's work, so his session
// claims no unassigned task, by the next one or by id (the daemon's record
// decides, not the config his session cannot read); a task assigned to him
// he claims; and carol, who is to review task 2, may not claim it.
func TestTaskReviewerClaimsNoWork(t *testing.T) {
	cfg, db := taskRepo(t)
	writeConfig(t, filepath.Dir(cfg), strings.Replace(taskAgents, "{name: alice, role: x}", "{name: alice, role: x, reviewer: bob}", 1))
	recordReviewersAsTheDaemon(t, cfg, db)
	mustCLI(t, opEnv(), "task", "add", "anyone's", "-c", cfg)
	mustCLI(t, opEnv(), "task", "add", "reviewed by carol", "--reviewer", "carol", "-c", cfg)
	bob := sessionEnv(db, "bob", 1)
	for _, args := range [][]string{{"task", "claim", "1"}, {"task", "claim", "2"}} {
		out, errOut, code := runCLI(t, bob, "", args...)
		if code != 1 || out != "" || !strings.Contains(errOut, "bob only reviews") {
			t.Errorf("bob: swarmd %s: exit %d, %q %q; want exit 1 saying he only reviews", strings.Join(args, " "), code, out, errOut)
		}
	}
	if out, errOut, code := runCLI(t, bob, "", "task", "claim"); code != 1 || !strings.Contains(errOut, "no OPEN task that bob may claim") {
		t.Errorf("bob: swarmd task claim: exit %d, %q %q; want none he may claim", code, out, errOut)
	}
	carol := sessionEnv(db, "carol", 1)
	if _, errOut, code := runCLI(t, carol, "", "task", "claim", "2"); code != 1 || !strings.Contains(errOut, "nobody reviews their own work") {
		t.Errorf("carol claiming the task she reviews: exit %d, %q", code, errOut)
	}
	mustCLI(t, opEnv(), "task", "add", "for bob", "--to", "bob", "-c", cfg)
	mustCLI(t, bob, "task", "claim", "3")
	b := taskBoard(t, db)
	wantTask(t, b, 1, "OPEN")
	wantTask(t, b, 2, "OPEN")
	if tk := wantTask(t, b, 3, "CLAIMED"); tk.Claimant != "bob" {
		t.Errorf("task 3 claimed by %q", tk.Claimant)
	}
}
