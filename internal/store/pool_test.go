package store

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPoolCachesBounded: a query text is prepared once; past the bound
// queries still run, unprepared; a bad query reports its error; Close closes
// every statement and later queries fail as on a closed pool.
func TestPoolCachesBounded(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	if err := db.SetSetting(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	p := db.ReadSQL()
	base := p.cached()
	for range 3 {
		var v string
		if err := p.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ? AND 1 = 1`, "k").Scan(&v); err != nil || v != "v" {
			t.Fatalf("setting %q, %v", v, err)
		}
	}
	if got := p.cached(); got != base+1 {
		t.Fatalf("one text run 3 times: %d statements cached, want %d", got, base+1)
	}
	for i := range maxCachedStmts + 10 {
		var n int
		if err := p.QueryRowContext(ctx, `SELECT `+strconv.Itoa(i)).Scan(&n); err != nil || n != i {
			t.Fatalf("query %d: %d, %v", i, n, err)
		}
	}
	if got := p.cached(); got != maxCachedStmts {
		t.Fatalf("%d statements cached, want the bound %d", got, maxCachedStmts)
	}
	if _, err := p.QueryContext(ctx, `SELEKT 1`); err == nil {
		t.Fatal("a bad query ran")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := p.cached(); got != 0 {
		t.Fatalf("%d statements left after Close", got)
	}
	if err := p.QueryRowContext(ctx, `SELECT 1`).Scan(new(int)); err == nil {
		t.Fatal("a query ran after Close")
	}
}

// doneCounter is a context that counts how often its Done is asked for:
// what watches a context for cancellation asks.
type doneCounter struct {
	context.Context
	dones atomic.Int32
}

func (c *doneCounter) Done() <-chan struct{} {
	c.dones.Add(1)
	return c.Context.Done()
}

// TestPoolRowReadsDoNotWatchContext: on SQLite a one-row read does not
// watch a live context (database/sql and the driver would each start a
// goroutine to), and a cancelled one still fails it.
func TestPoolRowReadsDoNotWatchContext(t *testing.T) {
	db := openTest(t, "", Options{})
	p := db.ReadSQL()
	live, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx := &doneCounter{Context: live}
	var n int
	if err := p.QueryRowContext(ctx, `SELECT 7`).Scan(&n); err != nil || n != 7 {
		t.Fatalf("read: %d, %v", n, err)
	}
	if got := ctx.dones.Load(); got != 0 {
		t.Errorf("a one-row read asked for Done %d times: it watches the context", got)
	}
	dead, cancelDead := context.WithCancel(context.Background())
	cancelDead()
	if err := p.QueryRowContext(dead, `SELECT 7`).Scan(&n); !errors.Is(err, context.Canceled) {
		t.Errorf("read with a cancelled context: %v, want context.Canceled", err)
	}
}

// TestWrapNamesADeletedFile: once swarm.db is deleted, a read that needs
// a new connection fails with SQLite's "unable to open", and WrapFor
// names the cause, ErrDatabaseGone; before, an error keeps its own name.
func TestWrapNamesADeletedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "swarm.db")
	db := openTest(t, path, Options{})
	cause := errors.New("unable to open database file (14)")
	if err := db.WrapFor("taskboard", "has work", cause); errors.Is(err, ErrDatabaseGone) || !errors.Is(err, cause) {
		t.Fatalf("with the file in place: %v", err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	err := db.WrapFor("taskboard", "has work", cause)
	if !errors.Is(err, ErrDatabaseGone) || !errors.Is(err, cause) || !strings.HasPrefix(err.Error(), "taskboard: has work: ") {
		t.Fatalf("with the file deleted: %v", err)
	}
}
