package harness

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for measuring the round trip
)

// DelayProxy stands between the racing processes and the PostgreSQL server
// as a network would: every chunk either side sends is delivered delay
// later, in order, so each round trip takes 2 × delay more. The server
// listens on a Unix socket only; the proxy takes TCP on 127.0.0.1.
type DelayProxy struct {
	ln     net.Listener // the proxy's TCP address
	socket string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

// StartDelayProxy proxies to the server whose socket directory the pgtest
// URL u names (its host parameter).
func StartDelayProxy(u string, delay time.Duration) (*DelayProxy, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return nil, fmt.Errorf("delay proxy: parse %s: %w", u, err)
	}
	dir := pu.Query().Get("host")
	if dir == "" {
		return nil, fmt.Errorf("delay proxy: %s names no socket directory", u)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("delay proxy: listen: %w", err)
	}
	p := &DelayProxy{ln: ln, socket: filepath.Join(dir, ".s.PGSQL.5432"), delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Via is u (a pgtest URL) reached through the proxy.
func (p *DelayProxy) Via(u string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("delay proxy: parse %s: %w", u, err)
	}
	q := pu.Query()
	q.Del("host")
	pu.RawQuery = q.Encode()
	pu.Host = p.ln.Addr().String()
	return pu.String(), nil
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("unix", p.socket)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// chunk is what one read took, and when it may be written on.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies from src to dst, each chunk delay after it was read. The
// reader never waits for the writer (a window of 1,024 chunks), so what
// the delay holds back is only the delay.
func (p *DelayProxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				for range q { // drain until the reader ends
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{b: slices.Clone(buf[:n]), at: time.Now().Add(p.delay)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	// One side ended: end the other's writes too, so its pipe ends.
	if tc, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// Close stops the proxy and ends every connection through it.
func (p *DelayProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// RoundTrip is the median of n `SELECT 1` round trips to target: what the
// proxy's delay makes of one.
func RoundTrip(ctx context.Context, target string, n int) (time.Duration, error) {
	db, err := sql.Open("pgx", target)
	if err != nil {
		return 0, fmt.Errorf("round trip: %w", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("round trip: connect: %w", err)
	}
	defer conn.Close()
	ds := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		var one int
		if err := conn.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			return 0, fmt.Errorf("round trip: %w", err)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

// Delayed starts a DelayProxy in front of the pgtest-style server that
// serverURL (any of its databases) names, and returns Via, a line saying
// the round trip measured through it against the socket's, and its Close.
func Delayed(ctx context.Context, serverURL string, delay time.Duration) (via func(string) (string, error), report string, stop func() error, err error) {
	p, err := StartDelayProxy(serverURL, delay)
	if err != nil {
		return nil, "", nil, err
	}
	through, err := p.Via(serverURL)
	if err == nil {
		var direct, delayed time.Duration
		if direct, err = RoundTrip(ctx, serverURL, 200); err == nil {
			if delayed, err = RoundTrip(ctx, through, 200); err == nil {
				report = fmt.Sprintf("round trip to PostgreSQL (SELECT 1, median of 200): %v through the proxy (-delay %v each way), %v on the socket",
					delayed.Round(time.Microsecond), delay, direct.Round(time.Microsecond))
			}
		}
	}
	if err != nil {
		_ = p.Close()
		return nil, "", nil, err
	}
	return p.Via, report, p.Close, nil
}
