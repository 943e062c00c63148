package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/cli"
)

// failingSwarm is one agent whose backend always fails, so it stops for
// good after two errors (max_total_errors: a session that starts resets
// the consecutive count), with the webhook at url.
func failingSwarm(url string) string {
	return fmt.Sprintf(`
listen: ""
notify: {webhook: %q}
defaults:
  max_total_errors: 2
  min_session_interval: 0s
backends:
  broken: {type: command, command: sh, args: [-c, "exit 1"]}
agents:
  - {name: carol, role: r, backend: broken}
`, url)
}

// TestWebhookToldOfAStoppedAgent: an agent whose backend always fails
// stops for good, and a real HTTP receiver gets one POST naming it and the
// command that starts it again. A receiver that is down delays nothing:
// the agent stops as soon, and the daemon's stop tries the alert for its
// drain (5 s) at most, then logs it, naming carol, as not delivered.
func TestWebhookToldOfAStoppedAgent(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	got := make(chan map[string]any, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("webhook body %q: %v", b, err)
		}
		got <- m
	}))
	defer srv.Close()

	d := startDaemon(t, writeConfig(t, gitRepo(t), failingSwarm(srv.URL+"/hook")))
	d.waitLine("carol Stopped", transitionTo("carol", "Stopped"))
	select {
	case m := <-got:
		if m["kind"] != "agent_stopped" || m["agent"] != "carol" || m["fix"] != "swarmd start carol" || m["reason"] == "" {
			t.Errorf("webhook got %v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no POST 10 s after carol stopped; log:\n%s", d.log())
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
	if len(got) != 0 {
		t.Errorf("%d more POSTs: one per event", len(got))
	}

	// Nothing listens at the webhook now.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/hook"
	l.Close()
	d = startDaemon(t, writeConfig(t, gitRepo(t), failingSwarm(down)))
	d.waitLine("carol Stopped with the receiver down", transitionTo("carol", "Stopped"))
	d.waitLine("the failed delivery logged", func(m map[string]any) bool {
		return m["msg"] == "notify: delivery failed, retrying"
	})
	start := time.Now()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the daemon took %s to stop with the webhook down; want its 5 s drain and little more", took)
	}
	d.waitLine("carol's alert logged as not delivered", func(m map[string]any) bool {
		return m["msg"] == "notify: alert not delivered before the stop" && m["level"] == "error" &&
			m["kind"] == "agent_stopped" && m["agent"] == "carol" && strings.Contains(fmt.Sprint(m["text"]), "swarmd start carol")
	})
}

// TestInboxListsWhatNeedsAPerson: an agent stopped for good and a task
// waiting for approval are listed with the command that deals with each;
// an approved task leaves the list; a daemon that is not running is on it.
func TestInboxListsWhatNeedsAPerson(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, failingSwarm(""))
	out, stderr, code := runCLI(t, nil, "", "inbox", "-c", cfg)
	if code != 0 || !strings.Contains(out, "swarmd run") {
		t.Fatalf("inbox before the first run: exit %d\n%s%s", code, out, stderr)
	}
	d := startDaemon(t, cfg)
	d.waitLine("carol Stopped", transitionTo("carol", "Stopped"))
	if _, stderr, code := runCLI(t, nil, "", "task", "add", "--plan", "a plan to approve", "-c", cfg); code != 0 {
		t.Fatalf("task add --plan: %s", stderr)
	}
	// The inbox reads the agents' rows, which the daemon's journal writes
	// up to its flush interval after the transition it logged.
	var items []cli.NeedItem
	fixes := map[string]string{}
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, stderr, code = runCLI(t, nil, "", "inbox", "--json", "-c", cfg)
		items = nil
		if code != 0 || json.Unmarshal([]byte(out), &items) != nil {
			t.Fatalf("inbox --json: exit %d\n%s%s", code, out, stderr)
		}
		clear(fixes)
		for _, it := range items {
			fixes[it.Kind] = it.Fix
		}
		if fixes["agent_stopped"] != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fixes["agent_stopped"] != "swarmd start carol" || fixes["task_planned"] != "swarmd task approve 1" || fixes["not_running"] != "" {
		t.Errorf("inbox with the daemon running: %+v", items)
	}
	if _, stderr, code := runCLI(t, nil, "", "task", "approve", "1", "-c", cfg); code != 0 {
		t.Fatalf("approve: %s", stderr)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(20 * time.Second)
	out, _, _ = runCLI(t, nil, "", "inbox", "-c", cfg)
	// The approved task is gone from it; carol's stop outlives the daemon
	// (it waits for swarmd start), and the daemon's absence is listed.
	if !strings.Contains(out, "swarmd start carol") || strings.Contains(out, "approve") || !strings.Contains(out, "no swarmd runs") {
		t.Errorf("inbox after the approval, the daemon stopped:\n%s", out)
	}
}
