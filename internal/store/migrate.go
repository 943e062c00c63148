package store

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

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
// BEGIN IMMEDIATE transaction together with its schema version bump, so
// a crash leaves the schema at a whole version and concurrent openers
// (several `swarmd mail` processes on a fresh file) apply each step once.
func (db *DB) migrate(ctx context.Context, fsys fs.FS) error {
	ms, err := loadMigrations(fsys)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	latest := len(ms)
	// Fast path, the common case for every CLI invocation: one read.
	cur, err := db.drv.userVersion(ctx, db.write)
	if err != nil {
		return db.Wrap("migrate", err)
	}
	if cur > latest {
		return db.tooNew(cur, latest)
	}
	for cur < latest {
		if cur, err = db.apply(ctx, ms[cur], latest); err != nil {
			return err
		}
	}
	return nil
}

// apply applies m unless the schema is at m's version or past it already
// (another opener got there first), and returns the version it is at now:
// an opener that lost the race to a fresh file takes the write lock once,
// not once per step, while the winner's processes are already writing.
func (db *DB) apply(ctx context.Context, m migration, latest int) (int, error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, db.Wrap("migrate", err)
	}
	defer tx.Rollback()
	// Re-read under the write lock: another process may have got here first.
	cur, err := db.drv.userVersion(ctx, tx)
	if err != nil {
		return 0, db.Wrap("migrate", err)
	}
	switch {
	case cur > latest:
		return 0, db.tooNew(cur, latest)
	case cur >= m.version:
		return cur, nil
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return 0, db.Wrap("migrate "+m.name, err)
	}
	if err := db.drv.setUserVersion(ctx, tx, m.version); err != nil {
		return 0, db.Wrap("migrate "+m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, db.Wrap("migrate "+m.name, err)
	}
	return m.version, nil
}

func (db *DB) tooNew(cur, latest int) error {
	return fmt.Errorf("store: open %s: %w: schema version %d, this swarmd knows up to %d (upgrade swarmd)",
		db.path, ErrSchemaTooNew, cur, latest)
}
