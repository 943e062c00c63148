package store

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
)

// TestPostgresSchemaMatches applies the PostgreSQL migrations, in order, to a
// real server and checks that they make the same tables, columns (with the
// matching types) and indexes as the SQLite migrations, so that the two
// schemas stay in step: a migration added to one without the other fails
// here.
func TestPostgresSchemaMatches(t *testing.T) {
	sqliteFiles, _ := filepath.Glob("migrations/*.sql")
	pgFiles, _ := filepath.Glob("migrations/postgres/*.sql")
	var a, b []string
	for _, f := range sqliteFiles {
		a = append(a, filepath.Base(f))
	}
	for _, f := range pgFiles {
		b = append(b, filepath.Base(f))
	}
	if !slices.Equal(a, b) {
		t.Fatalf("migrations differ: sqlite %v, postgres %v", a, b)
	}

	srv := pgtest.Shared(t)
	if err := srv.CreateDB("schema"); err != nil {
		t.Fatal(err)
	}
	for _, f := range pgFiles {
		sql, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Exec("schema", string(sql)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	pgCols, err := srv.Query("schema", `SELECT table_name || '.' || column_name || ' ' || data_type
		FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	pgIdx, err := srv.Query("schema", `SELECT indexname FROM pg_indexes
		WHERE schemaname = 'public' AND indexname NOT LIKE '%_pkey' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}

	db := openTest(t, "", Options{})
	ctx := context.Background()
	var liteCols, liteIdx []string
	rows, err := db.ReadSQL().QueryContext(ctx, `SELECT m.name || '.' || p.name || ' ' || lower(p.type)
		FROM sqlite_schema m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> 'schema_migrations'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		for lite, pg := range map[string]string{" integer": " bigint", " real": " double precision"} {
			if strings.HasSuffix(c, lite) {
				c = strings.TrimSuffix(c, lite) + pg
			}
		}
		liteCols = append(liteCols, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = db.ReadSQL().QueryContext(ctx, `SELECT name FROM sqlite_schema
		WHERE type = 'index' AND name NOT LIKE 'sqlite_%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		liteIdx = append(liteIdx, n)
	}
	slices.Sort(liteCols)
	slices.Sort(liteIdx)
	if got := strings.Split(pgCols, "\n"); !slices.Equal(got, liteCols) {
		t.Errorf("columns differ:\npostgres: %v\nsqlite:   %v", diff(got, liteCols), diff(liteCols, got))
	}
	if got := strings.Split(pgIdx, "\n"); !slices.Equal(got, liteIdx) {
		t.Errorf("indexes differ:\npostgres: %v\nsqlite:   %v", diff(got, liteIdx), diff(liteIdx, got))
	}
}

// diff is what a has that b lacks.
func diff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
