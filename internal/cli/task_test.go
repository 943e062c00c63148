package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// TestTaskAddThenList: a task the operator adds is printed by its id alone,
// and list shows it with its fields, one row under the header.
func TestTaskAddThenList(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	o, out := s.as("operator", "")
	err := taskAddRun(ctx, &taskAddOptions{dbOptions: o, New: taskboard.NewTask{Title: "Fix the parser", Assignee: "alice", Priority: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "1\n"; got != want {
		t.Errorf("task add printed %q, want %q", got, want)
	}

	o, out = s.as("operator", "")
	if err := taskListRun(ctx, &taskListOptions{dbOptions: o}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("task list:\n%s\nwant a header and one row", out)
	}
	if got, want := strings.Fields(lines[1]), []string{"1", "OPEN", "5", "alice", "-", "Fix", "the", "parser"}; !slices.Equal(got, want) {
		t.Errorf("task list row %q, want %q", got, want)
	}

	// Filtered by a state in any case, as the flag allows; none in progress.
	o, out = s.as("operator", "")
	if err := taskListRun(ctx, &taskListOptions{dbOptions: o, State: "in_progress"}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "no tasks\n"; got != want {
		t.Errorf("task list --state in_progress printed %q, want %q", got, want)
	}
}

// TestTaskAddRefusesBadInput: each mistake is a usage error (exit 2) of one
// line that names the flag and the value, and nothing is added.
func TestTaskAddRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	for _, c := range []struct {
		name string
		opts taskAddOptions
		want string
	}{
		{"an --after that is no id", taskAddOptions{New: taskboard.NewTask{Title: "x"}, After: []string{"7", "seven"}},
			`task add: --after "seven": want a task id, a positive number such as 7`},
		{"a --parent of zero", taskAddOptions{New: taskboard.NewTask{Title: "x"}, Parent: "0"},
			`task add: --parent "0": want a task id, a positive number such as 7`},
		{"an unknown --to", taskAddOptions{New: taskboard.NewTask{Title: "x", Assignee: "zed"}},
			`task add: --to: no agent "zed" (agents: alice, bob)`},
		{"a reviewer of its own work", taskAddOptions{New: taskboard.NewTask{Title: "x", Assignee: "bob", Reviewer: "bob"}},
			`task add: --reviewer bob is also --to: an agent cannot review its own work`},
		{"--max-iterations alone", taskAddOptions{New: taskboard.NewTask{Title: "x", MaxIterations: 2}},
			`task add: --max-iterations needs --reviewer`},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, out := s.as("operator", "")
			c.opts.dbOptions = o
			wantUsage(t, taskAddRun(ctx, &c.opts), c.want)
			if out.Len() != 0 {
				t.Errorf("printed %q on a refused add", out)
			}
		})
	}
	t.Run("an empty title", func(t *testing.T) {
		o, _ := s.as("operator", "")
		err := taskAddRun(ctx, &taskAddOptions{dbOptions: o, New: taskboard.NewTask{Title: "  "}})
		if err == nil || !strings.HasPrefix(err.Error(), "task add: ") {
			t.Fatalf("error %v, want a task add error", err)
		}
		wantUsage(t, err, err.Error()) // the board's words, as a usage error
	})
	o, out := s.as("operator", "")
	if err := taskListRun(ctx, &taskListOptions{dbOptions: o}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "no tasks\n"; got != want {
		t.Errorf("after the refused adds, task list printed %q, want %q", got, want)
	}
}

// TestTaskAddBodyFromStdin: --body - reads the body from standard input,
// and show prints it after the fields.
func TestTaskAddBodyFromStdin(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	o, _ := s.as("operator", "the parser drops\nthe last line\n")
	if err := taskAddRun(ctx, &taskAddOptions{dbOptions: o, New: taskboard.NewTask{Title: "Fix it", Body: "-"}}); err != nil {
		t.Fatal(err)
	}
	o, out := s.as("operator", "")
	o.JSON = true
	if err := taskShowRun(ctx, &taskShowOptions{dbOptions: o, ID: "#1"}); err != nil {
		t.Fatal(err)
	}
	var got taskWithHistory
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("task show --json: %v\n%s", err, out)
	}
	if want := "the parser drops\nthe last line\n"; got.Body != want {
		t.Errorf("body %q, want %q", got.Body, want)
	}
	if got.CreatedBy != "operator" || len(got.History) == 0 {
		t.Errorf("created by %q with %d history events; want operator and its creation", got.CreatedBy, len(got.History))
	}
}

// TestTaskSessionLifecycle: an agent claims the best task, starts it and
// reports it done; the operator's verbs are refused to it, and its verbs
// to the operator.
func TestTaskSessionLifecycle(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	for _, title := range []string{"Low", "High"} {
		o, _ := s.as("operator", "")
		prio := 0
		if title == "High" {
			prio = 9
		}
		if err := taskAddRun(ctx, &taskAddOptions{dbOptions: o, New: taskboard.NewTask{Title: title, Priority: prio}}); err != nil {
			t.Fatal(err)
		}
	}

	o, _ := s.as("operator", "")
	wantUsage(t, taskClaimRun(ctx, &taskClaimOptions{dbOptions: o}),
		"task claim: for an agent inside its session (SWARM_AGENT_ID is not set); the operator uses task cancel, retry or requeue")

	o, out := s.as("alice", "")
	if err := taskClaimRun(ctx, &taskClaimOptions{dbOptions: o}); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); first != "task 2: High" {
		t.Errorf("claim printed %q first, want the highest priority task, task 2: High", first)
	}
	o, _ = s.as("alice", "")
	err := taskClaimRun(ctx, &taskClaimOptions{dbOptions: o})
	if err == nil || err.Error() != "task claim: alice already holds task 2 (CLAIMED): finish, fail or block it first" {
		t.Errorf("a second claim: %v", err)
	}

	for _, c := range []struct{ verb, want string }{
		{"start", "task 2 is IN_PROGRESS\n"},
		{"done", "task 2 is CLOSED\n"},
	} {
		o, out := s.as("alice", "")
		if err := taskReportRun(ctx, &taskReportOptions{dbOptions: o, Verb: c.verb, Summary: "fixed"}); err != nil {
			t.Fatalf("task %s: %v", c.verb, err)
		}
		if got := out.String(); got != c.want {
			t.Errorf("task %s printed %q, want %q", c.verb, got, c.want)
		}
	}
	o, _ = s.as("alice", "")
	err = taskReportRun(ctx, &taskReportOptions{dbOptions: o, Verb: "start"})
	if err == nil || err.Error() != "task start: alice holds no task (CLAIMED or IN_PROGRESS): claim one with 'swarmd task claim'" {
		t.Errorf("start with nothing held: %v", err)
	}
	o, _ = s.as("alice", "")
	wantUsage(t, taskReportRun(ctx, &taskReportOptions{dbOptions: o, Verb: "fail", Reason: " "}),
		"task fail: --reason TEXT is required: say why it failed")
	o, _ = s.as("alice", "")
	wantUsage(t, taskReportRun(ctx, &taskReportOptions{dbOptions: o, Verb: "block", On: "3", Reason: "and why"}),
		"task block: give exactly one of --on ID or --reason TEXT")

	// An agent named by SWARM_AGENT_ID outside a session (no tree marker)
	// must be one the swarm knows, whatever the verb.
	o, _ = s.as("zed", "")
	wantUsage(t, taskSteerRun(ctx, &taskSteerOptions{dbOptions: o, Verb: steerVerbs()[1], ID: "1"}),
		`task cancel: SWARM_AGENT_ID: no agent "zed" (agents: alice, bob)`)
	o, _ = s.inSession("alice", "")
	wantUsage(t, taskSteerRun(ctx, &taskSteerOptions{dbOptions: o, Verb: steerVerbs()[1], ID: "1"}),
		"task cancel: an operator command; agent alice's session may not run it")
	o, out = s.as("operator", "")
	if err := taskSteerRun(ctx, &taskSteerOptions{dbOptions: o, Verb: steerVerbs()[1], ID: "1"}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "task 1 is CANCELLED\n"; got != want {
		t.Errorf("task cancel printed %q, want %q", got, want)
	}
	o, _ = s.as("operator", "")
	if err := taskSteerRun(ctx, &taskSteerOptions{dbOptions: o, Verb: steerVerbs()[1], ID: "9"}); err == nil || !strings.Contains(err.Error(), "9") {
		t.Errorf("cancel of an unknown task: %v, want an error naming it", err)
	}
}

// TestTaskCommandsFillTheirOptions: the cobra commands put their flags and
// arguments where the run functions read them (runF stands in for them).
func TestTaskCommandsFillTheirOptions(t *testing.T) {
	s := newSwarm(t)
	o, _ := s.as("operator", "")
	var got *taskAddOptions
	cmd := newTaskAddCmd(o, func(_ context.Context, opts *taskAddOptions) error { got = opts; return nil })
	cmd.SetArgs([]string{"Write docs", "--to", "bob", "--priority", "3", "--after", "4,5", "--after", "6", "--parent", "#2", "--plan", "--body", "-"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := taskboard.NewTask{Title: "Write docs", Assignee: "bob", Priority: 3, Plan: true, Body: "-"}
	if got.New.Title != want.Title || got.New.Assignee != want.Assignee || got.New.Priority != want.Priority ||
		got.New.Plan != want.Plan || got.New.Body != want.Body {
		t.Errorf("options %+v, want %+v", got.New, want)
	}
	if !slices.Equal(got.After, []string{"4", "5", "6"}) || got.Parent != "#2" {
		t.Errorf("--after %q --parent %q, want [4 5 6] and #2", got.After, got.Parent)
	}

	var split *taskReportOptions
	cmd = newTaskReportCmd(o, "split", func(_ context.Context, opts *taskReportOptions) error { split = opts; return nil })
	cmd.SetArgs([]string{"one", "two"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if split.Verb != "split" || !slices.Equal(split.Titles, []string{"one", "two"}) {
		t.Errorf("split options %q %q", split.Verb, split.Titles)
	}
}

// board opens the swarm's task board directly, as the daemon would, for
// what no command does (a task for an agent the swarm no longer has).
func (s *swarm) board(t *testing.T) *taskboard.Board {
	t.Helper()
	db, err := store.Open(context.Background(), s.path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return taskboard.New(db, taskboard.Options{})
}

// TestTaskAssign: the operator gives a task waiting for an agent the swarm
// no longer has to another agent, then to any; each change is a line of
// its history. Mistakes are usage errors (exit 2), a held task is refused
// (exit 1) saying to requeue it first, a session may not run it, and a
// refused assign changes nothing.
func TestTaskAssign(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	b := s.board(t)
	gone, err := b.Add(ctx, taskboard.NewTask{Title: "carol's rework", Assignee: "carol"}) // carol left the swarm
	if err != nil {
		t.Fatal(err)
	}
	reviewed, err := b.Add(ctx, taskboard.NewTask{Title: "reviewed by bob", Reviewer: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	assign := func(o *dbOptions, id, agent string, anyone bool) error {
		return taskAssignRun(ctx, &taskAssignOptions{dbOptions: o, ID: id, Agent: agent, Anyone: anyone})
	}
	for _, c := range []struct {
		name, id, agent string
		anyone          bool
		want            string
	}{
		{"neither AGENT nor --anyone", "1", "", false, "task assign: give exactly one of AGENT, --anyone or --reviewer AGENT"},
		{"both AGENT and --anyone", "1", "alice", true, "task assign: give exactly one of AGENT, --anyone or --reviewer AGENT"},
		{"an id that is no id", "one", "alice", false, `task assign: id "one": want a task id, a positive number such as 7`},
		{"an unknown agent", "1", "zed", false, `task assign: AGENT: no agent "zed" (agents: alice, bob)`},
		{"the task's reviewer", "2", "bob", false,
			"task assign: invalid task request: task 2 is to be reviewed by bob: an agent cannot review its own work"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, out := s.as("operator", "")
			wantUsage(t, assign(o, c.id, c.agent, c.anyone), c.want)
			if out.Len() != 0 {
				t.Errorf("printed %q on a refused assign", out)
			}
		})
	}
	o, _ := s.inSession("alice", "")
	wantUsage(t, assign(o, "1", "alice", false), "task assign: an operator command; agent alice's session may not run it")
	for _, id := range []int64{gone.ID, reviewed.ID} {
		if tk, err := b.Get(ctx, id); err != nil || tk.Assignee != map[int64]string{gone.ID: "carol", reviewed.ID: ""}[id] {
			t.Fatalf("after the refused assigns, task %d: %+v, %v", id, tk, err)
		}
	}

	o, out := s.as("operator", "")
	if err := assign(o, "#1", "alice", false); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "task 1 is OPEN, assigned to alice\n"; got != want {
		t.Errorf("task assign 1 alice printed %q, want %q", got, want)
	}
	o, out = s.as("operator", "")
	o.JSON = true
	if err := assign(o, "1", "", true); err != nil {
		t.Fatal(err)
	}
	var tk taskboard.Task
	if err := json.Unmarshal(out.Bytes(), &tk); err != nil || tk.ID != 1 || tk.Assignee != "" || tk.StateName != "OPEN" {
		t.Fatalf("task assign 1 --anyone --json: %+v, %v\n%s", tk, err, out)
	}
	o, out = s.as("operator", "")
	if err := taskShowRun(ctx, &taskShowOptions{dbOptions: o, ID: "1"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"OPEN --assigned--> OPEN by operator: assigned to alice (was carol)\n",
		"OPEN --assigned--> OPEN by operator: assigned to any agent (was alice)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("task show 1 lacks %q:\n%s", want, out)
		}
	}

	// Held by bob now: refused, exit 1, saying what to do.
	o, _ = s.as("bob", "")
	if err := taskClaimRun(ctx, &taskClaimOptions{dbOptions: o, ID: "1"}); err != nil {
		t.Fatal(err)
	}
	o, out = s.as("operator", "")
	err = assign(o, "1", "alice", false)
	var ue UsageError
	if err == nil || errors.As(err, &ue) || err.Error() != "task assign: task 1 is CLAIMED, held by bob: requeue it first ('swarmd task requeue 1'), then assign it: "+taskboard.ErrState.Error() {
		t.Errorf("assign of a held task: %v; want exit 1 saying to requeue it first", err)
	}
	if tk, _ := b.Get(ctx, 1); tk.Assignee != "" || tk.Claimant != "bob" || out.Len() != 0 {
		t.Errorf("a refused assign changed the held task (%+v) or printed %q", tk, out)
	}
	o, _ = s.as("operator", "")
	if err := assign(o, "99", "alice", false); err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "task 99: no such task") {
		t.Errorf("assign of an unknown task: %v; want exit 1, no such task", err)
	}
}

// TestTaskAssignWaitingParentAndDone: a parent waiting for its subtasks,
// split by carol (who left the swarm), assigned to alice, comes back to
// alice when its review FAILs, not to carol, and its history says so; a
// DONE task, carol's work under review, is refused (exit 1) saying to
// assign it once it is back OPEN, and changes nothing.
func TestTaskAssignWaitingParentAndDone(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	b := s.board(t)
	parent, err := b.Add(ctx, taskboard.NewTask{Title: "the feature", Reviewer: "rita"})
	if err != nil {
		t.Fatal(err)
	}
	carol := taskboard.Holder{Agent: "carol", Session: "carol-1"}
	if _, err := b.Claim(ctx, parent.ID, carol.Agent, carol.Session); err != nil {
		t.Fatal(err)
	}
	kids, err := b.Split(ctx, parent.ID, carol, []string{"the parser"})
	if err != nil {
		t.Fatal(err)
	}
	done, err := b.Add(ctx, taskboard.NewTask{Title: "carol's last work", Reviewer: "rita"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, done.ID, carol.Agent, carol.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, done.ID, carol, "finished"); err != nil {
		t.Fatal(err)
	}
	assign := func(id, agent string) (string, error) {
		o, out := s.as("operator", "")
		err := taskAssignRun(ctx, &taskAssignOptions{dbOptions: o, ID: id, Agent: agent})
		return out.String(), err
	}

	out, err := assign(fmt.Sprint(done.ID), "alice")
	var ue UsageError
	if err == nil || errors.As(err, &ue) || err.Error() != fmt.Sprintf("task assign: task %d is DONE, carol's work under review or waiting to merge: "+
		"it changes hands only once a review FAIL or a merge rejection sends it back OPEN; assign it then: %s", done.ID, taskboard.ErrState) {
		t.Errorf("assign of a DONE task: %v; want exit 1 saying to assign it once it is back OPEN", err)
	}
	if tk, _ := b.Get(ctx, done.ID); tk.Assignee != "" || tk.Worker != "carol" || out != "" {
		t.Errorf("a refused assign changed the DONE task (%+v) or printed %q", tk, out)
	}

	out, err = assign(fmt.Sprint(parent.ID), "alice")
	if err != nil || out != fmt.Sprintf("task %d is WAITING_FOR_SUBTASKS, assigned to alice\n", parent.ID) {
		t.Fatalf("assign of the waiting parent: %q, %v", out, err)
	}
	// Its subtask is done and passed; the parent's review FAILs.
	bob := taskboard.Holder{Agent: "bob", Session: "bob-1"}
	if _, err := b.Claim(ctx, kids[0].ID, bob.Agent, bob.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, kids[0].ID, bob, "parsed"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verdict(ctx, kids[0].ID, "rita", "", true, "ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verdict(ctx, parent.ID, "rita", "", false, "wire the parser in"); err != nil {
		t.Fatal(err)
	}
	if tk, err := b.Get(ctx, parent.ID); err != nil || tk.StateName != "OPEN" || tk.Assignee != "alice" {
		t.Fatalf("after the FAIL, the parent: %+v, %v; want it OPEN for alice", tk, err)
	}
	o, show := s.as("operator", "")
	if err := taskShowRun(ctx, &taskShowOptions{dbOptions: o, ID: fmt.Sprint(parent.ID)}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"WAITING_FOR_SUBTASKS --assigned--> WAITING_FOR_SUBTASKS by operator: assigned to alice (was any agent), its review's rework too (was carol's)\n",
		"FAILED --> OPEN by swarmd: back to alice with the review\n",
	} {
		if !strings.Contains(show.String(), want) {
			t.Errorf("task show %d lacks %q:\n%s", parent.ID, want, show)
		}
	}
}

// TestTaskAssignFillsItsOptions: `task assign ID AGENT` and `task assign ID
// --anyone` put their arguments where taskAssignRun reads them; a third
// argument is refused.
func TestTaskAssignFillsItsOptions(t *testing.T) {
	s := newSwarm(t)
	o, _ := s.as("operator", "")
	for _, c := range []struct {
		args []string
		want taskAssignOptions
	}{
		{[]string{"7", "alice"}, taskAssignOptions{ID: "7", Agent: "alice"}},
		{[]string{"#7", "--anyone"}, taskAssignOptions{ID: "#7", Anyone: true}},
	} {
		var got *taskAssignOptions
		cmd := newTaskAssignCmd(o, func(_ context.Context, opts *taskAssignOptions) error { got = opts; return nil })
		cmd.SetArgs(c.args)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if got.ID != c.want.ID || got.Agent != c.want.Agent || got.Anyone != c.want.Anyone {
			t.Errorf("%q: options ID %q Agent %q Anyone %v, want %+v", c.args, got.ID, got.Agent, got.Anyone, c.want)
		}
	}
	cmd := newTaskAssignCmd(o, func(context.Context, *taskAssignOptions) error { t.Error("ran with three arguments"); return nil })
	cmd.SetArgs([]string{"7", "alice", "bob"})
	cmd.SetErr(io.Discard)
	cmd.SetOut(io.Discard)
	if err := cmd.Execute(); err == nil {
		t.Error("task assign 7 alice bob: no error")
	}
}

// TestTaskAssignedToAnAgentThatLeft: list and show mark a task that waits
// for an agent the swarm does not have (carol: not in SWARM_AGENTS, as
// not in swarmd.yaml), in text and in JSON (assignee_unknown, a key
// added: the other keys are as before, and absent for the rest); a task
// assigned to a known agent, or in a final state, is not marked; once
// assigned to a known agent it is no longer.
func TestTaskAssignedToAnAgentThatLeft(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	b := s.board(t)
	for _, n := range []taskboard.NewTask{
		{Title: "waits for carol", Assignee: "carol"},
		{Title: "for bob", Assignee: "bob"},
		{Title: "carol's, cancelled", Assignee: "carol"},
	} {
		if _, err := b.Add(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Cancel(ctx, 3); err != nil {
		t.Fatal(err)
	}

	o, out := s.as("operator", "")
	if err := taskListRun(ctx, &taskListOptions{dbOptions: o}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("task list:\n%s\nwant a header and 3 rows", out)
	}
	for i, want := range []string{
		"1 OPEN 0 carol (not in the swarm) - waits for carol",
		"2 OPEN 0 bob - for bob",
		"3 CANCELLED 0 carol - carol's, cancelled",
	} {
		if got := strings.Join(strings.Fields(lines[i+1]), " "); got != want {
			t.Errorf("task list row %d: %q, want %q", i+1, got, want)
		}
	}

	list := func() []map[string]any {
		t.Helper()
		o, out := s.as("operator", "")
		o.JSON = true
		if err := taskListRun(ctx, &taskListOptions{dbOptions: o}); err != nil {
			t.Fatal(err)
		}
		var ts []map[string]any
		if err := json.Unmarshal(out.Bytes(), &ts); err != nil || len(ts) != 3 {
			t.Fatalf("task list --json: %v, %v\n%s", ts, err, out)
		}
		return ts
	}
	ts := list()
	if ts[0]["assignee_unknown"] != true || ts[0]["assignee"] != "carol" {
		t.Errorf("task 1 in list --json: %v; want assignee carol, assignee_unknown true", ts[0])
	}
	for _, tk := range ts[1:] {
		if _, ok := tk["assignee_unknown"]; ok {
			t.Errorf("task %v in list --json has assignee_unknown: %v", tk["id"], tk)
		}
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			if k != "assignee_unknown" {
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		return ks
	}
	if k0, k1 := keys(ts[0]), keys(ts[1]); !slices.Equal(k0, k1) {
		t.Errorf("task 1's other keys %v differ from task 2's %v", k0, k1)
	}

	o, out = s.as("operator", "")
	if err := taskShowRun(ctx, &taskShowOptions{dbOptions: o, ID: "1"}); err != nil {
		t.Fatal(err)
	}
	if want := "carol, which is not an agent of the swarm: no agent may claim the task ('swarmd task assign 1 AGENT' or '--anyone' gives it to another)"; !strings.Contains(out.String(), "assigned to:  "+want+"\n") {
		t.Errorf("task show 1 lacks the note %q:\n%s", want, out)
	}
	o, out = s.as("operator", "")
	o.JSON = true
	if err := taskShowRun(ctx, &taskShowOptions{dbOptions: o, ID: "1"}); err != nil {
		t.Fatal(err)
	}
	var shown map[string]any
	if err := json.Unmarshal(out.Bytes(), &shown); err != nil || shown["assignee_unknown"] != true || shown["history"] == nil {
		t.Errorf("task show 1 --json: %v, %v; want assignee_unknown true, with its history", shown, err)
	}
	o, out = s.as("operator", "")
	if err := taskShowRun(ctx, &taskShowOptions{dbOptions: o, ID: "2"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "not an agent of the swarm") {
		t.Errorf("task show 2 marks bob, an agent of the swarm:\n%s", out)
	}

	o, _ = s.as("operator", "")
	if err := taskAssignRun(ctx, &taskAssignOptions{dbOptions: o, ID: "1", Agent: "alice"}); err != nil {
		t.Fatal(err)
	}
	if ts := list(); ts[0]["assignee"] != "alice" || ts[0]["assignee_unknown"] != nil {
		t.Errorf("task 1 after assign 1 alice: %v; want alice's, unmarked", ts[0])
	}
}

// TestReworkWaitingForAWorkerThatLeft: a parent waiting for its subtasks
// comes back by its review's FAIL, which sends the rework to its review
// loop's worker, not to a claimant its assignee decides: a worker that left
// the swarm (carol, not in SWARM_AGENTS) decides who gets it next, though
// it is for any agent. inbox, list and show flag it, with the assign that
// gives the rework to another; one assigned to carol too is flagged for
// its assignee, as any. A parent whose worker is in the swarm is not, nor
// a DONE task of carol's under review, which nobody can give to another
// before its verdict (a FAIL sends it back OPEN for carol: flagged then,
// for its assignee). Once assigned, to alice or to any agent, the parent
// is flagged no more.
func TestReworkWaitingForAWorkerThatLeft(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	b := s.board(t)
	split := func(title, to, worker string) int64 {
		t.Helper()
		p, err := b.Add(ctx, taskboard.NewTask{Title: title, Assignee: to, Reviewer: "rita"})
		if err != nil {
			t.Fatal(err)
		}
		h := taskboard.Holder{Agent: worker, Session: worker + "-" + title}
		if _, err := b.Claim(ctx, p.ID, h.Agent, h.Session); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Split(ctx, p.ID, h, []string{title + ", part one"}); err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	carols := split("carol's feature", "", "carol") // 1, its subtask 2
	bobs := split("bob's feature", "", "bob")       // 3, 4
	both := split("for carol", "carol", "carol")    // 5, 6
	done, err := b.Add(ctx, taskboard.NewTask{Title: "carol's last work", Reviewer: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	ch := taskboard.Holder{Agent: "carol", Session: "carol-last"}
	if _, err := b.Claim(ctx, done.ID, ch.Agent, ch.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, done.ID, ch, "finished"); err != nil {
		t.Fatal(err)
	}

	inbox := func() []NeedItem {
		t.Helper()
		o, out := s.as("operator", "")
		if err := inboxRun(ctx, &inboxOptions{IO: o.IO, JSON: true}); err != nil {
			t.Fatal(err)
		}
		var items []NeedItem
		if err := json.Unmarshal(out.Bytes(), &items); err != nil {
			t.Fatalf("inbox --json: %v\n%s", err, out)
		}
		return items
	}
	want := []NeedItem{
		{Kind: "task_worker_unknown", Task: carols, What: "task #1 is WAITING_FOR_SUBTASKS, its review's rework for carol, which is not an agent of the swarm: carol's feature",
			Fix: "swarmd task assign 1 AGENT"},
		{Kind: "task_assignee_unknown", Task: both, What: "task #5 is WAITING_FOR_SUBTASKS for carol, which is not an agent of the swarm: for carol",
			Fix: "swarmd task assign 5 AGENT"},
	}
	if got := inbox(); !slices.Equal(got, want) {
		t.Errorf("inbox %+v, want %+v", got, want)
	}

	o, out := s.as("operator", "")
	if err := taskListRun(ctx, &taskListOptions{dbOptions: o}); err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		rows[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{
		"1 WAITING_FOR_SUBTASKS 0 carol's rework (not in the swarm) - carol's feature",
		"3 WAITING_FOR_SUBTASKS 0 - - bob's feature",
		"5 WAITING_FOR_SUBTASKS 0 carol (not in the swarm) - for carol",
		"7 DONE 0 - carol carol's last work",
	} {
		if !rows[want] {
			t.Errorf("task list lacks the row %q:\n%s", want, out)
		}
	}
	list := func() map[int64]map[string]any {
		t.Helper()
		o, out := s.as("operator", "")
		o.JSON = true
		if err := taskListRun(ctx, &taskListOptions{dbOptions: o}); err != nil {
			t.Fatal(err)
		}
		var ts []map[string]any
		if err := json.Unmarshal(out.Bytes(), &ts); err != nil {
			t.Fatalf("task list --json: %v\n%s", err, out)
		}
		byID := map[int64]map[string]any{}
		for _, tk := range ts {
			byID[int64(tk["id"].(float64))] = tk
		}
		return byID
	}
	ts := list()
	for id, tk := range ts {
		if _, marked := tk["worker_unknown"]; marked != (id == carols || id == both) {
			t.Errorf("task %d in list --json: worker_unknown %v, want it on tasks %d and %d alone: %v", id, tk["worker_unknown"], carols, both, tk)
		}
	}
	if ts[carols]["worker_unknown"] != true || ts[carols]["worker"] != "carol" {
		t.Errorf("task %d in list --json: %v; want worker carol, worker_unknown true", carols, ts[carols])
	}

	o, out = s.as("operator", "")
	if err := taskShowRun(ctx, &taskShowOptions{dbOptions: o, ID: "1"}); err != nil {
		t.Fatal(err)
	}
	if want := "rework for: carol, which is not an agent of the swarm: once its subtasks are done, a review FAIL sends the rework " +
		"there and no agent may claim it ('swarmd task assign 1 AGENT' or '--anyone' gives it to another)"; !strings.Contains(
		strings.Join(strings.Fields(out.String()), " "), want) {
		t.Errorf("task show 1 lacks the note %q:\n%s", want, out)
	}
	for _, id := range []int64{bobs, done.ID} {
		o, out = s.as("operator", "")
		if err := taskShowRun(ctx, &taskShowOptions{dbOptions: o, ID: fmt.Sprint(id)}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), "not an agent of the swarm") {
			t.Errorf("task show %d marks an agent:\n%s", id, out)
		}
	}

	for _, a := range []taskAssignOptions{{ID: "1", Agent: "alice"}, {ID: "5", Anyone: true}} {
		o, _ := s.as("operator", "")
		a.dbOptions = o
		if err := taskAssignRun(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	if got := inbox(); len(got) != 0 {
		t.Errorf("inbox after the assigns %+v, want nothing", got)
	}
	if ts := list(); ts[carols]["worker"] != "alice" || ts[carols]["worker_unknown"] != nil || ts[both]["worker_unknown"] != nil ||
		ts[both]["assignee_unknown"] != nil {
		t.Errorf("after the assigns: task 1 %v, task 5 %v; want alice's rework, and any agent's, unmarked", ts[carols], ts[both])
	}
}

// TestInboxListsATaskWaitingForAnAgentThatLeft: swarmd inbox lists a task
// that waits for an agent the swarm does not have (OPEN, and PLANNED
// before its approval), with the assign that deals with it, and not a
// task for a known agent; once assigned, the OPEN one leaves the list and
// the PLANNED one is listed for its approval again.
func TestInboxListsATaskWaitingForAnAgentThatLeft(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	b := s.board(t)
	for _, n := range []taskboard.NewTask{
		{Title: "waits for carol", Assignee: "carol"},
		{Title: "for bob", Assignee: "bob"},
		{Title: "carol's plan", Assignee: "carol", Plan: true},
	} {
		if _, err := b.Add(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	inbox := func() []NeedItem {
		t.Helper()
		o, out := s.as("operator", "")
		if err := inboxRun(ctx, &inboxOptions{IO: o.IO, JSON: true}); err != nil {
			t.Fatal(err)
		}
		var items []NeedItem
		if err := json.Unmarshal(out.Bytes(), &items); err != nil {
			t.Fatalf("inbox --json: %v\n%s", err, out)
		}
		return items
	}
	want := []NeedItem{
		{Kind: "task_assignee_unknown", Task: 1, What: "task #1 is OPEN for carol, which is not an agent of the swarm: waits for carol", Fix: "swarmd task assign 1 AGENT"},
		{Kind: "task_assignee_unknown", Task: 3, What: "task #3 is PLANNED for carol, which is not an agent of the swarm: carol's plan", Fix: "swarmd task assign 3 AGENT"},
	}
	if got := inbox(); !slices.Equal(got, want) {
		t.Errorf("inbox %+v, want %+v", got, want)
	}
	for _, id := range []string{"1", "3"} {
		o, _ := s.as("operator", "")
		if err := taskAssignRun(ctx, &taskAssignOptions{dbOptions: o, ID: id, Agent: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	want = []NeedItem{{Kind: "task_planned", Task: 3, What: "task #3 waits for approval: carol's plan", Fix: "swarmd task approve 3"}}
	if got := inbox(); !slices.Equal(got, want) {
		t.Errorf("inbox after the assigns %+v, want %+v", got, want)
	}
}

// TestReviewWaitingForAReviewerThatLeft: a DONE task waits for the verdict
// of its reviewer, and nothing else moves it: once that reviewer has left
// the swarm (rita, not in SWARM_AGENTS), inbox and show say so, with the
// assign that gives the review to another. The new reviewer may not be the
// agent that did the work; the former one's verdict is refused from then
// on, and the new one's applies.
func TestReviewWaitingForAReviewerThatLeft(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	b := s.board(t)
	tk, err := b.Add(ctx, taskboard.NewTask{Title: "the feature", Reviewer: "rita"})
	if err != nil {
		t.Fatal(err)
	}
	h := taskboard.Holder{Agent: "alice", Session: "alice-1"}
	if _, err := b.Claim(ctx, tk.ID, h.Agent, h.Session); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Done(ctx, tk.ID, h, "finished"); err != nil {
		t.Fatal(err)
	}
	o, out := s.as("operator", "")
	o.JSON = true
	if err := inboxRun(ctx, &inboxOptions{IO: o.IO, JSON: true}); err != nil {
		t.Fatal(err)
	}
	var items []NeedItem
	if err := json.Unmarshal(out.Bytes(), &items); err != nil {
		t.Fatal(err)
	}
	want := []NeedItem{{Kind: "task_reviewer_unknown", Task: tk.ID,
		What: "task #1 is DONE, waiting for the review of rita, which is not an agent of the swarm: the feature",
		Fix:  "swarmd task assign 1 --reviewer AGENT"}}
	if !slices.Equal(items, want) {
		t.Errorf("inbox %+v, want %+v", items, want)
	}
	o, out = s.as("operator", "")
	if err := taskShowRun(ctx, &taskShowOptions{dbOptions: o, ID: "1"}); err != nil {
		t.Fatal(err)
	}
	if want := "review: rita, which is not an agent of the swarm: the task waits for its verdict ('swarmd task assign 1 --reviewer AGENT' gives the review to another)"; !strings.Contains(
		strings.Join(strings.Fields(out.String()), " "), want) {
		t.Errorf("task show 1 lacks %q:\n%s", want, out)
	}

	assign := func(reviewer, agent string) (string, error) {
		o, out := s.as("operator", "")
		err := taskAssignRun(ctx, &taskAssignOptions{dbOptions: o, ID: "1", Reviewer: reviewer, Agent: agent})
		return out.String(), err
	}
	_, err = assign("zed", "")
	wantUsage(t, err, `task assign: --reviewer: no agent "zed" (agents: alice, bob)`)
	_, err = assign("bob", "alice")
	wantUsage(t, err, "task assign: --reviewer changes the reviewer alone: give no AGENT and no --anyone with it")
	_, err = assign("alice", "")
	wantUsage(t, err, "task assign: invalid task request: task 1 is alice's work: an agent cannot review its own work")
	if got, err := assign("bob", ""); err != nil || got != "task 1 is DONE, reviewed by bob\n" {
		t.Fatalf("task assign 1 --reviewer bob: %q, %v", got, err)
	}
	o, out = s.as("operator", "")
	if err := inboxRun(ctx, &inboxOptions{IO: o.IO, JSON: true}); err != nil || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("inbox after the assign: %s %v; want nothing", out, err)
	}
	if _, err := b.Verdict(ctx, tk.ID, "rita", "", true, "late"); !errors.Is(err, taskboard.ErrNotHolder) {
		t.Errorf("the former reviewer's verdict: %v, want refused (ErrNotHolder)", err)
	}
	if got, err := b.Verdict(ctx, tk.ID, "bob", "", true, "good"); err != nil || got.ReviewState != "complete" {
		t.Fatalf("the new reviewer's PASS: %+v, %v", got, err)
	}
	h2, err := b.History(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range h2 {
		found = found || e.TransitionReason == taskboard.EventReviewerAssigned && e.Reason == "reviewer bob (was rita)" && e.Actor == "operator"
	}
	if !found {
		t.Errorf("history lacks the change of reviewer: %+v", h2)
	}
	// Passed: its review is over, and so is the choice of its reviewer.
	if _, err := assign("bob", ""); err == nil || !errors.Is(err, taskboard.ErrState) {
		t.Errorf("a new reviewer for a passed review: %v, want refused (ErrState)", err)
	}
}

// TestReportTextIsBounded: a summary or a failure reason over a task
// body's limit is refused before anything is read or written, as a body
// is: it is printed by task show and carried into prompts.
func TestReportTextIsBounded(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	big := strings.Repeat("s", taskboard.MaxBodyBytes+1)
	o, _ := s.inSession("alice", "")
	wantUsage(t, taskReportRun(ctx, &taskReportOptions{dbOptions: o, Verb: "done", Summary: big}),
		fmt.Sprintf("task done: --summary is %d bytes, over the %d-byte limit", len(big), taskboard.MaxBodyBytes))
	wantUsage(t, taskReportRun(ctx, &taskReportOptions{dbOptions: o, Verb: "fail", Reason: big}),
		fmt.Sprintf("task fail: --reason is %d bytes, over the %d-byte limit", len(big), taskboard.MaxBodyBytes))
}
