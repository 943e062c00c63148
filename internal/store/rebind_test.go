package store

import "testing"

// TestRebind: the store's SQLite-shaped SQL as PostgreSQL runs it.
func TestRebind(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = $1 AND c = $2`},
		{`SELECT '?' FROM t WHERE b = ?`, `SELECT '?' FROM t WHERE b = $1`},
		{`SELECT IFNULL(MAX(id), 0) FROM t`, `SELECT COALESCE(MAX(id), 0) FROM t`},
		{`SELECT group_concat(CAST(d AS TEXT), ',') FROM t WHERE x = ?`, `SELECT string_agg(CAST(d AS TEXT), ',') FROM t WHERE x = $1`},
		{`INSERT OR IGNORE INTO t (a) VALUES (?)`, `INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING`},
	} {
		if got := rebind(c.in); got != c.want {
			t.Errorf("rebind(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
