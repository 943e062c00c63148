package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"
)

func latestVersion(t testing.TB) int {
	t.Helper()
	ms, err := loadMigrations(migrationFS)
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

func TestEmbeddedMigrationsAreValid(t *testing.T) {
	if latestVersion(t) < 1 {
		t.Fatal("no migrations embedded")
	}
}

func TestMigrateFromEmptyAndReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openTest(t, path, Options{})

	v, err := sqliteDriver{}.userVersion(ctx, db.SQL())
	if err != nil || v != latestVersion(t) {
		t.Fatalf("user_version = %d, %v; want %d", v, err, latestVersion(t))
	}
	var mode string
	if err := db.SQL().QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
	for _, p := range []struct{ pragma, want string }{{"synchronous", "1"}, {"foreign_keys", "1"}, {"busy_timeout", "10000"}} {
		var got string
		if err := db.SQL().QueryRow(`PRAGMA ` + p.pragma).Scan(&got); err != nil || got != p.want {
			t.Errorf("write pool PRAGMA %s = %q, %v; want %s", p.pragma, got, err, p.want)
		}
		if err := db.read.QueryRow(`PRAGMA ` + p.pragma).Scan(&got); err != nil || got != p.want {
			t.Errorf("read pool PRAGMA %s = %q, %v; want %s", p.pragma, got, err, p.want)
		}
	}
	id := addMail(t, db, "bob", "")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopening applies nothing and keeps the data.
	db2 := openTest(t, path, Options{})
	if v, _ := (sqliteDriver{}).userVersion(ctx, db2.SQL()); v != latestVersion(t) {
		t.Fatalf("user_version after reopen = %d", v)
	}
	var body string
	if err := db2.ReadSQL().QueryRowContext(ctx, `SELECT body FROM messages WHERE id = ?`, id).Scan(&body); err != nil || body != "work" {
		t.Fatalf("after reopen: message %d = %q, %v", id, body, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openTest(t, path, Options{})
	latest := latestVersion(t)
	if _, err := db.SQL().Exec(fmt.Sprintf(`PRAGMA user_version = %d`, latest+1)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	_, err := Open(ctx, path, Options{})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open of a newer schema = %v, want ErrSchemaTooNew", err)
	}
	want := fmt.Sprintf("schema version %d, this swarmd knows up to %d (upgrade swarmd)", latest+1, latest)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not say %q and name the file", err, want)
	}
}

// withMigrations returns the embedded migrations plus extra ones.
func withMigrations(t *testing.T, extra map[string]string) fs.FS {
	t.Helper()
	m := copyMigrations(t, migrationFS, func(string) bool { return true })
	for name, sql := range extra {
		m["migrations/"+name] = &fstest.MapFile{Data: []byte(sql)}
	}
	return m
}

// copyMigrations is fsys's migrations whose file names keep says, in a
// tree loadMigrations reads.
func copyMigrations(t *testing.T, fsys fs.FS, keep func(name string) bool) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	entries, err := fs.ReadDir(fsys, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !keep(e.Name()) {
			continue
		}
		b, err := fs.ReadFile(fsys, "migrations/"+e.Name())
		if err != nil {
			t.Fatal(err)
		}
		m["migrations/"+e.Name()] = &fstest.MapFile{Data: b}
	}
	return m
}

func TestAddingAMigration(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	next := latestVersion(t) + 1

	// A failing migration leaves the schema at a whole version.
	broken := withMigrations(t, map[string]string{
		fmt.Sprintf("%04d_broken.sql", next): `CREATE TABLE half (x INTEGER); CREATE TABLE oops (`,
	})
	if err := db.migrate(ctx, broken); err == nil || !strings.Contains(err.Error(), "_broken.sql") {
		t.Fatalf("broken migration: %v, want an error naming the file", err)
	}
	if v, _ := (sqliteDriver{}).userVersion(ctx, db.SQL()); v != next-1 {
		t.Fatalf("user_version after a failed migration = %d, want %d", v, next-1)
	}
	var n int
	db.SQL().QueryRow(`SELECT COUNT(*) FROM sqlite_schema WHERE name = 'half'`).Scan(&n)
	if n != 0 {
		t.Fatal("failed migration left a table behind")
	}

	good := withMigrations(t, map[string]string{
		fmt.Sprintf("%04d_widgets.sql", next): `CREATE TABLE widgets (name TEXT PRIMARY KEY) STRICT; INSERT INTO widgets VALUES ('alice');`,
	})
	if err := db.migrate(ctx, good); err != nil {
		t.Fatal(err)
	}
	if v, _ := (sqliteDriver{}).userVersion(ctx, db.SQL()); v != next {
		t.Fatalf("user_version = %d, want %d", v, next)
	}
	if err := db.migrate(ctx, good); err != nil {
		t.Fatalf("migrating again: %v", err)
	}
	if err := db.SQL().QueryRow(`SELECT COUNT(*) FROM widgets`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("widgets rows = %d, %v; the migration must run exactly once", n, err)
	}
}

func TestLoadMigrationsRejectsBadSets(t *testing.T) {
	for name, files := range map[string][]string{
		"gap":       {"0001_a.sql", "0003_c.sql"},
		"duplicate": {"0001_a.sql", "0001_b.sql"},
		"zero":      {"0000_a.sql"},
		"unnamed":   {"0001_a.sql", "second.sql"},
	} {
		m := fstest.MapFS{}
		for _, f := range files {
			m["migrations/"+f] = &fstest.MapFile{Data: []byte("SELECT 1;")}
		}
		if _, err := loadMigrations(m); err == nil {
			t.Errorf("%s: %v accepted", name, files)
		}
	}
}

// TestOpenConcurrentFresh is many `swarmd mail` processes starting at once
// on a state_dir the daemon has not initialised yet.
func TestOpenConcurrentFresh(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			db, err := Open(ctx, path, Options{})
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			if err := db.SetSetting(ctx, fmt.Sprint("test.", i), "x"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent open/send: %v", err)
	}
	db := openTest(t, path, Options{})
	if v, _ := (sqliteDriver{}).userVersion(ctx, db.SQL()); v != latestVersion(t) {
		t.Fatalf("user_version = %d", v)
	}
	var got int
	if err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM settings WHERE key LIKE 'test.%'`).Scan(&got); err != nil || got != n {
		t.Fatalf("%d settings, %v; want %d", got, err, n)
	}
}

// The write connection never checkpoints inside a commit; the store's own
// upkeep does, in the background: what is committed reaches the database
// file while the store stays open.
func TestWALCheckpointedInTheBackground(t *testing.T) {
	db := openTest(t, "", Options{})
	ctx := context.Background()
	var auto int
	if err := db.write.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&auto); err != nil {
		t.Fatal(err)
	}
	if auto != 0 {
		t.Fatalf("wal_autocheckpoint of the write connection = %d, want 0", auto)
	}
	size := func() int64 {
		fi, err := os.Stat(db.Path())
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	if err := db.InTx(ctx, "fill", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES ('big', ?)`, strings.Repeat("x", 1<<20))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for size() < before+1<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("database file still %d bytes 10 s after a 1 MiB commit (was %d): no checkpoint", size(), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The upkeep is told of writes: a commit is checkpointed, and an idle store
// checkpoints no more (it looked at the WAL four times a second).
func TestIdleStoreDoesNotCheckpoint(t *testing.T) {
	db := openTest(t, "", Options{})
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	waitMore := func(n int64, what string) {
		t.Helper()
		for db.checkpoints.Load() <= n {
			if time.Now().After(deadline) {
				t.Fatalf("no checkpoint after %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitMore(0, "the migrations") // written before the watch began
	for i := range 2 {
		n := db.checkpoints.Load()
		time.Sleep(4 * checkpointEvery)
		if got := db.checkpoints.Load(); got != n {
			t.Fatalf("%d checkpoints over %s with no write, want 0", got-n, 4*checkpointEvery)
		}
		if err := db.SetSetting(ctx, "test.idle", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		waitMore(n, "a commit")
	}
}

// TestEndUpkeep: a stopping daemon ends the store's upkeep ahead of Close.
// Its checkpoints stop, its WAL watch is closed (its goroutine gone), the
// store still takes writes, and Close checkpoints them: the WAL is gone and
// the file holds them.
func TestEndUpkeep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "swarm.db")
	db, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for db.checkpoints.Load() == 0 { // the migrations'
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint after the migrations")
		}
		time.Sleep(10 * time.Millisecond)
	}
	db.EndUpkeep()
	db.EndUpkeep() // idempotent
	if db.wal == nil {
		t.Fatal("no WAL watch on this host: nothing to test")
	}
	select {
	case <-db.wal.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the WAL watch still runs 10 s after EndUpkeep")
	}
	n := db.checkpoints.Load()
	if err := db.SetSetting(ctx, "test.after", "kept"); err != nil {
		t.Fatalf("a write after EndUpkeep: %v", err)
	}
	time.Sleep(4 * checkpointEvery)
	if got := db.checkpoints.Load(); got != n {
		t.Fatalf("%d checkpoints after EndUpkeep, want 0", got-n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the WAL after Close: %v; want it checkpointed and removed", err)
	}
	again := openTest(t, path, Options{})
	if v, ok, err := again.Setting(ctx, "test.after"); err != nil || !ok || v != "kept" {
		t.Fatalf("after a reopen the write reads %q, %v, %v; want it kept", v, ok, err)
	}
}

// TestMigrateSkipsWhatAnotherOpenerApplied: an opener that read an old
// version before another process migrated the file skips to the version
// it finds under the write lock, instead of taking the lock once per step
// it thought was missing (20 `swarmd mail` processes on a fresh file
// starved one of them past its busy timeout that way).
func TestMigrateSkipsWhatAnotherOpenerApplied(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	ms, err := loadMigrations(migrationFS)
	if err != nil {
		t.Fatal(err)
	}
	latest := len(ms)
	got, err := db.apply(ctx, ms[0], latest) // as if it had read version 0
	if err != nil || got != latest {
		t.Fatalf("apply of migration 1 on a file at %d = %d, %v; want %d", latest, got, err, latest)
	}
}
