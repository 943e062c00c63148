package pgtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServer starts a real server, runs queries in a database of its own,
// checks that it listens on its Unix socket and on no TCP address, and that
// Close leaves none of its processes behind.
func TestServer(t *testing.T) {
	s, err := Start()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" || !errors.Is(err, ErrNoServer) {
			t.Fatal(err)
		}
		t.Skipf("SKIPPING: %v", err)
	}
	data := filepath.Join(s.dir, "data")
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if _, err := os.Stat(filepath.Join(s.SocketDir(), ".s.PGSQL.5432")); err != nil {
		t.Fatalf("no Unix socket: %v", err)
	}
	if got, err := s.Query("postgres", "SHOW listen_addresses"); err != nil || got != "" {
		t.Fatalf("listen_addresses = %q, %v; want none (no TCP)", got, err)
	}
	if err := s.CreateDB("t1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Exec("t1", "CREATE TABLE x (id BIGINT GENERATED ALWAYS AS IDENTITY, v TEXT); INSERT INTO x (v) VALUES ('a'), ('b')"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Query("t1", "SELECT string_agg(v, ',' ORDER BY id) FROM x"); err != nil || got != "a,b" {
		t.Fatalf("query = %q, %v; want a,b", got, err)
	}
	if u := s.URL("t1"); !strings.HasPrefix(u, "postgres://"+Superuser+"@/t1?host=") {
		t.Errorf("URL = %s", u)
	}
	if len(Processes(data)) == 0 {
		t.Fatal("Processes finds no server process while it runs")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if pids := Processes(data); len(pids) != 0 {
		t.Fatalf("processes %v left after Close", pids)
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("%s left after Close: %v", s.dir, err)
	}
}

// TestRequire: a second server through the helper tests use.
func TestRequire(t *testing.T) {
	s := Require(t)
	if got, err := s.Query("postgres", "SELECT 1 + 1"); err != nil || got != "2" {
		t.Fatalf("SELECT 1 + 1 = %q, %v", got, err)
	}
}

// TestStopAndServe: a server Stop left down takes no connection (its
// socket is gone) until Serve, which brings it back on the same data; Close
// of a server left down stops nothing and leaves nothing.
func TestStopAndServe(t *testing.T) {
	s, err := Start()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" || !errors.Is(err, ErrNoServer) {
			t.Fatal(err)
		}
		t.Skipf("SKIPPING: %v", err)
	}
	data := filepath.Join(s.dir, "data")
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if err := s.CreateDB("kept"); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(s.SocketDir(), ".s.PGSQL.5432")
	for _, mode := range []string{"fast", "immediate"} {
		if err := s.Stop(mode); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(socket); !os.IsNotExist(err) {
			t.Fatalf("stopped (%s): the socket is still there (%v)", mode, err)
		}
		if _, err := s.Query("kept", "SELECT 1"); err == nil {
			t.Fatalf("stopped (%s): a query was answered", mode)
		}
		if err := s.Serve(); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Query("kept", "SELECT 1"); err != nil || got != "1" {
			t.Fatalf("served again after %s: SELECT 1 = %q, %v", mode, got, err)
		}
	}
	if err := s.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close of a stopped server = %v", err)
	}
	closed = true
	if pids := Processes(data); len(pids) != 0 {
		t.Fatalf("processes %v left after Close", pids)
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("%s left after Close: %v", s.dir, err)
	}
}

// TestShared: the tests of one binary share one server, each with a
// database of its own; none may stop it; the stop in Share's cleanup stops
// it and leaves none of its processes.
func TestShared(t *testing.T) {
	share()
	a := Shared(t)
	if b := Shared(t); b != a {
		t.Fatalf("a second Shared is another server (%s, %s)", b.dir, a.dir)
	}
	if n1, n2 := a.NewDB(t, "t"), a.NewDB(t, "t"); n1 == n2 {
		t.Fatalf("NewDB made %s twice", n1)
	}
	if got, err := a.Query("t_2", "SELECT current_database()"); err != nil || got != "t_2" {
		t.Fatalf("the second database: %q, %v", got, err)
	}
	if err := a.Stop("fast"); err == nil {
		t.Fatal("Stop of the shared server was allowed")
	}
	if err := a.Restart("immediate", 0); err == nil {
		t.Fatal("Restart of the shared server was allowed")
	}
	data := filepath.Join(a.dir, "data")
	if err := stopShared(); err != nil {
		t.Fatal(err)
	}
	if pids := Processes(data); len(pids) != 0 {
		t.Fatalf("processes %v left after the shared server's stop", pids)
	}
	if _, err := os.Stat(a.dir); !os.IsNotExist(err) {
		t.Fatalf("%s left after the shared server's stop: %v", a.dir, err)
	}
}
