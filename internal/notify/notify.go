// Package notify tells the operator of what needs a person: one POST to a
// webhook per event (an agent stopped for good, a task failed past its
// limits, a budget exhausted, the daemon unhealthy), in swarmd's JSON or in
// the shape Slack's or ntfy's incoming endpoints take. Delivery never holds
// the caller up: alerts queue (bounded) and one goroutine sends them in
// order, retrying with backoff for a while when the receiver is down.
//
// Stop drains: what is queued when it is called is still sent, for up to
// Options.Drain. An alert that is not sent, whatever the reason (the queue
// full, MaxAge passed, the drain's deadline, a Notify after Stop), is
// logged with its whole text: the operator finds it in the log instead.
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
	TaskFailed      = "task_failed"      // FAILED past its limits (merge rejections, review iterations, retries)
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
	// MaxBackoff; an alert not delivered within MaxAge is given up (logged).
	Backoff, MaxBackoff, MaxAge time.Duration
	// Drain bounds Stop: it sends what is queued for at most this long, a
	// failed POST retried only while its backoff ends within it, then
	// cancels the POST under way and logs what is left.
	Drain time.Duration
	Queue int // alerts waiting at most; more are dropped (logged, counted)
	Now   func() time.Time
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
	if o.Drain <= 0 {
		o.Drain = 5 * time.Second
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

	// mu is held by Notify across its send and by Stop to set stopped:
	// once stopped, nothing enters the queue, so what Stop finds left in
	// it is all there is to log.
	mu       sync.Mutex
	started  bool
	stopped  bool
	cancel   context.CancelFunc // ends delivery: at the drain's deadline
	done     chan struct{}      // closed when run returns
	drain    chan struct{}      // closed by Stop: send what is queued, then end
	deadline time.Time          // the drain's end, set before drain is closed

	sent, failed, dropped atomic.Uint64
}

// New returns a Notifier; Start begins delivery.
func New(opts Options) *Notifier {
	opts.setDefaults()
	return &Notifier{opts: opts, queue: make(chan Alert, opts.Queue), drain: make(chan struct{})}
}

// Enabled reports whether alerts go anywhere.
func (n *Notifier) Enabled() bool { return n != nil && n.opts.URL != "" }

// Start begins delivering; calling it again, or after Stop, does nothing.
// Cancelling ctx ends delivery as the drain's deadline does; Stop still
// logs what is left.
func (n *Notifier) Start(ctx context.Context) {
	if !n.Enabled() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started || n.stopped {
		return
	}
	n.started = true
	ctx, n.cancel = context.WithCancel(ctx)
	n.done = make(chan struct{})
	go n.run(ctx)
}

// Stop ends delivery and returns once it has ended: the alerts queued (and
// the one being sent) are sent first, for up to Options.Drain, and every
// one not sent by then is logged as not delivered and counted as failed;
// so is what is queued when Stop comes before Start. Stop never waits much
// past the deadline, however the receiver behaves. Calling it again does
// nothing.
func (n *Notifier) Stop() {
	if !n.Enabled() {
		return
	}
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return
	}
	n.stopped = true
	n.deadline = time.Now().Add(n.opts.Drain)
	cancel, done := n.cancel, n.done
	n.mu.Unlock()
	if cancel != nil {
		close(n.drain)
		t := time.AfterFunc(time.Until(n.deadline), cancel)
		<-done
		t.Stop()
		cancel()
	}
	// What the deadline (or Start's ctx) cut off, all of it when there
	// was no Start: stopped is set, so no Notify adds to it now.
	for {
		select {
		case a := <-n.queue:
			n.failed.Add(1)
			n.notDelivered(a, zap.Int("attempts", 0))
		default:
			return
		}
	}
}

// maxReason is the most of a reason an alert carries, in runes: a
// reviewer's feedback or a fault can be long, and an alert is one line.
const maxReason = 500

// Notify queues a for delivery and returns at once. With the queue full,
// or once Stop has begun, it logs a as not sent and counts it as dropped.
// It puts Reason on one line, capped at maxReason, and fills in At,
// Dashboard and Text.
func (n *Notifier) Notify(a Alert) {
	if !n.Enabled() {
		return
	}
	a = complete(a, n.opts.Now, n.opts.Dashboard)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		n.dropped.Add(1)
		n.notDelivered(a, zap.Int("attempts", 0))
		return
	}
	select {
	case n.queue <- a:
	default:
		n.dropped.Add(1)
		n.opts.Log.Warn("notify: queue full, alert dropped", fields(a)...)
	}
}

// complete puts a's Reason on one line, capped at maxReason, and fills in
// At, Dashboard and Text where they are empty.
func complete(a Alert, now func() time.Time, dashboard string) Alert {
	a.Reason = strings.Join(strings.Fields(a.Reason), " ")
	if r := []rune(a.Reason); len(r) > maxReason {
		a.Reason = string(r[:maxReason-1]) + "…"
	}
	if a.At.IsZero() {
		a.At = now()
	}
	if a.Dashboard == "" {
		a.Dashboard = dashboard
	}
	if a.Text == "" {
		a.Text = text(a)
	}
	return a
}

// Counts are what Notify and delivery have done so far: sent, delivered;
// failed, queued but never delivered (given up at MaxAge, or left when
// Stop's drain ended); dropped, never queued (the queue full, or Notify
// once Stop had begun). Each failed or dropped alert is logged.
func (n *Notifier) Counts() (sent, failed, dropped uint64) {
	return n.sent.Load(), n.failed.Load(), n.dropped.Load()
}

// notDeliveredMsg is the line of an alert the stop leaves unsent.
const notDeliveredMsg = "notify: alert not delivered before the stop"

// LogNotDelivered logs a, which will never be sent, as Stop logs what it
// could not send: for a caller that held a for a Notifier it never
// started.
func LogNotDelivered(log *zap.Logger, a Alert) {
	log.Error(notDeliveredMsg, fields(complete(a, time.Now, ""))...)
}

func (n *Notifier) notDelivered(a Alert, more ...zap.Field) {
	n.opts.Log.Error(notDeliveredMsg, append(fields(a), more...)...)
}

// fields name a in a log line, its whole text included: for an alert not
// sent, the log is where the operator reads it.
func fields(a Alert) []zap.Field {
	f := []zap.Field{zap.String("kind", a.Kind), zap.String("agent", a.Agent)}
	if a.Task != 0 {
		f = append(f, zap.Int64("task", a.Task))
	}
	return append(f, zap.String("text", a.Text))
}

func (n *Notifier) run(ctx context.Context) {
	defer close(n.done)
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-n.queue:
			n.deliver(ctx, a)
		case <-n.drain:
			// Stop: what is queued now is all that will be (Notify no
			// longer queues); send it while ctx lasts, and leave the rest
			// to Stop.
			for ctx.Err() == nil {
				select {
				case a := <-n.queue:
					n.deliver(ctx, a)
				default:
					return
				}
			}
			return
		}
	}
}

// deliver posts a until it is taken, it is older than MaxAge, or delivery
// ends: ctx ends (Stop's deadline), or, in Stop's drain, the next backoff
// would end past the deadline. What it does not deliver it logs and counts
// as failed.
func (n *Notifier) deliver(ctx context.Context, a Alert) {
	wait := n.opts.Backoff
	drain := n.drain // closed in a backoff: retry at once, the last chance
	if n.draining() {
		drain = nil
	}
	for attempt := 1; ; attempt++ {
		err := n.post(ctx, a)
		if err == nil {
			n.sent.Add(1)
			return
		}
		if ctx.Err() != nil {
			n.failed.Add(1)
			n.notDelivered(a, zap.Int("attempts", attempt), zap.Error(err))
			return
		}
		if n.opts.Now().Sub(a.At) >= n.opts.MaxAge {
			n.failed.Add(1)
			n.opts.Log.Error("notify: alert not delivered, given up", append(fields(a), zap.Int("attempts", attempt), zap.Error(err))...)
			return
		}
		if n.draining() && time.Until(n.deadline) < wait {
			n.failed.Add(1)
			n.notDelivered(a, zap.Int("attempts", attempt), zap.Error(err))
			return
		}
		n.opts.Log.Warn("notify: delivery failed, retrying", zap.String("kind", a.Kind), zap.Duration("in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			n.failed.Add(1)
			n.notDelivered(a, zap.Int("attempts", attempt), zap.Error(err))
			return
		case <-drain:
			// Stop began: a backoff begun before it may end past the
			// deadline; try now rather than give a up untried.
			t.Stop()
			drain = nil
			continue
		case <-t.C:
		}
		wait = min(2*wait, n.opts.MaxBackoff)
	}
}

// draining reports whether Stop has begun; n.deadline is set once it has.
func (n *Notifier) draining() bool {
	select {
	case <-n.drain:
		return true
	default:
		return false
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
