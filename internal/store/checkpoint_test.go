package store

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A checkpoint waits for writes to pause for checkpointEvery; while they go
// on, it waits no longer than checkpointAtMost after the first.
func TestCheckpointGathersWrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes time.Duration // how long writes go on, one every 100 ms
		want   time.Duration
	}{
		{"one write", 0, checkpointEvery},
		{"a burst", 600 * time.Millisecond, 600*time.Millisecond + checkpointEvery},
		{"steady writes", 10 * time.Second, checkpointAtMost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				written := make(chan struct{}, 1)
				go func() {
					tick := time.NewTicker(100 * time.Millisecond)
					defer tick.Stop()
					for end := time.Now().Add(tc.writes); time.Now().Before(end); {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						select {
						case written <- struct{}{}:
						default:
						}
					}
				}()
				pace := time.NewTimer(time.Hour)
				pace.Stop()
				start := time.Now()
				if !gather(ctx, pace, written) {
					t.Fatal("gather gave up")
				}
				// A write at the very end of a burst may be gathered by one
				// more pause: allow one checkpointEvery of slack.
				if got := time.Since(start); got < tc.want || got > tc.want+checkpointEvery {
					t.Fatalf("checkpointed %s after the first write, want %s", got, tc.want)
				}
			})
		})
	}
}

// The WAL shrinks back after a backlog: a reader that held checkpoints
// back (a long dashboard read, a backup) let it grow past walSizeLimit, and
// once a checkpoint gets through the next write truncates it to the limit.
// Without journal_size_limit the file kept its high-water size for good
// (46–57 MB in a long run), though only its head is ever used again.
func TestWALShrinksAfterABacklog(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{})
	wal := func() int64 {
		fi, err := os.Stat(db.path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	reader, err := db.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM messages`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", 64<<10)
	for wal() < 2*walSizeLimit {
		if _, err := db.SQL().ExecContext(ctx, `INSERT INTO messages (id, thread_id, sender, recipient, body, created_at)
			VALUES ((SELECT IFNULL(MAX(id), 0) + 1 FROM messages), 0, 'a', 'b', ?, 'now')`, body); err != nil {
			t.Fatal(err)
		}
	}
	reader.Rollback()
	var busy, frames, done int
	if err := db.read.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done); err != nil || frames != done {
		t.Fatalf("checkpoint: %v, %d of %d frames", err, done, frames)
	}
	if _, err := db.SQL().ExecContext(ctx, `DELETE FROM messages`); err != nil {
		t.Fatal(err)
	}
	if got := wal(); got > walSizeLimit {
		t.Errorf("the WAL is %d bytes after a checkpoint and a write, want at most %d", got, walSizeLimit)
	}
}
