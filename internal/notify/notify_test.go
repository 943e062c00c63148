package notify

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
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
