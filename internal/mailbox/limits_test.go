package mailbox

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/store"
)

// The daemon's body limit binds another process that opens the file with no
// limit of its own (`swarmd mail` in a session); one that brings its own
// (the operator's CLI, which read the config) keeps it.
func TestRecordedLimitsBindOtherOpeners(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	if db := openTest(t, path, Options{}); db.maxBody != DefaultMaxBodyBytes {
		t.Fatalf("nothing recorded: limit %d, want the default %d", db.maxBody, DefaultMaxBodyBytes)
	}
	daemon := openTest(t, path, Options{MaxBodyBytes: 100})
	if err := daemon.RecordLimits(ctx); err != nil {
		t.Fatal(err)
	}
	session := openTest(t, path, Options{})
	_, err := session.Send(ctx, Draft{From: "alice", To: Operator, Body: strings.Repeat("x", 101)})
	var ve *store.ValidationError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &ve) || ve.Msg != "message body is 101 bytes, over the 100-byte limit (mailbox.max_body)" {
		t.Fatalf("101 bytes from a session: %v, want refused at the recorded 100", err)
	}
	if _, err := session.Send(ctx, Draft{From: "alice", To: Operator, Body: strings.Repeat("x", 100)}); err != nil {
		t.Fatalf("100 bytes: %v", err)
	}
	own := openTest(t, path, Options{MaxBodyBytes: 1000})
	if _, err := own.Send(ctx, Draft{From: Operator, To: "alice", Body: strings.Repeat("x", 500)}); err != nil {
		t.Fatalf("an opener's own limit: %v", err)
	}
	// A later daemon with another limit replaces the record.
	if err := own.RecordLimits(ctx); err != nil {
		t.Fatal(err)
	}
	if db := openTest(t, path, Options{}); db.maxBody != 1000 {
		t.Errorf("after a second record: limit %d, want 1000", db.maxBody)
	}
}
