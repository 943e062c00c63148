package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// attach makes a held socket on a served fakeAPI, its holder named by
// holder for every connection.
func attach(t *testing.T, holder func() string) (*Server, *Held, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Listen(filepath.Join(dir, "swarmd.sock"), &fakeAPI{paused: map[string]PauseRequest{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	path := filepath.Join(dir, "held.sock")
	h, err := s.Attach(path, func(int) (string, bool) { return holder(), true })
	if err != nil {
		t.Fatal(err)
	}
	return s, h, path
}

// request sends one request on c and reads its answer's status line.
func request(c net.Conn, r *bufio.Reader, method, path string) (string, error) {
	if _, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", method, path); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return resp.Status, nil
}

// A session's socket serves what its commands use, and not the dashboards'
// read model (every agent's logs), the event log or the budgets, which the
// operator's socket serves.
func TestHeldSocketServesASessionsRoutesOnly(t *testing.T) {
	_, _, path := attach(t, func() string { return "alice-1-000000000000" })
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/v1/agents", "200 OK"},
		{"GET", "/v1/agents/alice", "200 OK"},
		{"POST", "/v1/agents/bob/stop", "202 Accepted"}, // the API checks the caller's authority
		{"GET", "/v1/view/log/bob?raw=1&seq=1", "404 Not Found"},
		{"GET", "/v1/view/snapshot", "404 Not Found"},
		{"POST", "/v1/view/mail", "404 Not Found"},
		{"GET", "/v1/events", "404 Not Found"},
		{"GET", "/v1/budget", "404 Not Found"},
	} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := request(c, bufio.NewReader(c), tc.method, tc.path)
		c.Close()
		if err != nil || got != tc.want {
			t.Errorf("%s %s: %q, %v; want %q", tc.method, tc.path, got, err, tc.want)
		}
	}
	c := NewClient(filepath.Join(filepath.Dir(path), "swarmd.sock"))
	if err := c.Events(context.Background(), "", 0, false, func(Event) error { return nil }); err != nil {
		t.Errorf("the operator's socket does not serve the events: %v", err)
	}
}

// Drop closes the connections given to a holder whose session has ended:
// nothing more is served on them, a request pipelined behind one in
// progress included. Another holder's connection is not touched.
func TestHeldDropEndsTheHoldersConnections(t *testing.T) {
	var next atomic.Value
	next.Store("alice-1-000000000000")
	_, h, path := attach(t, func() string { return next.Load().(string) })
	ended, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ended.Close()
	er := bufio.NewReader(ended)
	if got, err := request(ended, er, "GET", "/v1/agents"); err != nil || got != "200 OK" {
		t.Fatalf("first request: %q, %v", got, err)
	}
	next.Store("alice-2-000000000000")
	live, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	lr := bufio.NewReader(live)
	if got, err := request(live, lr, "GET", "/v1/agents"); err != nil || got != "200 OK" {
		t.Fatalf("the live session's request: %q, %v", got, err)
	}

	h.Drop("alice-1-000000000000")
	if got, err := request(ended, er, "GET", "/v1/agents"); err == nil {
		t.Errorf("a request of the ended session was answered: %q", got)
	}
	if got, err := request(live, lr, "GET", "/v1/agents"); err != nil || got != "200 OK" {
		t.Errorf("the live session's connection after the other's drop: %q, %v", got, err)
	}
}

// A held socket has at most maxHeldConns connections open at once: the
// others wait in the kernel's backlog, holding none of the daemon's
// descriptors, and are served once a place is free.
func TestHeldSocketBoundsItsConnections(t *testing.T) {
	var accepted atomic.Int32
	_, h, path := attach(t, func() string { accepted.Add(1); return "alice-1-000000000000" })
	const n = maxHeldConns + 4
	conns := make([]net.Conn, n)
	answered := make(chan int, n)
	for i := range conns {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
		go func() {
			if got, err := request(c, bufio.NewReader(c), "GET", "/v1/agents"); err == nil && got == "200 OK" {
				answered <- i
			}
		}()
	}
	var first []int
	for range maxHeldConns {
		select {
		case i := <-answered:
			first = append(first, i)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d connections answered", len(first), maxHeldConns)
		}
	}
	h.mu.Lock()
	open := len(h.conns)
	h.mu.Unlock()
	if open != maxHeldConns || int(accepted.Load()) != maxHeldConns {
		t.Fatalf("%d connections open, %d accepted, with %d dialed; want %d", open, accepted.Load(), n, maxHeldConns)
	}
	for _, i := range first[:4] {
		conns[i].Close()
	}
	for range 4 {
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
			t.Fatal("a connection waiting in the backlog was not served once places were free")
		}
	}
}

// A held socket reads one session-cli body at a time: a request whose
// body stalls keeps the next from being read (and buffered) until it ends,
// so a session holds one body in the daemon's memory, not one a
// connection. The operator's socket has no such bound.
func TestHeldSocketReadsOneBodyAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &cliAPI{fakeAPI: &fakeAPI{}}
		h := routesHeld(api)
		stalled, stall := io.Pipe()
		first := httptest.NewRequest("POST", "/v1/session-cli", stalled)
		go h.ServeHTTP(httptest.NewRecorder(), first)
		if _, err := stall.Write([]byte(`{"args":["mail",`)); err != nil {
			t.Fatal(err)
		}
		second := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(second, httptest.NewRequest("POST", "/v1/session-cli", strings.NewReader(`{"args":["mail","read"]}`)))
		}()
		synctest.Wait()
		api.mu.Lock()
		n := len(api.got)
		api.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d commands run while a body stalled, want none", n)
		}
		stall.CloseWithError(errors.New("the session went away"))
		<-done
		if second.Code != 200 || len(api.got) != 1 || api.got[0].Args[1] != "read" {
			t.Fatalf("the second request once the first ended: %d, %+v", second.Code, api.got)
		}
	})
}
