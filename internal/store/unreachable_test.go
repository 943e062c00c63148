package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// What Unreachable takes for a server away, worth another try, and what
// it does not: a wrong password must fail at once, not for --store-wait.
func TestUnreachable(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", fmt.Errorf("store: open: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"shut down by the admin", &pgconn.PgError{Code: "57P01"}, true},
		{"too many clients", &pgconn.PgError{Code: "53300"}, true},
		{"out of memory", &pgconn.PgError{Code: "53200"}, true},
		{"out of resources", &pgconn.PgError{Code: "53000"}, true},
		{"idle in transaction too long (a paused client)", fmt.Errorf("open: %w", &pgconn.PgError{Code: "25P03"}), true},
		{"idle session timeout", &pgconn.PgError{Code: "57P05"}, true},
		{"wrong password", &pgconn.PgError{Code: "28P01"}, false},
		{"no such database", &pgconn.PgError{Code: "3D000"}, false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"cancelled", context.Canceled, false},
		{"nil", nil, false},
	} {
		if got := Unreachable(c.err); got != c.want {
			t.Errorf("%s: Unreachable = %v, want %v", c.name, got, c.want)
		}
	}
}

// What InDoubt takes for a write that may have committed unseen, and what
// leaves no doubt (nothing was sent, or the store refused it).
func TestInDoubt(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"the connection ended mid-answer", fmt.Errorf("commit: %w", io.ErrUnexpectedEOF), true},
		{"read: connection reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{"a statement the server refused", &pgconn.PgError{Code: "23505"}, false},
		{"a lock timeout", &pgconn.PgError{Code: "55P03"}, false},
		{"nil", nil, false},
	} {
		if got := InDoubt(c.err); got != c.want {
			t.Errorf("%s: InDoubt = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTransientNeedsNoStore: the one classification of errors worth
// waiting for judges them without an open store (a starting daemon's
// Open), for both engines: a SQLite file another connection holds locked
// and a server away are, what the store refuses for good is not.
func TestTransientNeedsNoStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	raw := func() *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(1)
		return db
	}
	holder, other := raw(), raw()
	if _, err := holder.Exec("CREATE TABLE x (v INTEGER)"); err != nil {
		t.Fatal(err)
	}
	tx, err := holder.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("INSERT INTO x VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	_, busy := other.Exec("INSERT INTO x VALUES (2)")
	if busy == nil {
		t.Fatal("a second writer was not refused")
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"SQLite busy", fmt.Errorf("store: open %s: %w", path, busy), true},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"cut mid-answer", fmt.Errorf("store: leases: %w", io.ErrUnexpectedEOF), true},
		{"serialization conflict", &pgconn.PgError{Code: "40001"}, true},
		{"disk full", &pgconn.PgError{Code: "53100"}, true},
		{"out of shared memory", fmt.Errorf("taskboard: task 1 to DONE: %w", &pgconn.PgError{Code: "53200"}), true},
		{"wrong password", &pgconn.PgError{Code: "28P01"}, false},
		{"no such database", &pgconn.PgError{Code: "3D000"}, false},
		{"schema too new", fmt.Errorf("store: open: %w", ErrSchemaTooNew), false},
		{"read-only", fmt.Errorf("store: open: %w", ErrReadOnly), false},
		{"cancelled", context.Canceled, false},
		{"nil", nil, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("%s: Transient = %v, want %v (%v)", c.name, got, c.want, c.err)
		}
	}
}

// TestEngineFault: the engine failing (an I/O error, a corrupt file, a
// statement whose completion is unknown) is told from a refusal of what
// was written (a constraint, a value out of range) and from what a retry
// passes, on both engines.
func TestEngineFault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-a-db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a database file "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, notADB := db.Exec("CREATE TABLE x (v INTEGER)")
	if notADB == nil {
		t.Fatal("a file that is not a database was written to")
	}
	mem, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if _, err := mem.Exec("CREATE TABLE y (v INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	_, constraint := mem.Exec("INSERT INTO y VALUES (1), (1)")
	if constraint == nil {
		t.Fatal("a duplicate key was taken")
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"SQLite: not a database", fmt.Errorf("settle: %w", notADB), true},
		{"SQLite: a constraint", constraint, false},
		{"PostgreSQL: I/O error", &pgconn.PgError{Code: "58030"}, true},
		{"PostgreSQL: internal error", fmt.Errorf("x: %w", &pgconn.PgError{Code: "XX000"}), true},
		{"PostgreSQL: completion unknown", &pgconn.PgError{Code: "40003"}, true},
		{"PostgreSQL: a value out of range", &pgconn.PgError{Code: "22003"}, false},
		{"PostgreSQL: serialization conflict", &pgconn.PgError{Code: "40001"}, false},
		{"not the engine's", errors.New("invalid task request"), false},
	} {
		if got := EngineFault(c.err); got != c.want {
			t.Errorf("%s: EngineFault(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
