package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/notify"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/settle"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// TestRecoveredVerdictThatFailsItsTaskAlerts: a daemon killed after a
// reviewer's FAIL at the task's max_iterations ended, before its outcome
// was committed, leaves the outcome in the session's log; the next start
// applies it (the task FAILED) and tells the operator's webhook so, as a
// live verdict does: once, not again at the start after, and without its
// start waiting for a receiver that does not answer.
func TestRecoveredVerdictThatFailsItsTaskAlerts(t *testing.T) {
	got := make(chan notify.Alert, 8)
	answer := make(chan struct{}) // closed: the receiver answers
	var once sync.Once
	answerNow := func() { once.Do(func() { close(answer) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a notify.Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("an alert's body: %v", err)
		}
		got <- a
		<-answer
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(answerNow) // before srv.Close, which waits for the handlers
	next := func(what string) notify.Alert {
		t.Helper()
		select {
		case a := <-got:
			return a
		case <-time.After(20 * time.Second):
			t.Fatalf("no alert within 20 s: want %s", what)
		}
		return notify.Alert{}
	}

	cfgPath := repo(t, agentsYAML("alice", "bob")+fmt.Sprintf("notify: {webhook: %q}\n", srv.URL+"/hook"))
	c := mustLoad(t, cfgPath)
	tk := verdictLeftInTheLog(t, c.StateDir, c.DBPath())

	// The receiver answers nothing until the start is over: the start
	// must not wait for it.
	opened := make(chan *Daemon, 1)
	go func() {
		d, err := Open(context.Background(), c, Options{})
		if err != nil {
			t.Error(err)
		}
		opened <- d
	}()
	var d *Daemon
	select {
	case d = <-opened:
	case <-time.After(60 * time.Second):
		t.Fatal("Open did not return while the alert's receiver did not answer")
	}
	if d == nil {
		t.FailNow()
	}
	defer func() { d.Close() }()
	if st, err := d.tasks.Get(context.Background(), tk); err != nil || st.StateName != "FAILED" {
		t.Fatalf("task %d after recovery: %s, %v; want FAILED", tk, st.StateName, err)
	}
	a := next("task_failed")
	answerNow()
	if a.Kind != notify.TaskFailed || a.Task != tk || a.Agent != "bob" || !strings.Contains(a.Reason, "max_iterations") ||
		!strings.Contains(a.Reason, "no tests") || a.Fix != fmt.Sprintf("swarmd task retry %d", tk) {
		t.Fatalf("alert %+v; want task_failed for task %d by bob, max_iterations, the reviewer's feedback", a, tk)
	}
	// Alerts go in order: a marker sent now comes next, unless the
	// verdict was told twice.
	d.notifyUnhealthy("marker 1")
	if a := next("marker 1"); a.Kind != notify.Unhealthy || a.Reason != "marker 1" {
		t.Fatalf("after the task_failed alert: %+v; want marker 1 (told once)", a)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// The next start has nothing to recover, and tells nothing again.
	d = open(t, cfgPath)
	d.notifyUnhealthy("marker 2")
	if a := next("marker 2"); a.Kind != notify.Unhealthy || a.Reason != "marker 2" {
		t.Fatalf("first alert of the next start: %+v; want marker 2 (the verdict told at the start before only)", a)
	}
}

// TestAlertsRaisedAsTheDaemonClosesAreSent: alerts raised just before
// Close (the last sessions' settlements raise them as the daemon stops)
// reach the webhook before Close returns, in order; the receiver answers
// the first only once Close has begun, so the others are still queued.
func TestAlertsRaisedAsTheDaemonClosesAreSent(t *testing.T) {
	var d *Daemon
	opened := make(chan struct{})
	got := make(chan notify.Alert, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a notify.Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("an alert's body: %v", err)
		}
		<-opened
		<-d.run.ctx.Done() // Close's first step
		got <- a
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	d = open(t, repo(t, agentsYAML("alice")+fmt.Sprintf("notify: {webhook: %q}\n", srv.URL+"/hook")))
	close(opened)
	for i := range 3 {
		d.notifyUnhealthy(fmt.Sprintf("last words %d", i))
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	close(got)
	var reasons []string
	for a := range got {
		reasons = append(reasons, a.Reason)
	}
	if got, want := strings.Join(reasons, ", "), "last words 0, last words 1, last words 2"; got != want {
		t.Fatalf("alerts the webhook had when Close returned: %s; want %s", got, want)
	}
}

// TestHeldAlertsOfAFailedOpenAreLogged: an Open that fails after restart
// recovery raised an alert (here its HTTP port is taken) never opens the
// notifier; the alert it held is logged as not delivered, not lost
// without a word.
func TestHeldAlertsOfAFailedOpenAreLogged(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	body := strings.Replace(agentsYAML("alice", "bob"), `listen: ""`, "listen: "+taken.Addr().String(), 1)
	cfgPath := repo(t, body+"notify: {webhook: \"http://127.0.0.1:1/hook\"}\n")
	c := mustLoad(t, cfgPath)
	tk := verdictLeftInTheLog(t, c.StateDir, c.DBPath())
	log, logged := observed()
	if d, err := Open(context.Background(), c, Options{Log: log}); err == nil {
		d.Close()
		t.Fatal("Open succeeded on a taken port")
	}
	var lines []map[string]any
	for _, e := range logged.FilterMessage("notify: alert not delivered before the stop").All() {
		lines = append(lines, e.ContextMap())
	}
	if len(lines) != 1 || lines[0]["kind"] != notify.TaskFailed || lines[0]["task"] != tk ||
		!strings.Contains(fmt.Sprint(lines[0]["text"]), "max_iterations") {
		t.Fatalf("lines %v; want one, for task %d's task_failed", lines, tk)
	}
}

// verdictLeftInTheLog makes swarm.db and the logs of stateDir what a
// daemon killed as a review ended leaves: alice's DONE on a task reviewed
// by bob at max_iterations 1, recorded; bob's FAIL on it, its outcome in
// his session's log only. It returns the task's id.
func verdictLeftInTheLog(t *testing.T, stateDir, dbPath string) int64 {
	t.Helper()
	ctx := context.Background()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	board := newTaskBoard(db, "", nil) // the daemon's, with no merge queue
	s := &settle.Settler{DB: db, Tasks: board}
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "one", Reviewer: "bob", MaxIterations: 1})
	if err != nil {
		t.Fatal(err)
	}
	ended := func(name, id string, seq uint32, logPath, result string) runner.Settlement {
		now := time.Now()
		return runner.Settlement{
			Session: runner.SessionRecord{Agent: name, SessionID: id, Seq: seq, LogPath: logPath, Outcome: agent.ExitOutcome{Kind: agent.Success},
				Result: backend.Result{Outcome: backend.OutcomeSuccess, Started: now.Add(-time.Second), Ended: now, Text: result}},
			Completed: true, Result: result,
		}
	}

	alice := "alice-1-000000000001"
	if _, err := s.Begin(ctx, runner.SessionBegin{Agent: "alice", SessionID: alice, Seq: 1, Started: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := board.ClaimNext(ctx, "alice", alice); err != nil || !ok {
		t.Fatalf("alice's claim: %v, %v", ok, err)
	}
	if _, err := board.Start(ctx, tk.ID, taskboard.Holder{Agent: "alice", Session: alice}); err != nil {
		t.Fatal(err)
	}
	done := ended("alice", alice, 1, "", "done it\nDONE")
	done.Task = tk.ID
	if _, err := s.Settle(ctx, done, nil); err != nil {
		t.Fatal(err)
	}

	bob := "bob-1-000000000001"
	logPath := logs.New(stateDir, 0, 0, nil).LogPath("bob", 1)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, logPath, "=== swarmd session "+bob+" ===\n")
	if _, err := s.Begin(ctx, runner.SessionBegin{Agent: "bob", SessionID: bob, Seq: 1, Started: time.Now(), LogPath: logPath}, nil); err != nil {
		t.Fatal(err)
	}
	verdict := ended("bob", bob, 1, logPath, "no tests\nFAIL")
	verdict.Review = tk.ID
	rec, err := json.Marshal(s.RecordOf(verdict))
	if err != nil {
		t.Fatal(err)
	}
	// The outbox line Settle writes first; the daemon died before its commit.
	if err := logs.AppendOutcome(logPath, rec); err != nil {
		t.Fatal(err)
	}
	if st, err := board.Get(ctx, tk.ID); err != nil || st.StateName != "DONE" {
		t.Fatalf("task %d before the restart: %s, %v; want DONE, awaiting bob's verdict", tk.ID, st.StateName, err)
	}
	return tk.ID
}

// TestRetriesUsedUpAlert: a task whose holder's session was cut off once
// more than its max_retries allow (here a daemon killed while alice worked
// on it, a second time) is FAILED by the next start's recovery, and the
// operator's webhook is told: it is a task FAILED past its limits, which
// nobody works on until someone retries it.
func TestRetriesUsedUpAlert(t *testing.T) {
	got := make(chan notify.Alert, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a notify.Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("an alert's body: %v", err)
		}
		got <- a
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	cfgPath := repo(t, agentsYAML("alice")+fmt.Sprintf("notify: {webhook: %q}\n", srv.URL+"/hook"))
	c := mustLoad(t, cfgPath)

	ctx := context.Background()
	if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, c.DBPath(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	board := newTaskBoard(db, "", nil)
	tk, err := board.Add(ctx, taskboard.NewTask{Title: "fragile", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Its first attempt was cut off (a retry counted); the second is
	// held when the daemon dies.
	for i, session := range []string{"alice-1-000000000001", "alice-2-000000000002"} {
		if _, err := board.Claim(ctx, tk.ID, "alice", session); err != nil {
			t.Fatal(err)
		}
		if _, err := board.Start(ctx, tk.ID, taskboard.Holder{Agent: "alice", Session: session}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := board.Orphan(ctx, "alice", "swarmd restarted"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	d := open(t, cfgPath)
	defer d.Close()
	if st, err := d.tasks.Get(ctx, tk.ID); err != nil || st.StateName != "FAILED" {
		t.Fatalf("task %d after the restart: %s, %v; want FAILED, its retries used up", tk.ID, st.StateName, err)
	}
	select {
	case a := <-got:
		if a.Kind != notify.TaskFailed || a.Task != tk.ID || a.Agent != "alice" || !strings.Contains(a.Reason, "1 retries are used up") ||
			!strings.Contains(a.Reason, "swarmd restarted") || a.Fix != fmt.Sprintf("swarmd task retry %d", tk.ID) {
			t.Fatalf("alert %+v; want task_failed for task %d, alice's, its retries used up", a, tk.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no task_failed alert within 20 s")
	}
}
