package logs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func readSession(t *testing.T, s *Store, agent string, seq uint32) (string, SessionRef) {
	t.Helper()
	rc, ref, err := s.Open(agent, seq)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), ref
}

func TestSessionsAndOpenAcrossLiveAndArchived(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, 0, 0)
	// Archive A: sessions 1 and 2. Archive B: 2 again (a restart reused the
	// seq) and 3. Live: 4 and 5.
	v1 := map[string]string{
		"1.log": attempt("a1", 1, "one\n"), "1.prompt.md": "p1",
		"2.log": attempt("a2", 2, "two, first run\n"),
	}
	writeLogs(t, s, "alice", v1)
	archA, err := s.Archive(ctx, "alice", t0)
	if err != nil {
		t.Fatal(err)
	}
	v2 := map[string]string{"2.log": attempt("b2", 2, "two, second run\n"), "3.log": attempt("b3", 3, "three\n")}
	writeLogs(t, s, "alice", v2)
	archB, err := s.Archive(ctx, "alice", t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]string{"4.log": attempt("c4", 4, "four\n"), "5.log": attempt("c5", 5, "fi"), "5.prompt.md": "p5", "notes": "x"}
	writeLogs(t, s, "alice", live)

	refs, err := s.Sessions("alice")
	if err != nil {
		t.Fatal(err)
	}
	want := []SessionRef{
		{Seq: 1, Archive: archA, Size: int64(len(v1["1.log"]))},
		{Seq: 2, Archive: archB, Size: int64(len(v2["2.log"]))},
		{Seq: 3, Archive: archB, Size: int64(len(v2["3.log"]))},
		{Seq: 4, Live: true, Size: int64(len(live["4.log"]))},
		{Seq: 5, Live: true, Size: int64(len(live["5.log"]))},
	}
	if !slices.Equal(refs, want) {
		t.Fatalf("Sessions:\n got %+v\nwant %+v", refs, want)
	}

	for _, tc := range []struct {
		seq  uint32
		want string
	}{
		{1, v1["1.log"]}, {2, v2["2.log"]}, {3, v2["3.log"]}, {4, live["4.log"]}, {5, live["5.log"]},
	} {
		got, ref := readSession(t, s, "alice", tc.seq)
		if got != tc.want {
			t.Errorf("Open(%d) = %q, want %q", tc.seq, got, tc.want)
		}
		if ref != want[tc.seq-1] {
			t.Errorf("Open(%d) ref %+v, want %+v", tc.seq, ref, want[tc.seq-1])
		}
	}

	_, _, err = s.Open("alice", 9)
	var nse *NoSessionError
	if !errors.Is(err, ErrNoSession) || !errors.As(err, &nse) {
		t.Fatalf("Open(9) = %v, want a NoSessionError", err)
	}
	if !slices.Equal(nse.Live, []uint32{4, 5}) || !slices.Equal(nse.Archived, []uint32{1, 2, 3}) {
		t.Errorf("NoSessionError lists live %v archived %v", nse.Live, nse.Archived)
	}
	if msg := err.Error(); msg != "logs: open alice: agent alice has no session 9 (sessions: live 4-5; archived 1-3)" {
		t.Errorf("error message %q", msg)
	}
}

func TestOpenUnknownAgent(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	refs, err := s.Sessions("bob")
	if err != nil || len(refs) != 0 {
		t.Fatalf("Sessions(bob) = %v, %v; want none", refs, err)
	}
	_, _, err = s.Open("bob", 1)
	if !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "no session logs at all") {
		t.Fatalf("Open(bob, 1) = %v", err)
	}
	if _, _, err := s.Open("../bob", 1); !errors.Is(err, ErrBadName) {
		t.Fatalf("Open(../bob) = %v, want ErrBadName", err)
	}
}

// A damaged archive hides nothing that older archives hold.
func TestOpenSkipsUnreadableArchive(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	body := attempt("a1", 1, "one\n")
	writeLogs(t, s, "alice", map[string]string{"1.log": body})
	good, err := s.Archive(context.Background(), "alice", t0)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(s.ArchiveDir("alice"), "alice-20300101T000000.000Z.tar.gz")
	if err := os.WriteFile(bad, []byte("not gzip"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, ref := readSession(t, s, "alice", 1)
	if got != body || ref.Archive != good {
		t.Fatalf("Open(1) = %q from %s, want the log from %s", got, ref.Archive, good)
	}
	refs, err := s.Sessions("alice")
	if err != nil || len(refs) != 1 || refs[0].Archive != good {
		t.Fatalf("Sessions = %+v, %v", refs, err)
	}
}

func startFollow(t *testing.T, s *Store, agent string, seq uint32) (*syncBuffer, context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	buf := newSyncBuffer()
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done <- s.Follow(ctx, agent, seq, buf)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return buf, cancel, done
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return within 10s")
		return nil
	}
}

func TestFollowSeesAppendsUntilCancelled(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	s.poll = 5 * time.Millisecond
	first := attempt("a", 1, "first attempt\n")
	writeLogs(t, s, "alice", map[string]string{"1.log": first})

	buf, cancel, done := startFollow(t, s, "alice", 1)
	buf.waitFor(t, first)
	second := attempt("b", 1, "second attempt\n")
	appendFile(t, s.LogPath("alice", 1), second[:20])
	buf.waitFor(t, first+second[:20])
	appendFile(t, s.LogPath("alice", 1), second[20:])
	buf.waitFor(t, first+second)

	select {
	case err := <-done:
		t.Fatalf("Follow returned %v before its context ended", err)
	default:
	}
	cancel()
	if err := waitDone(t, done); err != nil {
		t.Fatalf("Follow after cancel = %v, want nil", err)
	}
}

func TestFollowReturnsWhenArchived(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	s.poll = 5 * time.Millisecond
	first := attempt("a", 1, "output\n")
	writeLogs(t, s, "alice", map[string]string{"1.log": first})

	buf, _, done := startFollow(t, s, "alice", 1)
	buf.waitFor(t, first)
	// The last lines land just before the archive: Follow must not drop them.
	last := "last words\n"
	appendFile(t, s.LogPath("alice", 1), last)
	if _, err := s.Archive(context.Background(), "alice", t0); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, done); err != nil {
		t.Fatalf("Follow = %v, want nil once the log is archived", err)
	}
	if got := buf.String(); got != first+last {
		t.Fatalf("Follow copied %q, want %q", got, first+last)
	}
}

func TestFollowArchivedSessionCopiesAndReturns(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	body := attempt("a", 3, "done long ago\n")
	writeLogs(t, s, "alice", map[string]string{"3.log": body})
	if _, err := s.Archive(context.Background(), "alice", t0); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := s.Follow(context.Background(), "alice", 3, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != body {
		t.Fatalf("Follow copied %q, want %q", out.String(), body)
	}
	if err := s.Follow(context.Background(), "alice", 4, &out); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Follow(4) = %v, want ErrNoSession", err)
	}
}

func TestFollowReportsWriteError(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	writeLogs(t, s, "alice", map[string]string{"1.log": "x\n"})
	broken := errors.New("broken pipe")
	err := s.Follow(context.Background(), "alice", 1, writerFunc(func([]byte) (int, error) { return 0, broken }))
	if !errors.Is(err, broken) || !strings.HasPrefix(err.Error(), "logs: follow alice: session 1: write: ") {
		t.Fatalf("Follow = %v, want the write error wrapped", err)
	}
}

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []uint32
		want string
	}{
		{[]uint32{1}, "1"},
		{[]uint32{1, 2}, "1-2"},
		{[]uint32{1, 2, 3, 5, 7, 8}, "1-3, 5, 7-8"},
		{[]uint32{4294967294, 4294967295}, "4294967294-4294967295"},
	} {
		if got := ranges(tc.in); got != tc.want {
			t.Errorf("ranges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestHighestSeq: the highest seq of an agent's logs, live and archived,
// reading only the archives made at since or later; a prompt counts as its
// session's. An unreadable archive read fails it; one skipped does not.
func TestHighestSeq(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, 0, 0)
	if got, err := s.HighestSeq("alice", time.Time{}); err != nil || got != 0 {
		t.Fatalf("no logs: %d, %v", got, err)
	}
	writeLogs(t, s, "alice", map[string]string{"1.log": attempt("a1", 1, "x\n"), "2.log": attempt("a2", 2, "x\n"), "3.prompt.md": "p"})
	if _, err := s.Archive(ctx, "alice", t0); err != nil {
		t.Fatal(err)
	}
	writeLogs(t, s, "alice", map[string]string{"4.log": attempt("a4", 4, "x\n"), "5.prompt.md": "p"})
	if _, err := s.Archive(ctx, "alice", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	writeLogs(t, s, "alice", map[string]string{"6.log": attempt("a6", 6, "x\n"), "notes.txt": "9"})
	for _, c := range []struct {
		since time.Time
		want  uint32
	}{{time.Time{}, 6}, {t0.Add(time.Minute), 6}, {t0.Add(2 * time.Hour), 6}} {
		if got, err := s.HighestSeq("alice", c.since); err != nil || got != c.want {
			t.Errorf("HighestSeq(since %v) = %d, %v; want %d", c.since, got, err, c.want)
		}
	}
	if err := os.Remove(s.LogPath("alice", 6)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		since time.Time
		want  uint32
	}{{time.Time{}, 5}, {t0.Add(time.Minute), 5}, {t0.Add(2 * time.Hour), 0}} {
		if got, err := s.HighestSeq("alice", c.since); err != nil || got != c.want {
			t.Errorf("without the live log, HighestSeq(since %v) = %d, %v; want %d", c.since, got, err, c.want)
		}
	}
	arcs, err := s.listArchives("alice")
	if err != nil || len(arcs) != 2 {
		t.Fatalf("archives %v, %v", arcs, err)
	}
	if err := os.WriteFile(arcs[0].path, []byte("not gzip"), 0o640); err != nil {
		t.Fatal(err)
	}
	if got, err := s.HighestSeq("alice", t0.Add(time.Minute)); err != nil || got != 5 {
		t.Errorf("with the skipped archive damaged: %d, %v; want 5", got, err)
	}
	if _, err := s.HighestSeq("alice", time.Time{}); err == nil {
		t.Error("a damaged archive read gave no error")
	}
	names, err := s.Agents()
	if err != nil || len(names) != 1 || names[0] != "alice" {
		t.Errorf("Agents() = %v, %v; want [alice]", names, err)
	}
}
