// Package pgtest starts a real PostgreSQL server for tests, from the
// server binaries of Debian's postgresql package: initdb and pg_ctl into a
// temporary directory, listening on a Unix socket in that directory only
// (no TCP port), torn down by Close with nothing left running.
//
// PostgreSQL refuses to run as root. When the tests run as root (CI does),
// the server runs as the package's "postgres" user through runuser, and the
// directory is given to that user.
//
// Tests that need a server call Require: it skips, loudly, where the
// binaries are missing, and fails instead when SWARMD_REQUIRE_POSTGRES=1,
// so that a green CI run has run them.
//
// initdb is most of a server's start, so it runs once per machine: a
// server's data directory is a copy of a template cluster kept in the temp
// directory, keyed by the binaries and the account (initdb again when the
// copy fails). A test that only needs a database, not a server of its own
// to stop or crash, calls Shared and NewDB: the test binary's tests share
// one server, started on first use and stopped by the func Share returned
// to TestMain.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RequireEnv names the variable that turns a missing server into a failure.
const RequireEnv = "SWARMD_REQUIRE_POSTGRES"

// Superuser is the role initdb creates; a test connects as it.
const Superuser = "swarmd"

// runAs is the account the server runs as when the tests run as root.
const runAs = "postgres"

// ErrNoServer: the PostgreSQL server binaries were not found.
var ErrNoServer = errors.New("pgtest: PostgreSQL server binaries (initdb, pg_ctl) not found; install Debian's postgresql package")

// Server is one running PostgreSQL server.
type Server struct {
	dir  string // holds data/, the socket and server.log
	bin  string // the directory of initdb, pg_ctl, psql
	sudo []string
	// durable: fsync and synchronous commit on, as in production. Off (the
	// default, for speed), a crash (Restart "immediate") loses the commits
	// of its last moments, which a test of crashes must not blame on swarmd.
	durable bool
	// stopped: Stop left the server down (Close has nothing to stop).
	stopped atomic.Bool
	// shared: the test binary's one server (Shared), which no test stops.
	shared bool
	dbs    atomic.Int64 // the databases NewDB made
}

// shared is the test binary's server for tests that need only a database
// of their own: each saves a server's start and stop (about 0.8 s; a
// package of such tests, a minute). Share turns it on, from TestMain,
// which then stops it: a server nothing stops would outlive the tests.
var shared struct {
	mu  sync.Mutex
	on  bool
	srv *Server
	err error
}

// Share lets this test binary's tests share one server (Shared). It
// returns the cleanup for goleak.VerifyTestMain's: it stops the server,
// then exits with the tests' code (1 if the stop failed).
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(pgtest.Share())) }
func Share() (exit func(code int)) {
	share()
	return func(code int) {
		if err := stopShared(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = max(code, 1)
		}
		os.Exit(code)
	}
}

func share() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.on = true
}

func stopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.on = false
	srv := shared.srv
	shared.srv, shared.err = nil, nil
	if srv == nil {
		return nil
	}
	return srv.Close()
}

// Shared is the test binary's one server, started at the first call: for
// a test that takes a database of its own on it (NewDB) and neither stops
// nor restarts it; a test that does takes its own with Require. It skips
// or fails as Require does where the binaries are missing.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.on {
		t.Fatal("pgtest.Shared: the test binary's TestMain does not call pgtest.Share, so nothing would stop the server")
	}
	if shared.srv == nil && shared.err == nil {
		if shared.srv, shared.err = start(false); shared.err == nil {
			shared.srv.shared = true
		}
	}
	if errors.Is(shared.err, ErrNoServer) {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%v (%s=1 requires it)", shared.err, RequireEnv)
		}
		t.Skipf("SKIPPING the PostgreSQL tests: %v", shared.err)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// NewDB creates a database of the test's own on s, named prefix and a
// number unique on s, and returns its name.
func (s *Server) NewDB(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", prefix, s.dbs.Add(1))
	if err := s.CreateDB(name); err != nil {
		t.Fatal(err)
	}
	return name
}

// Require starts a server for t and stops it at t's end. Where the server
// binaries are missing it skips t, or fails it when RequireEnv is 1.
func Require(t testing.TB) *Server { t.Helper(); return require(t, false) }

// RequireDurable is Require with fsync and synchronous commit on: for
// tests that crash the server and count on every acknowledged commit.
func RequireDurable(t testing.TB) *Server { t.Helper(); return require(t, true) }

func require(t testing.TB, durable bool) *Server {
	t.Helper()
	s, err := start(durable)
	if errors.Is(err, ErrNoServer) {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%v (%s=1 requires it)", err, RequireEnv)
		}
		t.Skipf("SKIPPING the PostgreSQL tests: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// FindBin is the directory of the server binaries: initdb's on PATH, else
// the newest /usr/lib/postgresql/*/bin (Debian keeps them off PATH).
func FindBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if dir := filepath.Dir(p); exists(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if exists(filepath.Join(d, "initdb")) && exists(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", ErrNoServer
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// Start initialises a cluster in a new temporary directory and starts it.
func Start() (*Server, error) { return start(false) }

// StartDurable is Start with a server that loses no acknowledged commit
// (fsync and synchronous commits on), as production runs it: for
// benchmarks whose figures must be a production server's.
func StartDurable() (*Server, error) { return start(true) }

func start(durable bool) (*Server, error) {
	bin, err := FindBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "swarmd-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{dir: dir, bin: bin, durable: durable}
	if err := s.asServerUser(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.start(); err != nil {
		s.remove()
		return nil, err
	}
	return s, nil
}

// asServerUser arranges for the server to run as runAs when we are root:
// the directory becomes that user's (the socket and data live there).
func (s *Server) asServerUser() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		return fmt.Errorf("pgtest: running as root, and PostgreSQL refuses root: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(s.dir, uid, gid); err != nil {
		return fmt.Errorf("pgtest: give %s to %s: %w", s.dir, runAs, err)
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		// util-linux puts it in sbin, which a test's PATH may lack.
		if runuser = "/usr/sbin/runuser"; !exists(runuser) {
			return fmt.Errorf("pgtest: running as root needs runuser (util-linux) to run PostgreSQL as %s: %w", runAs, err)
		}
	}
	s.sudo = []string{runuser, "-u", runAs, "--"}
	return nil
}

func (s *Server) start() error {
	data := filepath.Join(s.dir, "data")
	if tmpl, err := s.template(); err == nil {
		if exec.Command("cp", "-a", tmpl, data).Run() == nil && s.serve() == nil {
			return nil
		}
		// A template damaged under us (a /tmp cleaner): start afresh.
		_ = os.RemoveAll(data)
	}
	if err := s.initdb(data); err != nil {
		return err
	}
	return s.serve()
}

func (s *Server) initdb(data string) error {
	if out, err := s.run(60*time.Second, "initdb", "-D", data, "-U", Superuser, "-A", "trust",
		"--no-sync", "--no-instructions", "-E", "UTF8", "--locale", "C"); err != nil {
		return fmt.Errorf("pgtest: initdb: %w: %s", err, out)
	}
	return nil
}

// templateFormat changes when initdb's arguments do, so that a machine's
// template made by an older pgtest is not used.
const templateFormat = 1

// template is the data directory of a cluster initdb made once on this
// machine, for these binaries, which each new server copies: initdb is
// most of a server's start (0.8 s of 1.2 s on a 2-core machine) and the
// suite starts over a hundred servers. It lives in the temporary directory,
// made under another name and renamed into place, so that test binaries
// running at once never see it half made.
func (s *Server) template() (string, error) {
	st, err := os.Stat(filepath.Join(s.bin, "initdb"))
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%d-%s-%d-%d-%d-%d", templateFormat, s.bin, st.Size(), st.ModTime().UnixNano(), os.Geteuid(), len(s.sudo))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("swarmd-pgtest-template-%08x", crc32.ChecksumIEEE([]byte(key))))
	data := filepath.Join(dir, "data")
	if exists(filepath.Join(data, "global", "pg_control")) {
		return data, nil
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "swarmd-pgtest-template-new-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone once renamed; ours alone if another won
	made := &Server{dir: tmp, bin: s.bin}
	if err := made.asServerUser(); err != nil {
		return "", err
	}
	if err := made.initdb(filepath.Join(tmp, "data")); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil && !exists(filepath.Join(data, "global", "pg_control")) {
		return "", fmt.Errorf("pgtest: keep the template: %w", err)
	}
	return data, nil
}

// serve starts the server on its data directory.
func (s *Server) serve() error {
	opts := fmt.Sprintf("-c listen_addresses='' -k %s -c fsync=off -c synchronous_commit=off -c full_page_writes=off", s.dir)
	if s.durable {
		opts = fmt.Sprintf("-c listen_addresses='' -k %s -c fsync=on -c synchronous_commit=on -c full_page_writes=on", s.dir)
	}
	if out, err := s.run(60*time.Second, "pg_ctl", "start", "-w", "-t", "60", "-D", filepath.Join(s.dir, "data"),
		"-l", filepath.Join(s.dir, "server.log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		return fmt.Errorf("pgtest: pg_ctl start: %w: %s%s", err, out, log)
	}
	return nil
}

// Restart stops the server with pg_ctl's shutdown mode ("fast",
// "immediate": a crash, every connection cut), keeps it down for down, and
// starts it again on the same data and socket.
func (s *Server) Restart(mode string, down time.Duration) error {
	if err := s.Stop(mode); err != nil {
		return err
	}
	time.Sleep(down)
	return s.Serve()
}

// Stop stops the server with pg_ctl's shutdown mode ("fast", "immediate")
// and leaves it down, its socket gone, until Serve: for a test of clients
// that start while it is down, or that it goes down under.
func (s *Server) Stop(mode string) error {
	if s.shared {
		return errors.New("pgtest: a test stops the shared server (Shared), which other tests use: take one of its own with Require")
	}
	if out, err := s.run(60*time.Second, "pg_ctl", "stop", "-w", "-t", "30", "-m", mode, "-D", filepath.Join(s.dir, "data")); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop -m %s: %w: %s", mode, err, out)
	}
	s.stopped.Store(true)
	return nil
}

// Serve starts a server that Stop stopped again, on the same data and
// socket, and returns once it takes connections.
func (s *Server) Serve() error {
	if err := s.serve(); err != nil {
		return err
	}
	s.stopped.Store(false)
	return nil
}

// run runs one of the server's binaries, as the server's user.
func (s *Server) run(timeout time.Duration, prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := append(append(slices.Clone(s.sudo), filepath.Join(s.bin, prog)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

// SocketDir is the directory of the server's Unix socket.
func (s *Server) SocketDir() string { return s.dir }

// URL is a connection URL for database db, over the Unix socket.
func (s *Server) URL(db string) string {
	return "postgres://" + Superuser + "@/" + url.PathEscape(db) + "?host=" + url.QueryEscape(s.dir) + "&sslmode=disable"
}

// Exec runs sql in database db with psql, for setting up tests.
func (s *Server) Exec(db, sql string) error {
	out, err := s.run(30*time.Second, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", s.dir, "-U", Superuser,
		"-d", db, "-c", sql)
	if err != nil {
		return fmt.Errorf("pgtest: psql -d %s: %w: %s", db, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Query runs sql in database db with psql and returns its unaligned,
// tuples-only output.
func (s *Server) Query(db, sql string) (string, error) {
	out, err := s.run(30*time.Second, "psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", s.dir, "-U", Superuser,
		"-d", db, "-c", sql)
	if err != nil {
		return "", fmt.Errorf("pgtest: psql -d %s: %w: %s", db, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// CreateDB creates an empty database, one per test for isolation.
func (s *Server) CreateDB(name string) error {
	return s.Exec("postgres", `CREATE DATABASE "`+strings.ReplaceAll(name, `"`, `""`)+`"`)
}

// Close stops the server (fast shutdown, immediate if that hangs), checks
// that none of its processes is left, and removes its directory.
func (s *Server) Close() error {
	data := filepath.Join(s.dir, "data")
	var err error
	if !s.stopped.Load() {
		_, err = s.run(30*time.Second, "pg_ctl", "stop", "-w", "-t", "20", "-m", "fast", "-D", data)
	}
	if err != nil {
		if out, ierr := s.run(30*time.Second, "pg_ctl", "stop", "-w", "-m", "immediate", "-D", data); ierr != nil {
			return fmt.Errorf("pgtest: stop the server in %s: %w; immediate: %v: %s", s.dir, err, ierr, out)
		}
	}
	// pg_ctl -w returns once postmaster.pid is gone, which the postmaster
	// removes just before it exits: on a loaded machine it may still be
	// there a moment later. Wait for it, with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for pids := Processes(data); len(pids) > 0; pids = Processes(data) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: server processes %v of %s still running 10 s after pg_ctl stop", pids, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.remove()
	return nil
}

func (s *Server) remove() { _ = os.RemoveAll(s.dir) }

// Processes lists the pids of the postgres processes serving data: the
// postmaster names its data directory on its command line, and its
// children are its direct descendants.
func Processes(data string) []int {
	ents, _ := os.ReadDir("/proc")
	var masters []int
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil &&
			strings.Contains(string(cmd), data) && strings.Contains(string(cmd), "postgres") {
			masters = append(masters, pid)
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 {
				if f := strings.Fields(string(st[i+2:])); len(f) > 1 {
					parent[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
	}
	out := slices.Clone(masters)
	for pid, pp := range parent {
		if slices.Contains(masters, pp) {
			out = append(out, pid)
		}
	}
	return out
}
