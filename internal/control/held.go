package control

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// A socket made with Attach is a sandboxed session's only way to its
// daemon, and the session may be hostile. So it is served apart from the
// operator's socket:
//
//   - with fewer routes (routesHeld): what a session's commands use (its
//     mail and task commands, the agents' states and controls, each of
//     which checks the caller's authority), not the dashboards' read model
//     (every agent's session logs, which quote their mail, the board, the
//     mail and task forms), the event log or the budgets;
//   - with timeouts, at most maxHeldConns connections at once, and one
//     request body read at a time: a session that opened thousands, or
//     stalled a request body of tens of megabytes on each, would take the
//     daemon's descriptors and memory from every agent;
//   - and a connection is closed once the session it was given to has
//     ended (Held.Drop): a request pipelined behind a slow one, on a
//     connection the session kept open by passing it to the daemon itself,
//     must not be served for a session that is gone.

// Limits of a held socket's connections.
const (
	maxHeldConns       = 8
	heldReadTimeout    = time.Minute // the request, its body included
	heldIdleTimeout    = 30 * time.Second
	heldHeaderTimeout  = 10 * time.Second
	heldMaxHeaderBytes = 64 << 10
)

// Held is a socket Attach made for the holders its holder func names.
type Held struct {
	s      *Server
	srv    *http.Server
	done   chan struct{} // closed by Close
	served chan struct{} // closed once Serve has returned
	once   sync.Once

	mu    sync.Mutex
	conns map[*heldConn]struct{} // open, each with its holder
}

// heldConn is a connection accepted on a held socket, given to holder.
type heldConn struct {
	*net.UnixConn
	holder  string
	h       *Held
	release func() // frees its place among maxHeldConns
	once    sync.Once
}

func (c *heldConn) Close() error {
	err := c.UnixConn.Close()
	c.once.Do(func() {
		c.h.mu.Lock()
		delete(c.h.conns, c)
		c.h.mu.Unlock()
		c.release()
	})
	return err
}

// heldListener accepts at most maxHeldConns connections at once, tags
// each with the holder its holder func names for the connecting process,
// and drops one it names none for.
type heldListener struct {
	*net.UnixListener
	h      *Held
	holder func(peerPID int) (string, bool)
	places chan struct{}
}

func (l heldListener) Accept() (net.Conn, error) {
	for {
		// A place first: past maxHeldConns, connections wait in the
		// kernel's backlog, holding none of the daemon's descriptors.
		select {
		case l.places <- struct{}{}:
		case <-l.h.done:
			return nil, net.ErrClosed
		}
		c, err := l.AcceptUnix()
		if err != nil {
			<-l.places
			return nil, err
		}
		if h, ok := l.holder(peerPID(c)); ok {
			hc := &heldConn{UnixConn: c, holder: h, h: l.h, release: func() { <-l.places }}
			l.h.mu.Lock()
			l.h.conns[hc] = struct{}{}
			l.h.mu.Unlock()
			return hc, nil
		}
		c.Close()
		<-l.places
	}
}

// Attach serves the routes a session needs (routesHeld) on a new socket
// at path: each connection is given to the holder that holder names for
// the connecting process (by its pid, when it connects), and every request
// through it carries that holder (Holder); a connection holder names none
// for is closed at once. The socket is 0600. Close it with Held.Close, or
// with the server's Close.
func (s *Server) Attach(path string, holder func(peerPID int) (string, bool)) (*Held, error) {
	if holder == nil {
		return nil, errors.New("control: attach: no holder")
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control: attach %s: remove stale socket: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control: attach %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control: attach %s: chmod socket: %w", path, err)
	}
	// served is made before the Held is known to s: s.Close may close it
	// at once.
	h := &Held{s: s, done: make(chan struct{}), served: make(chan struct{}), conns: map[*heldConn]struct{}{}}
	h.srv = &http.Server{
		Handler:           routesHeld(s.api),
		ConnContext:       connContext,
		ReadHeaderTimeout: heldHeaderTimeout,
		ReadTimeout:       heldReadTimeout,
		IdleTimeout:       heldIdleTimeout,
		MaxHeaderBytes:    heldMaxHeaderBytes,
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil, fmt.Errorf("control: attach %s: %w", path, http.ErrServerClosed)
	}
	s.held[h] = struct{}{}
	s.mu.Unlock()
	go func() {
		defer close(h.served)
		// Serve returns when the held server is closed.
		_ = h.srv.Serve(heldListener{UnixListener: ln, h: h, holder: holder, places: make(chan struct{}, maxHeldConns)})
	}()
	return h, nil
}

// routesHeld is what a held socket serves. One request at a time reads
// its body: a session-cli body is in memory while it is read, and a
// session could stall one on each of its connections.
func routesHeld(api API) http.Handler {
	mux := http.NewServeMux()
	routesAgents(mux, api)
	if sc, ok := api.(SessionCLI); ok {
		routesSessionCLI(mux, sc, make(chan struct{}, 1))
	}
	return mux
}

// Drop closes every connection given to holder: its session has ended.
// A request of it in progress sees its context cancelled.
func (h *Held) Drop(holder string) {
	h.mu.Lock()
	var drop []*heldConn
	for c := range h.conns {
		if c.holder == holder {
			drop = append(drop, c)
		}
	}
	h.mu.Unlock()
	for _, c := range drop {
		c.Close()
	}
}

// Close stops serving the socket, closes its connections and removes it.
// It is idempotent.
func (h *Held) Close() {
	h.once.Do(func() {
		h.s.mu.Lock()
		delete(h.s.held, h)
		h.s.mu.Unlock()
		close(h.done)
		_ = h.srv.Close()
		<-h.served
	})
}
