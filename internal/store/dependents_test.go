package store

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
)

// Migration 0024 counts each task's dependents on the rows already there,
// and task_deps' triggers keep the count from then on: a close of a task
// with dependents opens them only if its row says it has some (taskboard's
// cascade skips the search otherwise), so a count that missed an old
// dependency would leave its task BLOCKED for good. On both engines.
func TestDependentsCounted(t *testing.T) {
	targets := map[string]func() (string, driver){
		"sqlite": func() (string, driver) { return filepath.Join(t.TempDir(), "swarm.db"), sqliteDriver{} },
		"postgres": func() (string, driver) {
			srv := pgtest.Shared(t)
			if err := srv.CreateDB("dependents"); err != nil {
				t.Fatal(err)
			}
			return srv.URL("dependents"), &pgDriver{}
		},
	}
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			ctx := context.Background()
			target, drv := targets[engine]()
			old, err := open(ctx, target, Options{}, drv, copyMigrations(t, drv.migrations(), func(name string) bool { return name < "0024" }))
			if err != nil {
				t.Fatal(err)
			}
			// Task 1 waits for nothing and has three dependents, task 2
			// has one, task 4 none.
			for _, q := range []string{
				`INSERT INTO tasks (id, title, state, created_by, created_at, updated_at) VALUES
					(1, 'gate', 'OPEN', 'test', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z'),
					(2, 'a', 'BLOCKED', 'test', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z'),
					(3, 'b', 'BLOCKED', 'test', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z'),
					(4, 'c', 'BLOCKED', 'test', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`,
				`INSERT INTO task_deps (task_id, dep_id) VALUES (2, 1), (3, 1), (4, 1), (3, 2)`,
			} {
				if _, err := old.SQL().ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}

			db, err := open(ctx, target, Options{}, drv, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			want := func(when string, counts ...int) {
				t.Helper()
				rows, err := db.SQL().QueryContext(ctx, `SELECT dependents FROM tasks ORDER BY id`)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				var got []int
				for rows.Next() {
					var n int
					if err := rows.Scan(&n); err != nil {
						t.Fatal(err)
					}
					got = append(got, n)
				}
				if !slices.Equal(got, counts) {
					t.Errorf("%s: dependents by task = %v, want %v", when, got, counts)
				}
			}
			want("after the migration", 3, 1, 0, 0)

			for _, q := range []string{
				`INSERT INTO tasks (id, title, state, created_by, created_at, updated_at) VALUES (5, 'd', 'BLOCKED', 'test', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`,
				`INSERT INTO task_deps (task_id, dep_id) VALUES (5, 4), (5, 1)`,
				// Ignored: the pair is there already, and counted once.
				`INSERT OR IGNORE INTO task_deps (task_id, dep_id) VALUES (5, 4)`,
			} {
				if _, err := db.SQL().ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			want("after new dependencies", 4, 1, 0, 1, 0)
			if _, err := db.SQL().ExecContext(ctx, `DELETE FROM task_deps WHERE task_id = 3`); err != nil {
				t.Fatal(err)
			}
			want("after a task's dependencies were deleted", 3, 0, 0, 1, 0)
		})
	}
}
