// Package notify tells the operator of what needs a person: one POST to a
// webhook per event (an agent stopped for good, a task failed past its
// limits, a budget exhausted, the daemon unhealthy), in swarmd's JSON or in
// the shape Slack's or ntfy's incoming endpoints take. Delivery never holds
// the caller up: alerts queue (bounded) and one goroutine sends them in
// order, retrying with backoff for a while when the receiver is down.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Kinds of alert.
const (
	AgentStopped    = "agent_stopped"    // stopped for good: its thresholds, a fatal error
	TaskFailed      = "task_failed"      // FAILED past its limits (merge rejections, review iterations)
	BudgetExhausted = "budget_exhausted" // an agent's or the swarm's budget is spent
	Unhealthy       = "daemon_unhealthy" // /readyz failing: the store gone, the disk full
	ProviderDown    = "provider_down"    // a provider has taken no session for a long while
)

// Formats of the POST's body.
const (
	FormatJSON  = "json"
	FormatSlack = "slack"
	FormatNtfy  = "ntfy"
)

// Alert is one event that needs a person.
type Alert struct {
	Kind      string    `json:"kind"`
	Agent     string    `json:"agent,omitempty"`
	Task      int64     `json:"task,omitempty"`
	Reason    string    `json:"reason"`
	Fix       string    `json:"fix,omitempty"` // the one command that deals with it
	At        time.Time `json:"at"`
	Dashboard string    `json:"dashboard,omitempty"`
	Text      string    `json:"text"` // the whole of it in one line, for people
}

// Options configure a Notifier; zero values take the defaults.
type Options struct {
	URL       string // where to POST; "" makes a Notifier that sends nothing
	Format    string // FormatJSON (default), FormatSlack, FormatNtfy
	Dashboard string // the dashboard's URL, put in every alert
	Client    *http.Client
	Log       *zap.Logger
	// Backoff is the first wait after a failed delivery, doubled up to
	// MaxBackoff; an alert not delivered within MaxAge is dropped (logged).
	Backoff, MaxBackoff, MaxAge time.Duration
	Queue                       int // alerts waiting at most; more are dropped (counted)
	Now                         func() time.Time
}

func (o *Options) setDefaults() {
	if o.Format == "" {
		o.Format = FormatJSON
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.MaxAge <= 0 {
		o.MaxAge = time.Hour
	}
	if o.Queue <= 0 {
		o.Queue = 256
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Notifier delivers alerts to the webhook.
type Notifier struct {
	opts  Options
	queue chan Alert

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	started bool

	sent, failed, dropped atomic.Uint64
}

// New returns a Notifier; Start begins delivery.
func New(opts Options) *Notifier {
	opts.setDefaults()
	return &Notifier{opts: opts, queue: make(chan Alert, opts.Queue)}
}

// Enabled reports whether alerts go anywhere.
func (n *Notifier) Enabled() bool { return n != nil && n.opts.URL != "" }

// Start begins delivering; calling it again does nothing.
func (n *Notifier) Start(ctx context.Context) {
	if !n.Enabled() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started {
		return
	}
	n.started = true
	ctx, n.cancel = context.WithCancel(ctx)
	n.done = make(chan struct{})
	go n.run(ctx)
}

// Stop ends delivery (alerts still queued are dropped) and waits for it;
// calling it again, or before Start, does nothing.
func (n *Notifier) Stop() {
	if n == nil {
		return
	}
	n.mu.Lock()
	cancel, done := n.cancel, n.done
	n.cancel = nil
	n.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// maxReason is the most of a reason an alert carries, in runes: a
// reviewer's feedback or a fault can be long, and an alert is one line.
const maxReason = 500

// Notify queues a for delivery and returns at once; with the queue full
// it drops a and counts it. It puts Reason on one line, capped at
// maxReason, and fills in At, Dashboard and Text.
func (n *Notifier) Notify(a Alert) {
	if !n.Enabled() {
		return
	}
	a.Reason = strings.Join(strings.Fields(a.Reason), " ")
	if r := []rune(a.Reason); len(r) > maxReason {
		a.Reason = string(r[:maxReason-1]) + "…"
	}
	if a.At.IsZero() {
		a.At = n.opts.Now()
	}
	if a.Dashboard == "" {
		a.Dashboard = n.opts.Dashboard
	}
	if a.Text == "" {
		a.Text = text(a)
	}
	select {
	case n.queue <- a:
	default:
		n.dropped.Add(1)
		n.opts.Log.Warn("notify: queue full, alert dropped", zap.String("kind", a.Kind), zap.String("agent", a.Agent))
	}
}

// Counts are what Notify and delivery have done so far.
func (n *Notifier) Counts() (sent, failed, dropped uint64) {
	return n.sent.Load(), n.failed.Load(), n.dropped.Load()
}

func (n *Notifier) run(ctx context.Context) {
	defer close(n.done)
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-n.queue:
			n.deliver(ctx, a)
		}
	}
}

// deliver posts a until it is taken, it is older than MaxAge, or ctx ends.
func (n *Notifier) deliver(ctx context.Context, a Alert) {
	wait := n.opts.Backoff
	for attempt := 1; ; attempt++ {
		err := n.post(ctx, a)
		if err == nil {
			n.sent.Add(1)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if n.opts.Now().Sub(a.At) >= n.opts.MaxAge {
			n.failed.Add(1)
			n.opts.Log.Error("notify: alert not delivered, given up", zap.String("kind", a.Kind), zap.String("agent", a.Agent),
				zap.Int("attempts", attempt), zap.Error(err))
			return
		}
		n.opts.Log.Warn("notify: delivery failed, retrying", zap.String("kind", a.Kind), zap.Duration("in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, n.opts.MaxBackoff)
	}
}

func (n *Notifier) post(ctx context.Context, a Alert) error {
	body, header, err := Encode(a, n.opts.Format)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.opts.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := n.opts.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text holds the URL, and the URL may hold a secret
		}
		return fmt.Errorf("notify: post to %s: %w", redactURL(n.opts.URL), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notify: post: %s answered %s", redactURL(n.opts.URL), resp.Status)
	}
	return nil
}

// Encode is a's body and headers in format.
func Encode(a Alert, format string) ([]byte, map[string]string, error) {
	switch format {
	case FormatJSON, "":
		b, err := json.Marshal(a)
		return b, map[string]string{"Content-Type": "application/json"}, err
	case FormatSlack:
		b, err := json.Marshal(map[string]string{"text": a.Text})
		return b, map[string]string{"Content-Type": "application/json"}, err
	case FormatNtfy:
		h := map[string]string{"Content-Type": "text/plain; charset=utf-8", "Title": "swarmd: " + a.Kind, "Tags": "warning"}
		if a.Dashboard != "" {
			h["Click"] = a.Dashboard
		}
		return []byte(a.Text), h, nil
	}
	return nil, nil, errors.New("notify: unknown format " + strconv.Quote(format))
}

// text is the alert in one line: what, who, why, and what to run.
func text(a Alert) string {
	var b bytes.Buffer
	b.WriteString("swarmd: " + a.Kind)
	if a.Agent != "" {
		b.WriteString(" agent " + a.Agent)
	}
	if a.Task != 0 {
		b.WriteString(" task #" + strconv.FormatInt(a.Task, 10))
	}
	if a.Reason != "" {
		b.WriteString(": " + a.Reason)
	}
	if a.Fix != "" {
		b.WriteString(" (fix: " + a.Fix + ")")
	}
	if a.Dashboard != "" {
		b.WriteString(" " + a.Dashboard)
	}
	return b.String()
}

// redactURL keeps a webhook's secret path out of logs: scheme and host.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the webhook"
	}
	return u.Scheme + "://" + u.Host + "/…"
}
