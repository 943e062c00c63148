package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/view"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "0123456789abcdef-token"

// source is a daemon in memory for the web server.
type source struct {
	mu     sync.Mutex
	events []view.Event
	agents []view.AgentState
}

func (s *source) Agents() []view.AgentState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]view.AgentState(nil), s.agents...)
}

func (s *source) emit(e view.Event) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.ID = int64(len(s.events) + 1)
	e.At = time.Now()
	s.events = append(s.events, e)
	return e.ID
}

func (s *source) Events(_ context.Context, after int64, limit int) ([]view.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []view.Event
	for _, e := range s.events {
		if e.ID > after && (limit <= 0 || len(out) < limit) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *source) LastEventID(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.events)), nil
}

func (s *source) Tasks(context.Context) (view.TaskList, error) {
	return view.TaskList{Tasks: []view.Task{{ID: 1, Title: "a task", State: "OPEN"}}}, nil
}
func (s *source) Spend(context.Context) (map[string]view.Spend, error) { return nil, nil }
func (s *source) Merge(context.Context) (view.MergeQueue, error)       { return view.NotConfigured, nil }
func (s *source) Inbox(context.Context) ([]view.Need, error)           { return nil, nil }
func (s *source) Daemons(context.Context) ([]view.Daemon, error) {
	return []view.Daemon{{Name: "host1:/srv/a", Agents: []string{"alice"}, Self: true, Live: 1}}, nil
}
func (s *source) Features() view.Features     { return view.Features{Tasks: true} }
func (s *source) Fault() string               { return "" }
func (s *source) Thresholds() view.Thresholds { return view.Thresholds{StallAfter: time.Minute} }

// actions records the writes that got through.
type actions struct {
	mu    sync.Mutex
	calls []string
}

func (a *actions) record(s string) {
	a.mu.Lock()
	a.calls = append(a.calls, s)
	a.mu.Unlock()
}

func (a *actions) Stop(_ context.Context, n string) error {
	if n == "nobody" {
		return fmt.Errorf("%w: no agent nobody", view.ErrNotFound)
	}
	a.record("stop " + n)
	return nil
}
func (a *actions) Start(_ context.Context, n string) error { a.record("start " + n); return nil }
func (a *actions) Pause(context.Context, string, bool) error {
	return fmt.Errorf("pause and resume: %w", view.ErrUnsupported)
}
func (a *actions) Resume(context.Context, string) error {
	return fmt.Errorf("pause and resume: %w", view.ErrUnsupported)
}
func (a *actions) Mail(_ context.Context, m view.MailRequest) ([]int64, error) {
	a.record("mail " + m.To + ": " + m.Body)
	return []int64{7}, nil
}
func (a *actions) AddTask(_ context.Context, t view.TaskRequest) (view.Task, error) {
	a.record("task " + t.Title)
	return view.Task{ID: 2, Title: t.Title, State: "OPEN"}, nil
}

type fixture struct {
	src  *source
	acts *actions
	hub  *view.Hub
	h    http.Handler // the dashboard's handler, as srv serves it
	srv  *httptest.Server
	tok  string
}

func newFixture(t testing.TB, tok string, agents int) *fixture {
	f := &fixture{src: &source{}, acts: &actions{}, tok: tok}
	now := time.Now()
	for i := 0; i < agents; i++ {
		f.src.agents = append(f.src.agents, view.AgentState{Name: fmt.Sprintf("agent-%03d", i), Seq: 4, Branch: "swarm/x/work",
			Condition: view.Condition{State: agent.Running, Since: now, SessionStarted: now, LastOutput: now}})
	}
	f.hub = view.NewHub(f.src, view.Options{})
	if err := f.hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	base, cancel := context.WithCancel(context.Background())
	svc := &view.Service{Base: base, Hub: f.hub, Actions: f.acts,
		Sessions: func(context.Context, string, int) ([]view.Session, error) { return nil, nil },
		Task: func(_ context.Context, id int64) (view.TaskView, error) {
			if id != 1 {
				return view.TaskView{}, fmt.Errorf("%w: no task %d", view.ErrNotFound, id)
			}
			return view.TaskView{Task: view.Task{ID: 1, Title: "a task", State: "CLOSED"}, Head: "abc",
				Timeline: []view.TaskEvent{{ID: 1, To: "OPEN", Actor: "operator"}, {ID: 2, From: "DONE", To: "CLOSED", Actor: "merge-queue"}},
				Verdicts: []view.Verdict{{Round: 1, Reviewer: "rita", Verdict: "PASS"}},
				Merge:    &view.TaskMerge{State: "merged", Commit: "def", Head: "abc", GateLog: "ok"},
				Spend:    view.Spend{Sessions: 2, TokensIn: 10, TokensOut: 5, CostUSD: 0.5}}, nil
		}}
	s := New(Options{Service: svc, Token: func() string { return f.tok }, LoopbackOnly: true})
	f.h = s.Handler()
	f.srv = httptest.NewServer(f.h)
	t.Cleanup(func() {
		cancel()
		f.hub.Close()
		f.srv.Close()
	})
	return f
}

func (f *fixture) do(t testing.TB, method, path, auth, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestSecurityHeaders: every response, page, asset, API or error, carries
// them.
func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t, token, 1)
	for _, p := range []string{"/", "/assets/app.js", "/assets/app.css", "/api/agents", "/api/nothing", "/nothing"} {
		resp := f.do(t, "GET", p, "", "")
		h := resp.Header
		if h.Get("Content-Security-Policy") == "" || !strings.HasPrefix(h.Get("Content-Security-Policy"), "default-src 'self'") ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", p, h)
		}
	}
	if resp := f.do(t, "GET", "/", "", ""); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("/: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	if resp := f.do(t, "GET", "/api/nothing", "", ""); resp.StatusCode != 404 {
		t.Errorf("/api/nothing: %s", resp.Status)
	}
}

// TestAssetsStayLocal: the page loads nothing from elsewhere: every src
// and href is a path on this server, and the script builds no URL with a
// host.
func TestAssetsStayLocal(t *testing.T) {
	f := newFixture(t, token, 1)
	page, _ := io.ReadAll(f.do(t, "GET", "/", "", "").Body)
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(string(page), -1)
	if len(refs) < 3 {
		t.Fatalf("page refers to %v", refs)
	}
	for _, r := range refs {
		if !strings.HasPrefix(r[1], "/") || strings.HasPrefix(r[1], "//") {
			t.Errorf("page refers to %q, not a path on this server", r[1])
		}
		if resp := f.do(t, "GET", r[1], "", ""); resp.StatusCode != 200 {
			t.Errorf("%s: %s", r[1], resp.Status)
		}
	}
	js, _ := io.ReadAll(f.do(t, "GET", "/assets/app.js", "", "").Body)
	if m := regexp.MustCompile(`\b(?:https?|wss?)://|[^:/]//[a-z0-9-]+\.[a-z]`).FindString(string(js)); m != "" {
		t.Errorf("app.js names a host: %q", m)
	}
	if strings.Contains(string(js), "innerHTML") {
		t.Error("app.js uses innerHTML: server values must go in as text")
	}
}

// TestWritesNeedTheToken: read-only without a token (403), and with one
// every write needs it exactly (401 otherwise), reads never do.
func TestWritesNeedTheToken(t *testing.T) {
	writes := []struct{ path, body string }{
		{"/api/agents/bob/stop", ""}, {"/api/agents/bob/start", ""}, {"/api/agents/bob/pause", ""},
		{"/api/mail", `{"to":"bob","body":"hi"}`}, {"/api/tasks", `{"title":"t"}`}, {"/api/auth", ""},
	}
	ro := newFixture(t, "", 1)
	for _, w := range writes {
		if resp := ro.do(t, "POST", w.path, "Bearer "+token, w.body); resp.StatusCode != http.StatusForbidden {
			t.Errorf("read-only %s: %s", w.path, resp.Status)
		}
	}
	f := newFixture(t, token, 1)
	for _, auth := range []string{"", "Bearer", "Bearer " + token[:len(token)-1], "Bearer " + token + "x", "Basic " + token, token} {
		for _, w := range writes {
			resp := f.do(t, "POST", w.path, auth, w.body)
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%q %s: %s", auth, w.path, resp.Status)
			}
		}
	}
	if len(f.acts.calls) != 0 {
		t.Fatalf("refused writes reached the daemon: %v", f.acts.calls)
	}
	// A slice, not a map: the order of the calls reaching the daemon is
	// asserted below.
	want := []struct {
		path string
		code int
	}{
		{"/api/agents/bob/stop", 202}, {"/api/agents/bob/start", 202}, {"/api/agents/bob/pause", 501}, {"/api/agents/bob/resume", 501},
		{"/api/agents/nobody/stop", 404}, {"/api/agents/bob/explode", 404}, {"/api/auth", 204},
	}
	for _, w := range want {
		if resp := f.do(t, "POST", w.path, "Bearer "+token, ""); resp.StatusCode != w.code {
			t.Errorf("%s: %s, want %d", w.path, resp.Status, w.code)
		}
	}
	for body, code := range map[string]int{`{"to":"bob","body":"hi"}`: 201, `{"to":"bob","bogus":1}`: 400, `not json`: 400} {
		if resp := f.do(t, "POST", "/api/mail", "Bearer "+token, body); resp.StatusCode != code {
			t.Errorf("mail %s: %s, want %d", body, resp.Status, code)
		}
	}
	resp := f.do(t, "POST", "/api/tasks", "Bearer "+token, `{"title":"write docs","to":"bob"}`)
	var tk view.Task
	if err := json.NewDecoder(resp.Body).Decode(&tk); err != nil || resp.StatusCode != 201 || tk.ID != 2 {
		t.Errorf("task: %s %+v %v", resp.Status, tk, err)
	}
	if got := strings.Join(f.acts.calls, ","); got != "stop bob,start bob,mail bob: hi,task write docs" {
		t.Errorf("writes through: %s", got)
	}
}

// TestForeignHostRefused: on a loopback listener a request that names
// another host (a page elsewhere, its name rebound to 127.0.0.1) is refused.
func TestForeignHostRefused(t *testing.T) {
	f := newFixture(t, token, 1)
	for host, code := range map[string]int{"evil.example": 421, "evil.example:9464": 421, "localhost:9464": 200,
		"127.0.0.1:9464": 200, "[::1]:9464": 200, "app.localhost": 200} {
		req, _ := http.NewRequest("GET", f.srv.URL+"/api/agents", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("Host %s: %s, want %d", host, resp.Status, code)
		}
	}
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct{ id, event, data string }

// readSSE parses a stream into events on a channel until it ends.
func readSSE(body io.Reader) <-chan sseEvent {
	ch := make(chan sseEvent, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var cur sseEvent
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.event != "" || len(data) > 0 {
					cur.data = strings.Join(data, "\n")
					ch <- cur
				}
				cur, data = sseEvent{}, nil
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				data = append(data, line[6:])
			}
		}
	}()
	return ch
}

func (f *fixture) stream(t *testing.T, ctx context.Context, lastID string) <-chan sseEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/api/events?tail=5", nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	t.Cleanup(func() { resp.Body.Close() })
	return readSSE(resp.Body)
}

func nextEvent(t *testing.T, ch <-chan sseEvent, kind string) sseEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended waiting for %s", kind)
			}
			if e.event == kind {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event within 10s", kind)
		}
	}
}

// TestSSEResumeLosesNothing: a browser that reconnects with Last-Event-ID
// gets every event it missed, once and in order, then the live ones.
func TestSSEResumeLosesNothing(t *testing.T) {
	f := newFixture(t, token, 2)
	for i := 0; i < 3; i++ {
		f.src.emit(view.Event{Agent: "agent-000", Event: "before"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := f.stream(t, ctx, "")
	snap := nextEvent(t, ch, "snapshot")
	var sn view.Snapshot
	if err := json.Unmarshal([]byte(snap.data), &sn); err != nil || len(sn.Agents) != 2 || sn.LastEventID != 3 {
		t.Fatalf("snapshot %s: %v", snap.data, err)
	}
	for want := 1; want <= 3; want++ { // the tail
		if e := nextEvent(t, ch, "event"); e.id != strconv.Itoa(want) {
			t.Fatalf("tail event id %s, want %d", e.id, want)
		}
	}
	f.src.emit(view.Event{Agent: "agent-000", Event: "live"})
	f.hub.Notify()
	last := nextEvent(t, ch, "event")
	if last.id != "4" {
		t.Fatalf("live event id %s", last.id)
	}
	cancel() // the browser loses the connection
	for i := 0; i < 20; i++ {
		f.src.emit(view.Event{Agent: "agent-001", Event: "missed"})
		f.hub.Notify()
	}
	ch = f.stream(t, context.Background(), last.id)
	nextEvent(t, ch, "snapshot")
	for want := 5; want <= 24; want++ {
		e := nextEvent(t, ch, "event")
		var ev view.Event
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil || e.id != strconv.Itoa(want) || ev.ID != int64(want) || ev.Event != "missed" {
			t.Fatalf("resumed event %+v (%v), want id %d", e, err, want)
		}
	}
	f.src.emit(view.Event{Agent: "agent-001", Event: "after"})
	f.hub.Notify()
	if e := nextEvent(t, ch, "event"); e.id != "25" {
		t.Fatalf("first live event after the resume: %s", e.id)
	}
}

// TestAPIShapes decodes every read endpoint strictly into its documented
// type: a field renamed or added without the docs fails here.
func TestAPIShapes(t *testing.T) {
	f := newFixture(t, token, 3)
	f.src.emit(view.Event{Agent: "agent-000", From: "Spawning", Event: "SessionStarted", To: "Running"})
	for path, into := range map[string]any{
		"/api/agents": &[]view.Agent{}, "/api/agents/agent-001": &view.Agent{}, "/api/tasks": &view.TaskBoard{},
		"/api/merge": &view.MergeQueue{}, "/api/sessions": &[]view.Session{}, "/api/events?after=0": &[]view.Event{},
		"/api/snapshot": &view.Snapshot{},
	} {
		resp := f.do(t, "GET", path, "", "")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %s %s", path, resp.Status, resp.Header.Get("Content-Type"))
			continue
		}
		dec := json.NewDecoder(resp.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	var as []map[string]any
	if err := json.NewDecoder(f.do(t, "GET", "/api/agents", "", "").Body).Decode(&as); err != nil || len(as) != 3 {
		t.Fatalf("agents: %v %v", as, err)
	}
	for _, k := range []string{"name", "state", "visual", "indicator", "seq", "since", "consecutive_errors", "total_errors", "paused"} {
		if _, ok := as[0][k]; !ok {
			t.Errorf("an agent has no %q: %v", k, as[0])
		}
	}
	if as[0]["state"] != "Running" || as[0]["visual"] != "running" || as[0]["indicator"] != "●" {
		t.Errorf("agent %v", as[0])
	}
	var sn view.Snapshot
	_ = json.NewDecoder(f.do(t, "GET", "/api/snapshot", "", "").Body).Decode(&sn)
	if !sn.Features.Writes || !sn.Features.Tasks || sn.Features.Pause || sn.Merge.Configured {
		t.Errorf("features %+v merge %+v", sn.Features, sn.Merge)
	}
	if resp := f.do(t, "GET", "/api/agents/nobody", "", ""); resp.StatusCode != 404 {
		t.Errorf("unknown agent: %s", resp.Status)
	}
	// One task's view: read without the token; unknown 404, not an id 400.
	var tv view.TaskView
	resp := f.do(t, "GET", "/api/tasks/1", "", "")
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tv); err != nil || resp.StatusCode != 200 || tv.Task.ID != 1 || len(tv.Timeline) != 2 ||
		tv.Merge == nil || tv.Merge.Commit != "def" || tv.Verdicts[0].Verdict != "PASS" || tv.Spend.Sessions != 2 {
		t.Errorf("task 1: %s %+v %v", resp.Status, tv, err)
	}
	for path, code := range map[string]int{"/api/tasks/2": 404, "/api/tasks/x": 400, "/api/tasks/0": 400, "/api/tasks/%231": 200} {
		if resp := f.do(t, "GET", path, "", ""); resp.StatusCode != code {
			t.Errorf("%s: %s, want %d", path, resp.Status, code)
		}
	}
	if resp := f.do(t, "GET", "/api/events?limit=x", "", ""); resp.StatusCode != 400 {
		t.Errorf("bad limit: %s", resp.Status)
	}
}

// BenchmarkAPIAgents200 is GET /api/agents of a 200-agent swarm through the
// hub, the handler and the JSON encoder, over loopback HTTP.
func BenchmarkAPIAgents200(b *testing.B) {
	f := newFixture(b, token, 200)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	var n int64
	b.ResetTimer()
	for b.Loop() {
		resp, err := client.Get(f.srv.URL + "/api/agents")
		if err != nil {
			b.Fatal(err)
		}
		c, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		n = c
	}
	b.ReportMetric(float64(n), "bytes/response")
}
