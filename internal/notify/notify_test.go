package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type received struct {
	body   string
	header http.Header
}

// receiver is a real HTTP server that answers the first fail requests
// with 503, then 204, and hands every request it took to got.
func receiver(t *testing.T, fail int32) (*httptest.Server, chan received) {
	got := make(chan received, 16)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if n.Add(1) <= fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		got <- received{string(b), r.Header.Clone()}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func wait(t *testing.T, got chan received) received {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no POST within 10 s")
	}
	return received{}
}

// An alert is POSTed once as swarmd's JSON, naming agent, reason, fix
// and dashboard; a receiver answering 503 gets it again after a backoff.
func TestDeliversAndRetries(t *testing.T) {
	srv, got := receiver(t, 2)
	n := New(Options{URL: srv.URL + "/hook/secret", Dashboard: "http://127.0.0.1:9464/", Backoff: 10 * time.Millisecond})
	n.Start(context.Background())
	defer n.Stop()
	n.Notify(Alert{Kind: AgentStopped, Agent: "carol", Reason: "5 consecutive errors", Fix: "swarmd start carol"})
	r := wait(t, got)
	var a Alert
	if err := json.Unmarshal([]byte(r.body), &a); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	if a.Kind != AgentStopped || a.Agent != "carol" || a.Fix != "swarmd start carol" || a.Dashboard != "http://127.0.0.1:9464/" ||
		a.At.IsZero() || !strings.Contains(a.Text, "carol") || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("alert %+v, header %v", a, r.header)
	}
	select {
	case r := <-got:
		t.Fatalf("a second POST: %q", r.body)
	case <-time.After(100 * time.Millisecond):
	}
	if sent, failed, dropped := n.Counts(); sent != 1 || failed != 0 || dropped != 0 {
		t.Fatalf("counts %d %d %d", sent, failed, dropped)
	}
}

// Slack gets {"text": …}; ntfy the text with a Title.
func TestFormats(t *testing.T) {
	a := Alert{Kind: TaskFailed, Task: 4, Reason: "merge rejected 6 times", Fix: "swarmd task retry 4"}
	a.Text = text(a)
	b, h, err := Encode(a, FormatSlack)
	var slack map[string]string
	if err != nil || json.Unmarshal(b, &slack) != nil || slack["text"] != a.Text || len(slack) != 1 || h["Content-Type"] != "application/json" {
		t.Fatalf("slack: %s %v %v", b, h, err)
	}
	b, h, err = Encode(a, FormatNtfy)
	if err != nil || string(b) != a.Text || !strings.Contains(h["Title"], TaskFailed) {
		t.Fatalf("ntfy: %s %v %v", b, h, err)
	}
	if !strings.Contains(a.Text, "task #4") || !strings.Contains(a.Text, "swarmd task retry 4") {
		t.Fatalf("text %q", a.Text)
	}
	if _, _, err := Encode(a, "xml"); err == nil {
		t.Fatal("an unknown format encoded")
	}
}

// A receiver that is down holds nobody up: Notify returns at once, a full
// queue drops (and counts), Stop returns at once, and the URL's secret path
// is in no error.
func TestReceiverDownDelaysNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/hooks/T000/SECRET"
	l.Close() // nothing listens: every POST is refused
	n := New(Options{URL: url, Queue: 4, Backoff: time.Hour})
	n.Start(context.Background())
	start := time.Now()
	for range 100 {
		n.Notify(Alert{Kind: Unhealthy, Reason: "disk full"})
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("100 Notify calls took %s with the receiver down", d)
	}
	start = time.Now()
	n.Stop()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Stop took %s", d)
	}
	if _, _, dropped := n.Counts(); dropped < 90 {
		t.Fatalf("dropped %d of 100 with a queue of 4", dropped)
	}
	if err := New(Options{URL: url}).post(context.Background(), Alert{}); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("post error %v: want one that hides the URL's path", err)
	}
}

// No URL: nothing is sent, nothing runs.
func TestDisabled(t *testing.T) {
	n := New(Options{})
	n.Start(context.Background())
	n.Notify(Alert{Kind: AgentStopped})
	n.Stop()
	if n.Enabled() {
		t.Fatal("enabled without a URL")
	}
}

// A reason is one line, however it came (a reviewer's feedback, a
// fault), and a long one is cut.
func TestReasonIsOneLine(t *testing.T) {
	srv, got := receiver(t, 0)
	n := New(Options{URL: srv.URL})
	n.Start(context.Background())
	defer n.Stop()
	n.Notify(Alert{Kind: TaskFailed, Task: 3, Reason: "the reviewer said:\n  no tests\n\n" + strings.Repeat("x", 2*maxReason)})
	var a Alert
	if err := json.Unmarshal([]byte(wait(t, got).body), &a); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(a.Reason, "\n") || !strings.HasPrefix(a.Reason, "the reviewer said: no tests x") ||
		len([]rune(a.Reason)) != maxReason || strings.Contains(a.Text, "\n") {
		t.Fatalf("reason %q (%d runes)", a.Reason[:40], len([]rune(a.Reason)))
	}
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stopAsync runs Stop in a goroutine of its own; the channel is closed
// when it returns.
func stopAsync(n *Notifier) chan struct{} {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n.Stop()
	}()
	return stopped
}

func returned(t *testing.T, what string, c chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10 s", what)
	}
}

// notDelivered is the log's lines for alerts left unsent by the stop.
func notDelivered(logged *observer.ObservedLogs) []observer.LoggedEntry {
	var out []observer.LoggedEntry
	for _, e := range logged.FilterMessage(notDeliveredMsg).All() {
		if e.Level == zap.ErrorLevel {
			out = append(out, e)
		}
	}
	return out
}

// Alerts queued when Stop is called are all sent, in order, before it
// returns: the receiver holds the first until Stop has begun.
func TestStopSendsWhatIsQueued(t *testing.T) {
	var mu sync.Mutex
	var got []string
	arrived, release := make(chan struct{}, 16), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("body: %v", err)
		}
		arrived <- struct{}{}
		<-release
		mu.Lock()
		got = append(got, a.Reason)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release) // before srv.Close, which waits for the handlers
		}
	})
	n := New(Options{URL: srv.URL})
	n.Start(context.Background())
	var want []string
	for i := range 5 {
		want = append(want, fmt.Sprintf("alert %d", i))
		n.Notify(Alert{Kind: Unhealthy, Reason: want[i]})
	}
	<-arrived // the first is being sent, four are queued
	stopped := stopAsync(n)
	waitFor(t, "Stop to begin", n.draining)
	close(release)
	returned(t, "Stop", stopped)

	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(got, ", "), strings.Join(want, ", "); got != want {
		t.Fatalf("received before Stop returned: %s; want %s", got, want)
	}
	if sent, failed, dropped := n.Counts(); sent != 5 || failed != 0 || dropped != 0 {
		t.Fatalf("counts %d %d %d; want 5 0 0", sent, failed, dropped)
	}
}

// A receiver that takes the POST and never answers holds Stop up for the
// drain's deadline, no longer; the alert under way and the one queued
// behind it are logged, each with its kind, agent and text.
func TestStopGivesUpOnAHangingReceiver(t *testing.T) {
	arrived, hang := make(chan struct{}, 16), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) })
	core, logged := observer.New(zap.InfoLevel)
	const drain = 200 * time.Millisecond
	n := New(Options{URL: srv.URL, Drain: drain, Log: zap.New(core)})
	n.Start(context.Background())
	n.Notify(Alert{Kind: AgentStopped, Agent: "carol", Reason: "5 consecutive errors"})
	n.Notify(Alert{Kind: TaskFailed, Agent: "bob", Task: 7, Reason: "merge rejected 6 times"})
	<-arrived
	start := time.Now()
	n.Stop()
	if d := time.Since(start); d < drain || d > drain+time.Second {
		t.Fatalf("Stop took %s with a receiver that never answers; want the drain's %s", d, drain)
	}
	e := notDelivered(logged)
	if got, want := len(e), 2; got != want {
		t.Fatalf("%d lines %q; want %d", got, notDeliveredMsg, want)
	}
	for i, w := range []struct {
		kind, agent, text string
		task              int64
	}{
		{AgentStopped, "carol", "swarmd: agent_stopped agent carol: 5 consecutive errors", 0},
		{TaskFailed, "bob", "swarmd: task_failed agent bob task #7: merge rejected 6 times", 7},
	} {
		m := e[i].ContextMap()
		task, _ := m["task"].(int64)
		if m["kind"] != w.kind || m["agent"] != w.agent || m["text"] != w.text || task != w.task {
			t.Errorf("line %d: %v; want kind %s, agent %s, task %d, text %q", i, m, w.kind, w.agent, w.task, w.text)
		}
	}
	if sent, failed, dropped := n.Counts(); sent != 0 || failed != 2 || dropped != 0 {
		t.Fatalf("counts %d %d %d; want 0 2 0", sent, failed, dropped)
	}
}

// statusReceiver answers with status[i] the i-th POST (204 past the end)
// and hands each POST's alert to got. A request waits for hold, when
// not nil, before it is answered.
func statusReceiver(t *testing.T, hold chan struct{}, status ...int) (*httptest.Server, chan Alert) {
	got := make(chan Alert, 16)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("body: %v", err)
		}
		if hold != nil {
			<-hold
		}
		code := http.StatusNoContent
		if i := int(n.Add(1)) - 1; i < len(status) {
			code = status[i]
		}
		if code/100 == 2 {
			got <- a
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// A receiver that answers 500 in the drain, then 200, gets the alert
// before Stop returns: a failed POST is retried while the deadline allows.
func TestStopRetriesWithinTheDrain(t *testing.T) {
	hold := make(chan struct{})
	srv, got := statusReceiver(t, hold, http.StatusInternalServerError)
	t.Cleanup(func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	})
	n := New(Options{URL: srv.URL, Backoff: 10 * time.Millisecond, Drain: 5 * time.Second})
	n.Start(context.Background())
	n.Notify(Alert{Kind: BudgetExhausted, Agent: "dave"})
	stopped := stopAsync(n)
	waitFor(t, "Stop to begin", n.draining)
	close(hold) // the first POST is answered 500 in the drain
	returned(t, "Stop", stopped)
	select {
	case a := <-got:
		if a.Kind != BudgetExhausted || a.Agent != "dave" {
			t.Fatalf("delivered %+v", a)
		}
	default:
		t.Fatal("the alert was not delivered before Stop returned")
	}
	if sent, failed, dropped := n.Counts(); sent != 1 || failed != 0 || dropped != 0 {
		t.Fatalf("counts %d %d %d; want 1 0 0", sent, failed, dropped)
	}
}

// An alert waiting out a backoff longer than the drain when Stop comes is
// tried again at once, not given up untried.
func TestStopRetriesAnAlertInItsBackoffAtOnce(t *testing.T) {
	srv, got := statusReceiver(t, nil, http.StatusInternalServerError)
	core, logged := observer.New(zap.InfoLevel)
	n := New(Options{URL: srv.URL, Backoff: time.Hour, Drain: 5 * time.Second, Log: zap.New(core)})
	n.Start(context.Background())
	n.Notify(Alert{Kind: ProviderDown, Reason: "claude out"})
	waitFor(t, "the first POST's failure", func() bool { return logged.FilterMessage("notify: delivery failed, retrying").Len() > 0 })
	start := time.Now()
	n.Stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Stop took %s", d)
	}
	select {
	case a := <-got:
		if a.Kind != ProviderDown {
			t.Fatalf("delivered %+v", a)
		}
	default:
		t.Fatal("the alert in its backoff was not delivered before Stop returned")
	}
}

// Notify after Stop neither blocks nor panics, and logs the alert as not
// delivered; so does Stop for an alert queued before a Start that never
// came.
func TestNotifyAfterStopIsLogged(t *testing.T) {
	srv, got := statusReceiver(t, nil)
	core, logged := observer.New(zap.InfoLevel)
	n := New(Options{URL: srv.URL, Log: zap.New(core)})
	n.Start(context.Background())
	n.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Notify(Alert{Kind: AgentStopped, Agent: "erin", Reason: "fatal"})
	}()
	returned(t, "Notify after Stop", done)
	n.Stop() // again: nothing
	n.Start(context.Background())
	select {
	case a := <-got:
		t.Fatalf("sent after Stop: %+v", a)
	default:
	}
	e := notDelivered(logged)
	if len(e) != 1 || e[0].ContextMap()["agent"] != "erin" || e[0].ContextMap()["text"] != "swarmd: agent_stopped agent erin: fatal" {
		t.Fatalf("lines %+v; want one, for erin's alert", e)
	}
	if sent, failed, dropped := n.Counts(); sent != 0 || failed != 0 || dropped != 1 {
		t.Fatalf("counts %d %d %d; want 0 0 1", sent, failed, dropped)
	}

	core, logged = observer.New(zap.InfoLevel)
	n = New(Options{URL: srv.URL, Log: zap.New(core)})
	n.Notify(Alert{Kind: Unhealthy, Reason: "disk full"})
	n.Stop()
	if e := notDelivered(logged); len(e) != 1 || e[0].ContextMap()["kind"] != Unhealthy {
		t.Fatalf("lines %+v; want one, for the alert queued before no Start", e)
	}
	if sent, failed, dropped := n.Counts(); sent != 0 || failed != 1 || dropped != 0 {
		t.Fatalf("counts %d %d %d; want 0 1 0", sent, failed, dropped)
	}
}

// LogNotDelivered logs an alert held for a Notifier that never opened as
// Stop does: one line, its text filled in.
func TestLogNotDelivered(t *testing.T) {
	core, logged := observer.New(zap.InfoLevel)
	LogNotDelivered(zap.New(core), Alert{Kind: TaskFailed, Task: 3, Agent: "bob", Reason: "no\ntests"})
	e := notDelivered(logged)
	if len(e) != 1 || e[0].ContextMap()["text"] != "swarmd: task_failed agent bob task #3: no tests" {
		t.Fatalf("lines %+v", e)
	}
}
