package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(pgtest.Share())) }

// fakeClock returns a clock that advances one second per reading.
func fakeClock() func() time.Time {
	t := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	return func() time.Time { t = t.Add(time.Second); return t }
}

// openTest opens a store at path (a fresh file in a temp dir when "") and
// closes it when the test ends.
func openTest(t testing.TB, path string, opts Options) *DB {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "swarm.db")
	}
	db, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// addMail inserts a pending message to agent, claimed by session if not
// "": the mail rows recovery touches, without the mailbox package.
func addMail(t testing.TB, db *DB, to, session string) int64 {
	t.Helper()
	var claimed any
	if session != "" {
		claimed = session
	}
	res, err := db.SQL().Exec(`INSERT INTO messages (id, thread_id, sender, recipient, subject, body, urgency, created_at, claimed_session)
		VALUES ((SELECT IFNULL(MAX(id), 0) + 1 FROM messages), (SELECT IFNULL(MAX(id), 0) + 1 FROM messages), 'operator', ?, '', 'work', 'normal', ?, ?)`,
		to, FormatTime(time.Now()), claimed)
	if err != nil {
		t.Fatalf("insert mail: %v", err)
	}
	id, _ := res.LastInsertId()
	return id
}

// eachEngine runs test on a fresh store of each engine: a SQLite file and
// a database of its own, named name, on the shared PostgreSQL server.
func eachEngine(t *testing.T, name string, test func(t *testing.T, db *DB)) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			if engine == "sqlite" {
				test(t, openTest(t, "", Options{}))
				return
			}
			srv := pgtest.Shared(t)
			if err := srv.CreateDB(name); err != nil {
				t.Fatal(err)
			}
			db, err := Open(context.Background(), srv.URL(name), Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			test(t, db)
		})
	}
}

// mustExec runs q on db's write pool, failing t if it fails.
func mustExec(t testing.TB, db *DB, q string, args ...any) {
	t.Helper()
	if _, err := db.SQL().ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
