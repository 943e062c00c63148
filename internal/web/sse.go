package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/view"
)

// Stream pacing.
const (
	// retryMillis is how soon a browser reconnects a dropped stream (it
	// then sends Last-Event-ID and misses nothing).
	retryMillis = 1000
	// keepAlive writes a comment on a quiet stream, so that proxies and
	// browsers do not take it for dead.
	keepAlive = 25 * time.Second
)

// eventStream writes Server-Sent Events. Writes come from the stream's
// goroutine and the keep-alive timer, hence the mutex.
type eventStream struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	rc   *http.ResponseController
	buf  bytes.Buffer
	err  error
	stop func()
}

func newEventStream(ctx context.Context, w http.ResponseWriter) *eventStream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	es := &eventStream{w: w, rc: http.NewResponseController(w)}
	es.write("retry: " + strconv.Itoa(retryMillis) + "\n\n")
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(keepAlive)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if es.write(": keep-alive\n\n") != nil {
					return
				}
			}
		}
	}()
	es.stop = func() { close(done) }
	return es
}

func (es *eventStream) close() { es.stop() }

// write sends raw stream text and flushes it.
func (es *eventStream) write(s string) error {
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.err != nil {
		return es.err
	}
	if _, err := es.w.Write([]byte(s)); err != nil {
		es.err = err
		return err
	}
	es.err = es.rc.Flush()
	return es.err
}

// send writes one event: its id (when not ""), its type, and data as JSON
// (a string is sent as its lines).
func (es *eventStream) send(id, event string, data any) error {
	es.mu.Lock()
	es.buf.Reset()
	if id != "" {
		es.buf.WriteString("id: " + id + "\n")
	}
	es.buf.WriteString("event: " + event + "\n")
	if text, ok := data.(string); ok {
		for _, line := range strings.Split(text, "\n") {
			// A CR would end the line for the browser too.
			es.buf.WriteString("data: " + strings.ReplaceAll(line, "\r", "") + "\n")
		}
	} else {
		b, err := json.Marshal(data)
		if err != nil {
			es.mu.Unlock()
			return err
		}
		es.buf.WriteString("data: ")
		es.buf.Write(b)
		es.buf.WriteByte('\n')
	}
	es.buf.WriteByte('\n')
	s := es.buf.String()
	es.mu.Unlock()
	return es.write(s)
}

// update sends one Update of the read model: the event type is its kind,
// the data what it carries; a lifecycle event carries its id, which a
// reconnecting browser sends back as Last-Event-ID.
func (es *eventStream) update(u view.Update) error {
	switch u.Kind {
	case view.KindSnapshot:
		return es.send("", u.Kind, u.Snapshot)
	case view.KindEvent:
		return es.send(strconv.FormatInt(u.Event.ID, 10), u.Kind, u.Event)
	case view.KindAgent:
		return es.send("", u.Kind, u.Agent)
	case view.KindRemoved:
		return es.send("", u.Kind, map[string]string{"name": u.Name})
	case view.KindTasks:
		return es.send("", u.Kind, u.Tasks)
	case view.KindMerge:
		return es.send("", u.Kind, u.Merge)
	case view.KindFault:
		return es.send("", u.Kind, map[string]string{"fault": *u.Fault})
	case view.KindInbox:
		return es.send("", u.Kind, u.Inbox)
	case view.KindDaemons:
		return es.send("", u.Kind, u.Daemons)
	}
	return nil
}

// logChunk sends a piece of a followed log: "session" events, and "text"
// events whose data is the text as written (lines joined by \n).
func (es *eventStream) logChunk(c view.LogChunk) error {
	if c.Text == "" {
		return es.send("", "session", map[string]uint32{"session": c.Session})
	}
	return es.send("", "text", c.Text)
}

func errField(err error) zap.Field { return zap.Error(err) }
