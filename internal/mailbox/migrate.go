package mailbox

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// migrationFS holds the schema. To change it, add the next numbered file
// (migrations/0002_agents.sql, …); never edit one that has shipped.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads NNNN_name.sql files from the migrations directory of
// fsys and checks that their versions run 1, 2, 3… with no gap or duplicate,
// so a misnumbered file fails every test instead of skipping a step.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		prefix, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", name)
		}
		body, err := fs.ReadFile(fsys, path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(body)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: version %d, want %d (versions must run 1, 2, 3… without gaps)", m.name, m.version, i+1)
		}
	}
	return ms, nil
}

// migrate applies the migrations the database lacks, each in its own
// BEGIN IMMEDIATE transaction together with its PRAGMA user_version bump, so
// a crash leaves the schema at a whole version and concurrent openers
// (several `swarmd mail` processes on a fresh file) apply each step once.
func (db *DB) migrate(ctx context.Context, fsys fs.FS) error {
	ms, err := loadMigrations(fsys)
	if err != nil {
		return fmt.Errorf("mailbox: migrate: %w", err)
	}
	latest := len(ms)
	// Fast path, the common case for every CLI invocation: one read.
	cur, err := userVersion(ctx, db.write)
	if err != nil {
		return db.wrap("migrate", err)
	}
	if cur > latest {
		return db.tooNew(cur, latest)
	}
	for _, m := range ms[cur:] {
		if err := db.apply(ctx, m, latest); err != nil {
			return err
		}
	}
	return nil
}

func (db *DB) apply(ctx context.Context, m migration, latest int) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return db.wrap("migrate", err)
	}
	defer tx.Rollback()
	// Re-read under the write lock: another process may have got here first.
	cur, err := userVersion(ctx, tx)
	if err != nil {
		return db.wrap("migrate", err)
	}
	switch {
	case cur > latest:
		return db.tooNew(cur, latest)
	case cur >= m.version:
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return db.wrap("migrate "+m.name, err)
	}
	// PRAGMA takes no bound parameters; the version is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
		return db.wrap("migrate "+m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return db.wrap("migrate "+m.name, err)
	}
	return nil
}

func (db *DB) tooNew(cur, latest int) error {
	return fmt.Errorf("mailbox: open %s: %w: schema version %d, this swarmd knows up to %d (upgrade swarmd)",
		db.path, ErrSchemaTooNew, cur, latest)
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func userVersion(ctx context.Context, q queryRower) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}
