package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/view"
)

const dashToken = "test-token-0123456789abcdef"

// tickerSteps is a scripted session that prints a numbered line every
// interval for a while, then sleeps: an agent Running with fresh output.
func tickerSteps(n int, every time.Duration) string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("tick %d", i+1)
	}
	return fmt.Sprintf("[{print: [%s], print_every: %s, sleep: 1h}]", strings.Join(lines, ", "), every)
}

// dashboardDaemon starts a daemon with the dashboard on a free port, the
// given agents on a ticking backend, and web.token set when token is.
func dashboardDaemon(t *testing.T, token string, agents ...string) (d *daemonProc, cfg, base string) {
	t.Helper()
	repo := gitRepo(t)
	addr := freePort(t)
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\n", addr)
	if token != "" {
		fmt.Fprintf(&b, "web: {token: %q}\n", token)
	}
	fmt.Fprintf(&b, "defaults: {backend: ticker, grace_period: 1s}\nbackends:\n  ticker: {type: scripted, steps: %s}\nagents:\n",
		tickerSteps(600, 300*time.Millisecond))
	for _, a := range agents {
		fmt.Fprintf(&b, "  - {name: %s, role: works}\n", a)
	}
	cfg = writeConfig(t, repo, b.String())
	d = startDaemon(t, cfg)
	for _, a := range agents {
		d.waitLine(a+" Running", transitionTo(a, "Running"))
	}
	return d, cfg, "http://" + addr
}

func httpDo(t *testing.T, method, url, auth, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

// strictJSON decodes data into v refusing unknown fields: the response
// has exactly the documented shape.
func strictJSON(t *testing.T, what string, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, data)
	}
}

// waitAgent polls /api/agents (a real daemon, a real clock) until the agent
// satisfies ok.
func waitAgent(t *testing.T, base, name string, ok func(view.Agent) bool) view.Agent {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, data := httpDo(t, "GET", base+"/api/agents/"+name, "", "")
		var a view.Agent
		_ = json.Unmarshal(data, &a)
		if ok(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s never got there; last %s", name, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDashboardAPI runs the JSON API against a real daemon: the reads in
// their documented shapes, the writes behind the token, a task and mail
// that land in swarm.db, and stop reaching the agent.
func TestDashboardAPI(t *testing.T) {
	d, _, base := dashboardDaemon(t, dashToken, "alice", "bob")
	waitAgent(t, base, "alice", func(a view.Agent) bool { return a.Visual == view.Running && !a.LastOutput.IsZero() })

	var agents []view.Agent
	resp, data := httpDo(t, "GET", base+"/api/agents", "", "")
	strictJSON(t, "/api/agents", data, &agents)
	if resp.Header.Get("X-Frame-Options") != "DENY" || len(agents) != 2 || agents[0].Name != "alice" ||
		agents[0].State != "Running" || agents[0].Indicator != "●" || agents[0].Seq != 1 || agents[0].Branch != "swarm/alice/work" {
		t.Fatalf("agents %+v", agents)
	}
	var board view.TaskBoard
	var merge view.MergeQueue
	var sessions []view.Session
	var events []view.Event
	for path, v := range map[string]any{"/api/tasks": &board, "/api/merge": &merge, "/api/sessions?agent=alice": &sessions,
		"/api/events?limit=1000": &events} {
		_, data := httpDo(t, "GET", base+path, "", "")
		strictJSON(t, path, data, v)
	}
	if len(board.States) != 12 || merge.Configured || merge.Note != "not configured" || len(sessions) != 1 ||
		sessions[0].Agent != "alice" || len(events) == 0 {
		t.Fatalf("board %+v merge %+v sessions %+v events %d", board, merge, sessions, len(events))
	}

	// Writes: refused without the token, carried out with it.
	if resp, _ := httpDo(t, "POST", base+"/api/agents/bob/stop", "", ""); resp.StatusCode != 401 {
		t.Fatalf("stop without the token: %s", resp.Status)
	}
	// Pause holds bob (his running session finishes first; the view shows
	// him paused at once), resume lets him go.
	if resp, data := httpDo(t, "POST", base+"/api/agents/bob/pause", dashToken, ""); resp.StatusCode != 202 {
		t.Fatalf("pause: %s %s", resp.Status, data)
	}
	p := waitAgent(t, base, "bob", func(a view.Agent) bool { return a.Visual == view.Paused })
	if !p.Paused || p.PausedBy != "operator" || p.PauseReason != "from a dashboard" {
		t.Fatalf("paused bob %+v", p)
	}
	if resp, data := httpDo(t, "POST", base+"/api/agents/bob/resume", dashToken, ""); resp.StatusCode != 202 {
		t.Fatalf("resume: %s %s", resp.Status, data)
	}
	waitAgent(t, base, "bob", func(a view.Agent) bool { return !a.Paused && a.Visual != view.Paused })
	if resp, _ := httpDo(t, "POST", base+"/api/agents/bob/resume", dashToken, ""); resp.StatusCode != 409 {
		t.Fatalf("resume of an agent not paused: %s", resp.Status)
	}
	resp, data = httpDo(t, "POST", base+"/api/tasks", dashToken, `{"title":"from the web","to":"bob","priority":2}`)
	var tk view.Task
	strictJSON(t, "POST /api/tasks", data, &tk)
	if resp.StatusCode != 201 || tk.State != "OPEN" || tk.Assignee != "bob" {
		t.Fatalf("task: %s %+v", resp.Status, tk)
	}
	if resp, data := httpDo(t, "POST", base+"/api/tasks", dashToken, `{"title":"x","to":"nobody"}`); resp.StatusCode != 400 {
		t.Fatalf("task for nobody: %s %s", resp.Status, data)
	}
	if resp, data := httpDo(t, "POST", base+"/api/mail", dashToken, `{"to":"alice","subject":"hi","body":"from the web"}`); resp.StatusCode != 201 {
		t.Fatalf("mail: %s %s", resp.Status, data)
	}
	d.waitLine("the web's mail", func(m map[string]any) bool {
		return m["msg"] == "mail sent from a dashboard" && m["from"] == "operator" && m["to"] == "alice"
	})
	if resp, _ := httpDo(t, "POST", base+"/api/agents/bob/stop", dashToken, ""); resp.StatusCode != 202 {
		t.Fatalf("stop: %s", resp.Status)
	}
	d.waitLine("bob Stopped", transitionTo("bob", "Stopped"))
	b := waitAgent(t, base, "bob", func(a view.Agent) bool { return a.State == "Stopped" })
	if b.Visual != view.Dead || b.Indicator != "○" {
		t.Fatalf("stopped bob %+v", b)
	}
	_, data = httpDo(t, "GET", base+"/api/tasks", "", "")
	strictJSON(t, "/api/tasks", data, &board)
	if board.Counts["OPEN"] != 1 || len(board.Tasks) != 1 || board.Tasks[0].Title != "from the web" {
		t.Fatalf("board after the new task %+v", board)
	}
	// The log of a session, as text (its first line may still be on its
	// way: the session's program starts inside its sandbox a moment after
	// the session is Running).
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, data = httpDo(t, "GET", base+"/api/agents/alice/log", "", "")
		if resp.StatusCode == 200 && strings.Contains(string(data), "tick 1\n") {
			break
		}
		if resp.StatusCode != 200 || time.Now().After(deadline) {
			t.Fatalf("log: %s %q", resp.Status, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sseClient reads /api/events as a browser would.
type sseClient struct {
	resp   *http.Response
	events chan sseMsg
}

type sseMsg struct{ id, event, data string }

func openSSE(t *testing.T, url, lastID string) *sseClient {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	c := &sseClient{resp: resp, events: make(chan sseMsg, 4096)}
	go func() {
		defer close(c.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var m sseMsg
		for sc.Scan() {
			switch l := sc.Text(); {
			case l == "":
				if m.event != "" {
					c.events <- m
				}
				m = sseMsg{}
			case strings.HasPrefix(l, "id: "):
				m.id = l[4:]
			case strings.HasPrefix(l, "event: "):
				m.event = l[7:]
			case strings.HasPrefix(l, "data: "):
				m.data += l[6:]
			}
		}
	}()
	t.Cleanup(c.close)
	return c
}

func (c *sseClient) close() {
	c.resp.Body.Close()
	for range c.events {
	}
}

// next returns the next message of kind.
func (c *sseClient) next(t *testing.T, kind string) sseMsg {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-c.events:
			if !ok {
				t.Fatalf("stream ended waiting for %s", kind)
			}
			if m.event == kind {
				return m
			}
		case <-timeout:
			t.Fatalf("no %s within 20s", kind)
		}
	}
}

// TestDashboardSSEResume: a browser whose stream drops reconnects with
// Last-Event-ID and gets exactly the events of the event log it missed,
// from the real swarm.db, then the live ones.
func TestDashboardSSEResume(t *testing.T) {
	_, cfg, base := dashboardDaemon(t, dashToken, "alice", "bob")
	first := openSSE(t, base+"/api/events", "")
	var snap view.Snapshot
	strictJSON(t, "snapshot", []byte(first.next(t, "snapshot").data), &snap)
	if len(snap.Agents) != 2 || !snap.Features.Writes || snap.LastEventID == 0 {
		t.Fatalf("snapshot %+v", snap)
	}
	// A live event, then the connection drops.
	if _, _, code := runCLI(t, nil, "", "stop", "bob", "-c", cfg); code != 0 {
		t.Fatal("stop bob")
	}
	last := first.next(t, "event")
	first.close()
	lastID, _ := strconv.ParseInt(last.id, 10, 64)

	// Things happen while the browser is away.
	waitAgent(t, base, "bob", func(a view.Agent) bool { return a.State == "Stopped" })
	if _, _, code := runCLI(t, nil, "", "start", "bob", "-c", cfg); code != 0 {
		t.Fatal("start bob")
	}
	waitAgent(t, base, "bob", func(a view.Agent) bool { return a.State == "Running" })
	httpDo(t, "POST", base+"/api/tasks", dashToken, `{"title":"while away"}`)
	var missed []view.Event
	deadline := time.Now().Add(20 * time.Second)
	// Until the task's event is among them: not necessarily the last, as
	// bob's session's start can be committed after it (the journal
	// batches a session's start row).
	hasTask := func() bool {
		return slices.ContainsFunc(missed, func(e view.Event) bool { return e.TaskID != 0 })
	}
	for !hasTask() {
		_, data := httpDo(t, "GET", base+"/api/events?after="+last.id+"&limit=1000", "", "")
		missed = nil
		strictJSON(t, "events", data, &missed)
		if time.Now().After(deadline) {
			t.Fatalf("the task's event never reached the log: %+v", missed)
		}
		time.Sleep(20 * time.Millisecond)
	}

	again := openSSE(t, base+"/api/events?tail=50", last.id)
	again.next(t, "snapshot")
	for i, want := range missed {
		m := again.next(t, "event")
		var e view.Event
		strictJSON(t, "event", []byte(m.data), &e)
		if m.id != strconv.FormatInt(want.ID, 10) || e != want {
			t.Fatalf("resumed event %d: id %s %+v, want %+v", i, m.id, e, want)
		}
	}
	if missed[0].ID != lastID+1 {
		t.Fatalf("first missed event %d, last seen %d: the log has a gap", missed[0].ID, lastID)
	}
	// And the stream goes on live.
	if _, _, code := runCLI(t, nil, "", "stop", "alice", "-c", cfg); code != 0 {
		t.Fatal("stop alice")
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("no Stopped event of alice on the resumed stream within 30s")
		}
		m := again.next(t, "event")
		var e view.Event
		strictJSON(t, "event", []byte(m.data), &e)
		if e.ID <= missed[len(missed)-1].ID {
			t.Fatalf("event %d repeated after the resume", e.ID)
		}
		if e.Agent == "alice" && e.To == "Stopped" {
			break
		}
	}
}

// TestTopOnce: swarmd top prints one plain frame when its output is not a
// terminal; without a daemon it says so and exits 2.
func TestTopOnce(t *testing.T) {
	_, cfg, base := dashboardDaemon(t, "", "alice", "bob")
	waitAgent(t, base, "alice", func(a view.Agent) bool { return !a.LastOutput.IsZero() })
	out, stderr, code := runCLI(t, []string{"COLUMNS=100"}, "", "top", "-c", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"swarmd top  2 agents", "● alice", "Running", "merge queue: not configured", "alice #1: Running"} {
		if !strings.Contains(out, want) {
			t.Errorf("frame lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("a frame for a pipe carries escape sequences")
	}
	out, _, _ = runCLI(t, []string{"TERM=dumb"}, "", "top", "-c", cfg)
	if !strings.Contains(out, "R alice") {
		t.Errorf("dumb frame:\n%s", out)
	}
	empty := writeConfig(t, gitRepo(t), "agents: [{name: a, role: x}]\n")
	_, stderr, code = runCLI(t, nil, "", "top", "-c", empty)
	if code != 2 || !strings.Contains(stderr, "no swarmd is running") {
		t.Fatalf("no daemon: exit %d: %s", code, stderr)
	}
}
