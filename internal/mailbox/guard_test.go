package mailbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// TestDeletedDatabaseIsNeverWritten: once swarm.db is deleted or replaced
// under an open DB, every write refuses with store.ErrDatabaseGone instead of
// going into the unlinked file, and the condition latches.
func TestDeletedDatabaseIsNeverWritten(t *testing.T) {
	for _, how := range []string{"deleted", "replaced"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "swarm.db")
			db := openTest(t, path, Options{Agents: testAgents})
			if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: "before"}); err != nil {
				t.Fatal(err)
			}
			if err := db.Check(); err != nil {
				t.Fatalf("Check on a healthy file = %v", err)
			}
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				_ = os.Remove(p)
			}
			if how == "replaced" {
				openTest(t, path, Options{})
			}
			if err := db.Check(); !errors.Is(err, store.ErrDatabaseGone) {
				t.Fatalf("Check = %v, want store.ErrDatabaseGone", err)
			}
			_, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: "after"})
			if !errors.Is(err, store.ErrDatabaseGone) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), path) {
				t.Fatalf("Send after the file went = %v", err)
			}
			if _, err := db.ConsumeForPrompt(ctx, "bob", "s"); !errors.Is(err, store.ErrDatabaseGone) {
				t.Fatalf("ConsumeForPrompt = %v", err)
			}
			now := time.Now()
			if _, err := db.Ack(ctx, store.SessionRecord{SessionID: "s", Agent: "bob", Started: now, Ended: &now}); !errors.Is(err, store.ErrDatabaseGone) {
				t.Fatalf("Ack = %v", err)
			}
			j := db.Store().NewJournal(store.JournalOptions{FlushInterval: never})
			j.Start()
			j.Event(store.EventRecord{At: now, Agent: "bob", Event: "x"})
			if err := j.Flush(ctx); !errors.Is(err, store.ErrDatabaseGone) {
				t.Fatalf("journal flush = %v", err)
			}
			if err := j.Close(); !errors.Is(err, store.ErrDatabaseGone) {
				t.Fatalf("journal close = %v, want the record reported unwritten", err)
			}
			if how == "replaced" {
				// The new file got nothing of ours.
				fresh := openTest(t, path, Options{})
				if n := countRows(t, fresh, "1"); n != 0 {
					t.Fatalf("%d messages written into the replacement file", n)
				}
			}
		})
	}
}

// TestDatabaseFilesArePrivate: swarm.db and its WAL are 0600 even under
// umask 022, and an existing world-readable file is tightened.
func TestDatabaseFilesArePrivate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "swarm.db")
	db := openTest(t, path, Options{Agents: testAgents})
	if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
	}
	old := filepath.Join(dir, "old.db")
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o644); err != nil {
		t.Fatal(err)
	}
	openTest(t, old, Options{})
	if fi, _ := os.Stat(old); fi.Mode().Perm() != 0o600 {
		t.Errorf("existing 0644 database left at %v", fi.Mode().Perm())
	}
}
