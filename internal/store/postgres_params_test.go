package store_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// The store's connections run with the server's JIT off: on a board whose
// statistics saw a large backlog, the claim's and the prompt's reads are
// planned above jit_above_cost, and each execution compiled for
// milliseconds to run for a tenth of one. A URL that sets jit keeps it.
func TestPostgresConnectionsRunWithoutJIT(t *testing.T) {
	srv := pgtest.Shared(t)
	ctx := context.Background()
	for _, c := range []struct{ db, query, want string }{
		{"jitdefault", "", "off"},
		{"jiturl", "jit=on", "on"},
	} {
		if err := srv.CreateDB(c.db); err != nil {
			t.Fatal(err)
		}
		url := srv.URL(c.db)
		if c.query != "" {
			url += "&" + c.query
		}
		db, err := store.Open(ctx, url, store.Options{})
		if err != nil {
			t.Fatalf("open %s: %v", url, err)
		}
		t.Cleanup(func() { db.Close() }) // a Fatal below leaves it open otherwise
		for name, q := range map[string]interface {
			QueryRowContext(context.Context, string, ...any) *sql.Row
		}{"write": db.SQL(), "read": db.ReadSQL()} {
			var got string
			if err := q.QueryRowContext(ctx, `SHOW jit`).Scan(&got); err != nil {
				t.Fatalf("%s: show jit: %v", c.db, err)
			}
			if got != c.want {
				t.Errorf("%s: the %s pool's jit = %s, want %s", c.db, name, got, c.want)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
