package view

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/logs"
)

// collector records what a follower writes, session by session.
type collector struct {
	mu       sync.Mutex
	sessions []uint32
	text     strings.Builder
	changed  chan struct{}
}

func newCollector() *collector { return &collector{changed: make(chan struct{}, 1)} }

func (c *collector) open(seq uint32) (io.WriteCloser, error) {
	c.mu.Lock()
	c.sessions = append(c.sessions, seq)
	c.mu.Unlock()
	c.poke()
	return nopCloser{writerFunc(func(p []byte) (int, error) {
		c.mu.Lock()
		c.text.Write(p)
		c.mu.Unlock()
		c.poke()
		return len(p), nil
	})}, nil
}

func (c *collector) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *collector) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		got := c.text.String()
		c.mu.Unlock()
		if strings.HasSuffix(got, want) {
			return
		}
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatalf("log %q never ended with %q", got, want)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestFollowMovesToTheNextSession: a followed agent's log starts at the
// tail of its latest session, grows as the session writes, and carries on
// into the next session when the agent starts one, losing nothing that the
// first one wrote before it ended.
func TestFollowMovesToTheNextSession(t *testing.T) {
	store := logs.New(t.TempDir(), 0, 0, nil)
	var current atomic.Uint32
	current.Store(2)
	appendFile(t, store.LogPath("alice", 1), "old session\n")
	appendFile(t, store.LogPath("alice", 2), strings.Repeat("x", 100)+"\nline two\n")
	f := &LogFollower{Store: store, Current: func(string) (uint32, bool) { return current.Load(), true }, Poll: 5 * time.Millisecond}

	ctx, cancel := context.WithCancel(context.Background())
	c := newCollector()
	done := make(chan error, 1)
	go func() { done <- f.Follow(ctx, LogRequest{Agent: "alice", Tail: 20, Follow: true}, c.open) }()
	c.waitFor(t, "line two\n")
	appendFile(t, store.LogPath("alice", 2), "line three\n")
	c.waitFor(t, "line three\n")
	// The session's last words and the next session's first land together.
	appendFile(t, store.LogPath("alice", 2), "last words\n")
	appendFile(t, store.LogPath("alice", 3), "session three\n")
	current.Store(3)
	c.waitFor(t, "session three\n")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if got, want := c.text.String(), "line two\nline three\nlast words\nsession three\n"; got != want {
		t.Fatalf("followed %q, want %q", got, want)
	}
	if len(c.sessions) != 2 || c.sessions[0] != 2 || c.sessions[1] != 3 {
		t.Fatalf("sessions %v, want [2 3]", c.sessions)
	}
}

// TestFollowArchivedAndMissing: a session only in an archive is read from
// it; an agent with no session is ErrNoLog unless followed.
func TestFollowArchivedAndMissing(t *testing.T) {
	dir := t.TempDir()
	store := logs.New(dir, 0, 0, nil)
	f := &LogFollower{Store: store, Current: func(string) (uint32, bool) { return 0, false }}
	if err := f.Follow(context.Background(), LogRequest{Agent: "bob"}, newCollector().open); !errors.Is(err, ErrNoLog) {
		t.Fatalf("no sessions: %v", err)
	}
	appendFile(t, store.LogPath("bob", 1), "first\nsecond\nthird\n")
	if _, err := store.Archive(context.Background(), "bob", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(store.LogPath("bob", 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("not archived: %v", err)
	}
	c := newCollector()
	if err := f.Follow(context.Background(), LogRequest{Agent: "bob", Tail: 10}, c.open); err != nil {
		t.Fatal(err)
	}
	if got := c.text.String(); got != "third\n" {
		t.Fatalf("archived tail %q", got)
	}
}
