package pgtest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// commitDone is the server's CommandComplete message of a COMMIT: 'C', its
// length (4 + len("COMMIT\x00")), the tag.
var commitDone = []byte("C\x00\x00\x00\x0bCOMMIT\x00")

// Proxy forwards TCP connections to a Server's Unix socket, and can cut a
// connection at the worst moment for a client: after the server committed
// a transaction, before the client hears that it did (CutNextCommit). The
// client then cannot tell whether its COMMIT took.
type Proxy struct {
	s  *Server
	ln net.Listener

	armed atomic.Bool // cut the next connection whose COMMIT completes
	// downAfterCut: the cut also sets down (CutNextCommitAfterAndGoDown).
	downAfterCut atomic.Bool
	after        atomic.Value // string: only one that has sent this first
	cuts         atomic.Int64 // connections cut so far
	down         atomic.Bool  // refuse new connections
	cancels      atomic.Int64 // cancel requests refused while down
	refused      atomic.Int64 // connections refused while down

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on a loopback port and forwards to s. Close it.
func (s *Server) NewProxy() (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgtest: proxy: %w", err)
	}
	p := &Proxy{s: s, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL is a connection URL for database db through the proxy.
func (p *Proxy) URL(db string) string {
	return "postgres://" + Superuser + "@" + p.ln.Addr().String() + "/" + url.PathEscape(db) + "?sslmode=disable"
}

// CutNextCommit arms the proxy: the next COMMIT the server completes, on
// any connection, is committed but its answer never reaches the client,
// whose connection is closed instead.
func (p *Proxy) CutNextCommit() { p.CutNextCommitAfter("") }

// CutNextCommitAfter is CutNextCommit for the first connection that has
// sent text (a statement's, say) before its COMMIT completes.
func (p *Proxy) CutNextCommitAfter(text string) {
	p.after.Store(text)
	p.armed.Store(true)
}

// CutNextCommitAfterAndGoDown is CutNextCommitAfter, and the proxy
// refuses every connection from the cut on (SetDown), as a network that
// fails right after the server committed would: every retry of the
// client fails until SetDown(false).
func (p *Proxy) CutNextCommitAfterAndGoDown(text string) {
	p.downAfterCut.Store(true)
	p.CutNextCommitAfter(text)
}

// CutAll closes every connection open now, on both sides, as a network
// that fails would: a server process busy meanwhile (waiting for a lock)
// goes on with what it has received, and only notices when it answers.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// SetDown makes the proxy refuse new connections (down), as a network
// that fails would, or take them again.
func (p *Proxy) SetDown(down bool) { p.down.Store(down) }

// Refused is how many connections were refused while down.
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// Cancels is how many cancel requests were refused while down: pgx sends
// one for the statement running on a connection it lost.
func (p *Proxy) Cancels() int64 { return p.cancels.Load() }

// cancelCode is the protocol's CancelRequest code, after its length.
var cancelCode = []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e}

// refuse closes a connection made while down, counting cancel requests.
func (p *Proxy) refuse(c net.Conn) {
	defer c.Close()
	p.refused.Add(1)
	head := make([]byte, len(cancelCode))
	if err := c.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		return
	}
	if _, err := io.ReadFull(c, head); err == nil && bytes.Equal(head, cancelCode) {
		p.cancels.Add(1)
	}
}

// Cuts is how many connections were cut after their COMMIT.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil // a connection accepted meanwhile is closed at once
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			p.refuse(client)
			continue
		}
		server, err := net.Dial("unix", filepath.Join(p.s.dir, ".s.PGSQL.5432"))
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			client.Close()
			server.Close()
			continue
		}
		closeBoth := sync.OnceFunc(func() {
			client.Close()
			server.Close()
			p.mu.Lock()
			if p.conns != nil {
				delete(p.conns, client)
				delete(p.conns, server)
			}
			p.mu.Unlock()
		})
		var sent atomic.Bool // the client sent the text CutNextCommitAfter waits for
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer closeBoth()
			p.clientToServer(client, server, &sent)
		}()
		go func() {
			defer p.wg.Done()
			defer closeBoth()
			p.serverToClient(server, client, &sent)
		}()
	}
}

// clientToServer copies the client's messages to the server, noting when
// the client sent the text CutNextCommitAfter names. (Text split across two
// reads is missed; a client writes its messages whole.)
func (p *Proxy) clientToServer(client, server net.Conn, sent *atomic.Bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if text, _ := p.after.Load().(string); p.armed.Load() && bytes.Contains(buf[:n], []byte(text)) {
				sent.Store(true)
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// serverToClient copies the server's messages to the client until the
// connection ends or a completed COMMIT is to be cut. (A tag split across
// two reads is missed; the server writes its answers whole.)
func (p *Proxy) serverToClient(server, client net.Conn, sent *atomic.Bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if bytes.Contains(buf[:n], commitDone) && sent.Load() && p.armed.CompareAndSwap(true, false) {
				if p.downAfterCut.Load() {
					p.down.Store(true) // before the client can notice, let alone reconnect
				}
				p.cuts.Add(1)
				return // the commit is done on the server; its answer is lost
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
