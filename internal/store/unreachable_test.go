package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
