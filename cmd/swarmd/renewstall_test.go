package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// renewal is the text of a lease renewal (store.RenewLeases) as a
// connection prepares it: its statement's name, then the query.
var renewal = regexp.MustCompile(`(stmtcache_[0-9a-f]+)\x00UPDATE agent_leases SET expires_at`)

// stallProxy passes a daemon's connections to the test's server (its
// Unix socket) and, once armed, stalls every connection that sends a
// lease renewal: from then on nothing goes either way on it, as on a
// connection whose peer vanished without a reset (a half-open TCP
// connection). The daemon's other connections work on.
type stallProxy struct {
	t        *testing.T
	dir, dst string
	ln       net.Listener

	mu     sync.Mutex
	armed  bool
	once   bool     // disarm after the first stall
	names  [][]byte // the renewal's prepared statements' names
	conns  []net.Conn
	stalls int
	wg     sync.WaitGroup
}

func startStallProxy(t *testing.T, srv *pgtest.Server) *stallProxy {
	dir, err := os.MkdirTemp("", "stall")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{t: t, dir: dir, dst: filepath.Join(srv.SocketDir(), ".s.PGSQL.5432"), ln: ln}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// url is db's URL through the proxy.
func (p *stallProxy) url(db string) string {
	return "postgres://" + pgtest.Superuser + "@/" + db + "?host=" + p.dir + "&sslmode=disable"
}

func (p *stallProxy) arm() {
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
}

// armOnce stalls the next connection that renews, and no other.
func (p *stallProxy) armOnce() {
	p.mu.Lock()
	p.armed, p.once = true, true
	p.mu.Unlock()
}

func (p *stallProxy) stalled() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalls
}

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("unix", p.dst)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		stall := make(chan struct{})
		var once sync.Once
		p.wg.Add(2)
		go func() { // client to server, watched
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			var tail []byte
			for {
				n, err := c.Read(buf)
				if n > 0 {
					seen := append(tail, buf[:n]...)
					if p.renews(seen) {
						once.Do(func() { close(stall) })
						io.Copy(io.Discard, c) // until the proxy closes
						return
					}
					tail = append([]byte(nil), seen[max(0, len(seen)-256):]...)
					if _, err := s.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					s.Close()
					return
				}
			}
		}()
		go func() { // server to client, until the connection stalls
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				select {
				case <-stall:
					io.Copy(io.Discard, s)
					return
				default:
				}
				if n > 0 {
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					c.Close()
					return
				}
			}
		}()
	}
}

// renews reports whether b carries a renewal that the armed proxy stalls,
// noting the renewal's statement names as it sees them.
func (p *stallProxy) renews(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := renewal.FindSubmatch(b); m != nil {
		p.names = append(p.names, append([]byte(nil), m[1]...))
	}
	if !p.armed {
		return false
	}
	for _, n := range p.names {
		if bytes.Contains(b, n) {
			p.stalls++
			p.armed = !p.once
			return true
		}
	}
	return false
}

func (p *stallProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	os.RemoveAll(p.dir)
}

// TestStalledRenewalStartsNoSession: daemon A's lease renewal hangs on its
// connection (the proxy stalls it) while its other connections work. Its
// lease guard kills x's session before the lease runs out; A must not
// start another session of x until it renews, for nothing would kill that
// one: once the lease expired, daemon B takes x, and two sessions of x
// would run at once.
func TestStalledRenewalStartsNoSession(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "stall")
	proxy := startStallProxy(t, srv)
	out := t.TempDir()
	config := func(who, url string) string {
		return fenceConfig(t, fenceCfg{Store: url, Lease: "2s", Out: out, Who: who, Script: sleeperScript,
			AgentExtra: "min_session_interval: 50ms"})
	}
	started := func(who string) int {
		b, _ := os.ReadFile(filepath.Join(out, who))
		return strings.Count(string(b), "started")
	}
	cfgA, cfgB := config("a", proxy.url(dbName)), config("b", srv.URL(dbName))
	running := func(cfg string) bool { return len(treeProcesses(filepath.Join(filepath.Dir(cfg), ".swarm"))) > 0 }
	a := startDaemon(t, cfgA)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon A's log:\n%s", a.log())
		}
	})
	waitUntil(t, "x's session on A", func() bool { return started("a") == 1 && running(cfgA) })

	proxy.arm()
	waitUntil(t, "A's renewal stalled", func() bool { return proxy.stalled() > 0 })
	waitUntil(t, "A's session killed by its lease guard", func() bool { return !running(cfgA) })
	// A's runner settles the killed session and builds the next prompt:
	// its start must wait for a renewal, refused like any write for x.
	m := a.waitLine("A's start of x refused, or x's next session on A", func(m map[string]any) bool {
		return strings.Contains(fmt.Sprint(m["error"]), "lease") || transitionTo("x", "Running")(m) && m["session"] != nil &&
			!strings.HasPrefix(fmt.Sprint(m["session"]), "x-1-")
	})
	if m["msg"] == "transition" {
		t.Errorf("A started session %s of x after its lease guard killed the first, while its renewal hung", m["session"])
	}

	// B takes x once the lease, never renewed since, has expired.
	db, err := store.Open(context.Background(), srv.URL(dbName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ls, err := db.Leases(context.Background())
	if err != nil || len(ls) != 1 {
		t.Fatalf("leases: %+v, %v", ls, err)
	}
	time.Sleep(time.Until(ls[0].Expires) + 100*time.Millisecond)
	b := startDaemon(t, cfgB)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon B's log:\n%s", b.log())
		}
	})
	waitUntil(t, "x's session on B", func() bool { return started("b") == 1 && running(cfgB) })
	if running(cfgA) {
		t.Errorf("x runs on A and on B at once: %v and %v",
			treeProcesses(filepath.Join(filepath.Dir(cfgA), ".swarm")), treeProcesses(filepath.Join(filepath.Dir(cfgB), ".swarm")))
	}
	waitUntil(t, "x's agent row B's", func() bool {
		ags, err := db.Agents(context.Background())
		return err == nil && ags["x"].State == "Running" && ags["x"].Seq == 2
	})
	// A's write of what became of x's session is refused until a renewal:
	// one signal stops A all the same (an operator's systemctl stop), which
	// leaves that session to the daemon that holds x.
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(10 * time.Second)
	// A's stop moved its runner of x to Stopped: x's row stays B's.
	ags, err := db.Agents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := ags["x"]; got.State != "Running" || got.Seq != 2 {
		t.Errorf("x's agent row says %s (seq %d, stop %q) after A stopped, want B's: Running, seq 2", got.State, got.Seq, got.StopReason)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.wait(30 * time.Second)
}

// swarmWriterLock is the swarm's writer lock (store's writerLock): every
// write transaction of every daemon takes it.
const swarmWriterLock = 0x5377_6172_6d64

// TestRenewalDoesNotWaitForTheWritersLock: another daemon is stopped
// (SIGSTOP) inside a write transaction, holding the swarm's writer lock
// until the server ends its transaction (idle_in_transaction, 5 s); here
// a client plays that transaction. Daemon A's renewals need no writer's
// lock and must go on meanwhile: its lease guard must not kill its
// agent's session, live under a lease that never ran out. (A's reap of
// expired leases, which takes the lock, shared the renewals' loop: a
// renewal waited for it.)
func TestRenewalDoesNotWaitForTheWritersLock(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "writerslock")
	url := srv.URL(dbName)
	out := t.TempDir()
	cfg := fenceConfig(t, fenceCfg{Store: url, Lease: "3s", Out: out, Who: "a", Script: sleeperScript})
	running := func() bool { return len(treeProcesses(filepath.Join(filepath.Dir(cfg), ".swarm"))) > 0 }
	a := startDaemon(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon A's log:\n%s", a.log())
		}
	})
	waitUntil(t, "x's session on A", running)

	// The stopped daemon's transaction, ended by the server as its would be.
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{`SET idle_in_transaction_session_timeout = '5s'`, `BEGIN`,
		fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d)`, swarmWriterLock)} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	held := time.Now()
	// Until the server ended it, and a renewal after (a third of 3 s).
	for time.Since(held) < 7*time.Second {
		if !running() {
			t.Fatalf("A's session of x was killed %s after another daemon's transaction took the writers' lock", time.Since(held).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if conn.PingContext(ctx) == nil {
		t.Error("the server did not end the idle transaction: it held the writers' lock all along")
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(30 * time.Second)
}

// TestStalledRenewalIsRetried: one of daemon A's connections stalls in
// a lease renewal, as a half-open connection does, which no error ends
// for many minutes (TCP keepalive, if any). A gives up on that renewal in
// time and renews on another connection: its lease is renewed, not left
// to expire with every agent refused.
func TestStalledRenewalIsRetried(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "stallonce")
	proxy := startStallProxy(t, srv)
	out := t.TempDir()
	cfg := fenceConfig(t, fenceCfg{Store: proxy.url(dbName), Lease: "3s", Out: out, Who: "a", Script: sleeperScript})
	a := startDaemon(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon A's log:\n%s", a.log())
		}
	})
	running := func() bool { return len(treeProcesses(filepath.Join(filepath.Dir(cfg), ".swarm"))) > 0 }
	waitUntil(t, "x's session on A", running)
	db, err := store.Open(context.Background(), srv.URL(dbName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	expires := func() time.Time {
		ls, err := db.Leases(context.Background())
		if err != nil || len(ls) != 1 {
			t.Fatalf("leases: %+v, %v", ls, err)
		}
		return ls[0].Expires
	}
	proxy.armOnce()
	waitUntil(t, "a renewal stalled", func() bool { return proxy.stalled() == 1 })
	stalledAt := time.Now()
	waitUntil(t, "a renewal after the stalled one", func() bool { return expires().After(stalledAt.Add(3 * time.Second)) })
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(30 * time.Second)
}
