package control

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wedged listens on a socket and takes connections but never answers: a
// daemon stuck before it could serve.
func wedged(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "swarmd.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns := make(chan net.Conn, 16)
	go func() {
		defer close(conns)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c // held open, never read or answered
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range conns {
			c.Close()
		}
	})
	return path
}

// A daemon that takes the connection and never answers is an error within
// the client's timeout, for a call and for a stream of events alike.
func TestClientTimesOutOnAWedgedDaemon(t *testing.T) {
	c := NewClient(wedged(t))
	c.Timeout = 200 * time.Millisecond
	ctx := context.Background()
	start := time.Now()
	_, err := c.Agents(ctx)
	if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "within 200ms") {
		t.Fatalf("Agents = %v, want ErrNoAnswer naming the timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	err = c.Events(ctx, "", 0, true, func(Event) error { return nil })
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("Events = %v, want ErrNoAnswer", err)
	}
	if NewClient("x").timeout() != DefaultTimeout {
		t.Errorf("zero Timeout is not DefaultTimeout")
	}
}

// The timeout bounds the wait for an answer to begin, not a stream: events
// followed for longer than it still arrive.
func TestEventsStreamOutlivesTheTimeout(t *testing.T) {
	api, c, _ := serve(t)
	c.Timeout = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Event, 10)
	errc := make(chan error, 1)
	go func() {
		errc <- c.Events(ctx, "", 0, true, func(e Event) error { got <- e; return nil })
	}()
	time.Sleep(4 * c.Timeout) // the stream is open past the timeout before anything happens
	api.add(Event{Agent: "alice", Event: "PromptReady"})
	select {
	case e := <-got:
		if e.Event != "PromptReady" {
			t.Fatalf("event %+v", e)
		}
	case err := <-errc:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Events after cancel = %v", err)
	}
}
