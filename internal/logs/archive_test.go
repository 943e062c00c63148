package logs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func sampleLogs() map[string]string {
	return map[string]string{
		// seq 1 was retried: two attempts in one file.
		"1.log":       attempt("s-1a", 1, "working\n") + attempt("s-1b", 1, "working again\n"),
		"1.prompt.md": "# role\nfix the tests\n",
		"2.log":       attempt("s-2", 2, strings.Repeat("output line\n", 2000)),
		"2.prompt.md": "# role\nand the docs\n",
		"3.log":       "", // a session that wrote nothing
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	s, state := newStore(t, 0, 0)
	want := writeLogs(t, s, "alice", sampleLogs())

	now := time.Date(2025, 3, 4, 6, 6, 7, 890_123_456, time.FixedZone("CET", 3600))
	path, err := s.Archive(context.Background(), "alice", now)
	if err != nil {
		t.Fatal(err)
	}
	wantPath := filepath.Join(state, "archive", "alice", "alice-20250304T050607.890Z.tar.gz")
	if path != wantPath {
		t.Fatalf("archive path %s, want %s (UTC, milliseconds)", path, wantPath)
	}
	if got := readArchive(t, path); !maps.Equal(got, want) {
		t.Fatalf("archive holds %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	if left := dirNames(t, s.LogDir("alice")); len(left) != 0 {
		t.Fatalf("originals left in logs/alice: %v", left)
	}
	if got := dirNames(t, s.ArchiveDir("alice")); len(got) != 1 || got[0] != filepath.Base(wantPath) {
		t.Fatalf("archive dir holds %v, want only the archive", got)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o640 {
		t.Errorf("archive mode %o, want 640", perm)
	}

	// Nothing new to archive: no second archive.
	again, err := s.Archive(context.Background(), "alice", now.Add(time.Hour))
	if err != nil || again != "" {
		t.Fatalf("second Archive = %q, %v; want \"\", nil", again, err)
	}
	if got := dirNames(t, s.ArchiveDir("alice")); len(got) != 1 {
		t.Fatalf("archive dir holds %v after an empty Archive", got)
	}
}

func TestArchiveNothing(t *testing.T) {
	s, state := newStore(t, 0, 0)
	if path, err := s.Archive(context.Background(), "alice", t0); err != nil || path != "" {
		t.Fatalf("no log dir: Archive = %q, %v", path, err)
	}
	if err := os.MkdirAll(s.LogDir("alice"), 0o750); err != nil {
		t.Fatal(err)
	}
	if path, err := s.Archive(context.Background(), "alice", t0); err != nil || path != "" {
		t.Fatalf("empty log dir: Archive = %q, %v", path, err)
	}
	if got := dirNames(t, filepath.Join(state, "archive")); len(got) != 0 {
		t.Fatalf("archive/ holds %v after archiving nothing", got)
	}
}

func TestArchiveRejectsBadAgentName(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	for _, name := range []string{"", "../etc", "Alice", "a/b"} {
		if _, err := s.Archive(context.Background(), name, t0); !errors.Is(err, ErrBadName) {
			t.Errorf("Archive(%q) = %v, want ErrBadName", name, err)
		}
	}
}

// A crash after the archive is renamed into place but before the originals
// are removed: the next Archive must lose nothing and overwrite nothing.
func TestArchiveCrashBeforeRemoval(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, 0, 0)
	orig := writeLogs(t, s, "alice", sampleLogs())

	first, packed, err := s.pack(ctx, "alice", t0, nil) // the crash: no removeOriginals
	if err != nil {
		t.Fatal(err)
	}
	if len(packed) != len(orig) {
		t.Fatalf("packed %d files, want %d", len(packed), len(orig))
	}
	if got := readArchive(t, first); !maps.Equal(got, orig) {
		t.Fatal("first archive incomplete")
	}
	firstBytes := readFile(t, first)

	// After the restart, session 2 is retried and session 4 runs.
	more := attempt("s-2b", 2, "second try\n")
	appendFile(t, s.LogPath("alice", 2), more)
	writeLogs(t, s, "alice", map[string]string{"4.log": attempt("s-4", 4, "four\n")})
	final := maps.Clone(orig)
	final["2.log"] += more
	final["4.log"] = attempt("s-4", 4, "four\n")

	second, err := s.Archive(ctx, "alice", t0) // same clock reading as the crashed run
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatalf("second archive reused the name %s", first)
	}
	if readFile(t, first) != firstBytes {
		t.Fatal("the first archive was changed")
	}
	if left := dirNames(t, s.LogDir("alice")); len(left) != 0 {
		t.Fatalf("originals left: %v", left)
	}
	if got := dirNames(t, s.ArchiveDir("alice")); len(got) != 2 {
		t.Fatalf("archive dir holds %v, want two archives and no temp file", got)
	}
	// Every file, in every version written, is in some archive.
	a, b := readArchive(t, first), readArchive(t, second)
	for name, body := range orig {
		if a[name] != body && b[name] != body {
			t.Errorf("%s as first written is in no archive", name)
		}
	}
	for name, body := range final {
		if a[name] != body && b[name] != body {
			t.Errorf("%s as last written is in no archive", name)
		}
	}
	// And Open reads the newest version.
	rc, ref, err := s.Open("alice", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != final["2.log"] || ref.Archive != second {
		t.Fatalf("Open(2) read %d bytes from %s, want the retried log from %s", len(got), ref.Archive, second)
	}
}

func TestArchiveWriteFailureKeepsOriginals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after int // bytes the disk takes before it is full
	}{
		{"at once", 0},
		{"midway", 100}, // past the gzip header, before the end
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t, 0, 0)
			orig := writeLogs(t, s, "alice", sampleLogs())
			s.wrapTemp = func(w io.Writer) io.Writer { return &failAfter{w: w, n: tc.after} }

			path, err := s.Archive(context.Background(), "alice", t0)
			if !errors.Is(err, errNoSpace) {
				t.Fatalf("Archive error %v, want the write error", err)
			}
			if path != "" {
				t.Errorf("Archive returned path %q with a failed write", path)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "logs: archive alice: write ") || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line starting with the operation", msg)
			}
			for name, body := range orig {
				if got := readFile(t, filepath.Join(s.LogDir("alice"), name)); got != body {
					t.Errorf("%s changed by a failed archive", name)
				}
			}
			if got := dirNames(t, s.ArchiveDir("alice")); len(got) != 0 {
				t.Fatalf("archive dir holds %v after a failed write, want nothing", got)
			}

			// Space freed: the next Archive succeeds with everything.
			s.wrapTemp = nil
			path, err = s.Archive(context.Background(), "alice", t0)
			if err != nil {
				t.Fatal(err)
			}
			if got := readArchive(t, path); !maps.Equal(got, orig) {
				t.Fatal("archive after recovery incomplete")
			}
		})
	}
}

func TestArchiveCancelledKeepsOriginals(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	orig := writeLogs(t, s, "alice", sampleLogs())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Archive(ctx, "alice", t0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Archive with a cancelled context = %v", err)
	}
	if got := dirNames(t, s.LogDir("alice")); len(got) != len(orig) {
		t.Fatalf("logs/alice holds %v, want the %d originals", got, len(orig))
	}
	if got := dirNames(t, s.ArchiveDir("alice")); len(got) != 0 {
		t.Fatalf("archive dir holds %v after a cancelled archive", got)
	}
}

// A log appended to while it is archived keeps what was appended: the file
// stays for the next archive, and the caller hears about it.
func TestArchiveKeepsLogWrittenDuringArchive(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	orig := writeLogs(t, s, "alice", sampleLogs())
	late := "late output\n"
	appended := false
	s.wrapTemp = func(w io.Writer) io.Writer {
		return writerFunc(func(p []byte) (int, error) {
			if !appended { // a session still writing session 1's log
				appended = true
				appendFile(t, s.LogPath("alice", 1), late)
			}
			return w.Write(p)
		})
	}
	path, err := s.Archive(context.Background(), "alice", t0)
	if !errors.Is(err, ErrChanged) || path == "" {
		t.Fatalf("Archive = %q, %v; want the archive and ErrChanged", path, err)
	}
	if !strings.Contains(err.Error(), "1.log") {
		t.Errorf("error %q does not name the file", err)
	}
	if got := readArchive(t, path); !maps.Equal(got, orig) {
		t.Fatal("archive does not hold the logs as they were")
	}
	if got := dirNames(t, s.LogDir("alice")); !slices.Equal(got, []string{"1.log"}) {
		t.Fatalf("logs/alice holds %v, want only the changed 1.log", got)
	}
	if got := readFile(t, s.LogPath("alice", 1)); got != orig["1.log"]+late {
		t.Fatal("changed log lost data")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestStartupRemovesTempFiles(t *testing.T) {
	s, state := newStore(t, 0, 0)
	if err := s.Startup(t0); err != nil {
		t.Fatalf("Startup with no archive dir: %v", err)
	}
	writeLogs(t, s, "alice", sampleLogs())
	real, err := s.Archive(context.Background(), "alice", t0)
	if err != nil {
		t.Fatal(err)
	}
	// What a crash mid-write leaves, next to files that are not ours.
	junk := map[string]string{
		filepath.Join(state, "archive", "alice", ".tmp-alice-123.tar.gz"): "\x1f\x8b partial",
		filepath.Join(state, "archive", "alice", "notes.txt"):             "mine",
		filepath.Join(state, "archive", "bob", ".tmp-bob-9.tar.gz"):       "",
		filepath.Join(state, "archive", "Not_An_Agent", ".tmp-x"):         "",
	}
	for path, body := range junk {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}

	if err := s.Startup(t0); err != nil {
		t.Fatal(err)
	}
	if got, want := dirNames(t, s.ArchiveDir("alice")), []string{filepath.Base(real), "notes.txt"}; !slices.Equal(got, want) {
		t.Errorf("archive/alice holds %v, want %v", got, want)
	}
	if got := dirNames(t, s.ArchiveDir("bob")); len(got) != 0 {
		t.Errorf("archive/bob holds %v, want nothing", got)
	}
	if got := dirNames(t, filepath.Join(state, "archive", "Not_An_Agent")); len(got) != 1 {
		t.Errorf("a directory that is not an agent's was touched: %v", got)
	}
}

func TestStartupPrunes(t *testing.T) {
	s, _ := newStore(t, 0, 24*time.Hour)
	writeLogs(t, s, "alice", map[string]string{"1.log": "x"})
	if _, err := s.Archive(context.Background(), "alice", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Startup(t0.Add(48 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, s.ArchiveDir("alice")); len(got) != 0 {
		t.Fatalf("Startup kept an archive past max_age: %v", got)
	}
}

// archiveAt makes one archive holding <seq>.log at time at.
func archiveAt(t testing.TB, s *Store, agent string, seq int, at time.Time) string {
	t.Helper()
	writeLogs(t, s, agent, map[string]string{strconv.Itoa(seq) + ".log": attempt("s", seq, "x\n")})
	path, err := s.Archive(context.Background(), agent, at)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(path)
}

func TestPruneByCount(t *testing.T) {
	s, state := newStore(t, 10, 0)
	var names []string
	for i := range 5 {
		names = append(names, archiveAt(t, s, "alice", i+1, t0.Add(time.Duration(i)*time.Hour)))
	}
	notOurs := filepath.Join(s.ArchiveDir("alice"), "bob-20200101T000000.000Z.tar.gz")
	if err := os.WriteFile(notOurs, nil, 0o640); err != nil {
		t.Fatal(err)
	}

	keep3 := New(state, 3, 0, nil)
	removed, err := keep3.Prune("alice", t0.Add(5*time.Hour))
	if err != nil || removed != 2 {
		t.Fatalf("Prune = %d, %v; want 2 removed", removed, err)
	}
	want := append(slices.Clone(names[2:]), filepath.Base(notOurs))
	slices.Sort(want)
	if got := dirNames(t, s.ArchiveDir("alice")); !slices.Equal(got, want) {
		t.Fatalf("after Prune: %v, want %v", got, want)
	}

	// Archive prunes too, and keeps the archive it just wrote.
	newest := archiveAt(t, keep3, "alice", 6, t0.Add(6*time.Hour))
	want = []string{names[3], names[4], newest, filepath.Base(notOurs)}
	slices.Sort(want)
	if got := dirNames(t, s.ArchiveDir("alice")); !slices.Equal(got, want) {
		t.Fatalf("after Archive: %v, want %v", got, want)
	}
}

func TestPruneByAge(t *testing.T) {
	s, state := newStore(t, 0, 1000*time.Hour)
	now := t0.Add(100 * time.Hour)
	archiveAt(t, s, "alice", 1, now.Add(-72*time.Hour))
	archiveAt(t, s, "alice", 2, now.Add(-25*time.Hour))
	edge := archiveAt(t, s, "alice", 3, now.Add(-24*time.Hour)) // exactly max_age: not older
	fresh := archiveAt(t, s, "alice", 4, now.Add(-time.Hour))

	day := New(state, 0, 24*time.Hour, nil)
	removed, err := day.Prune("alice", now)
	if err != nil || removed != 2 {
		t.Fatalf("Prune = %d, %v; want 2 removed", removed, err)
	}
	if got := dirNames(t, s.ArchiveDir("alice")); !slices.Equal(got, []string{edge, fresh}) {
		t.Fatalf("after Prune: %v, want %v", got, []string{edge, fresh})
	}
	if removed, err := day.Prune("alice", now); err != nil || removed != 0 {
		t.Fatalf("second Prune = %d, %v; want nothing to do", removed, err)
	}
}

// A clock that steps back must not make the archive just written look older
// than the others, or keep=1 would prune it at once.
func TestArchiveNamesStayOrderedWhenClockStepsBack(t *testing.T) {
	s, _ := newStore(t, 1, 0)
	first := archiveAt(t, s, "alice", 1, t0)
	second := archiveAt(t, s, "alice", 2, t0.Add(-time.Hour))
	if second <= first {
		t.Fatalf("second archive %s does not sort after %s", second, first)
	}
	if got := dirNames(t, s.ArchiveDir("alice")); !slices.Equal(got, []string{second}) {
		t.Fatalf("keep=1 kept %v, want the newest archive %s", got, second)
	}
}

// TestArchiveManyAtOnce: agents archived at the same time, as at a daemon's
// stop, each get one complete archive and lose their
// originals.
func TestArchiveManyAtOnce(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	const agents = 30
	want := make([]map[string]string, agents)
	for i := range agents {
		want[i] = writeLogs(t, s, fmt.Sprintf("a%d", i), sampleLogs())
	}
	paths := make([]string, agents)
	var wg sync.WaitGroup
	for i := range agents {
		wg.Go(func() {
			var err error
			if paths[i], err = s.Archive(context.Background(), fmt.Sprintf("a%d", i), t0); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range agents {
		agent := fmt.Sprintf("a%d", i)
		if got := readArchive(t, paths[i]); !maps.Equal(got, want[i]) {
			t.Errorf("%s: archive holds %v, want %v", agent, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want[i])))
		}
		if left := dirNames(t, s.LogDir(agent)); len(left) != 0 {
			t.Errorf("%s: originals left: %v", agent, left)
		}
		if got := dirNames(t, s.ArchiveDir(agent)); len(got) != 1 {
			t.Errorf("%s: archive dir holds %v, want one archive", agent, got)
		}
	}
}

// TestPrepareArchive: the archive directory made ahead of time is where
// the next Archive goes; a name that is not an agent's is refused.
func TestPrepareArchive(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	if err := s.PrepareArchive("alice"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.ArchiveDir("alice")); err != nil || !fi.IsDir() {
		t.Fatalf("archive dir after PrepareArchive: %v", err)
	}
	if err := s.PrepareArchive("alice"); err != nil {
		t.Fatalf("again: %v", err)
	}
	want := writeLogs(t, s, "alice", sampleLogs())
	path, err := s.Archive(context.Background(), "alice", t0)
	if err != nil || filepath.Dir(path) != s.ArchiveDir("alice") {
		t.Fatalf("Archive = %q, %v", path, err)
	}
	if got := readArchive(t, path); !maps.Equal(got, want) {
		t.Fatalf("archive holds %v", slices.Sorted(maps.Keys(got)))
	}
	if err := s.PrepareArchive("../x"); !errors.Is(err, ErrBadName) {
		t.Fatalf("PrepareArchive(../x) = %v, want ErrBadName", err)
	}
}

// TestArchivesDoNotFlushOthersDirtyPages: archives made at once (a
// daemon's stop) sync their own files, not the file system: a large
// unrelated file written just before, and not synced, stays dirty (a
// syncfs would write it out, making the stop wait for someone else's
// data). Read from the kernel's own count of dirty pages.
func TestArchivesDoNotFlushOthersDirtyPages(t *testing.T) {
	s, state := newStore(t, 0, 0)
	const agents = 20
	for i := range agents {
		writeLogs(t, s, fmt.Sprintf("a%d", i), sampleLogs())
	}
	before := dirtyKB(t)
	const unrelated = 128 << 20
	f, err := os.Create(filepath.Join(state, "..", "unrelated"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); os.Remove(f.Name()) })
	chunk := make([]byte, 1<<20)
	for range unrelated / len(chunk) {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	written := dirtyKB(t)
	if written-before < unrelated/1024/2 {
		t.Skipf("this file system keeps no dirty pages (tmpfs?): Dirty %d kB → %d kB", before, written)
	}
	var wg sync.WaitGroup
	for i := range agents {
		wg.Go(func() {
			if _, err := s.Archive(context.Background(), fmt.Sprintf("a%d", i), t0); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// The machine's other writers move the count (the kernel writes
	// back their pages as they age: 66 MB went in half a second while a
	// whole test suite ran beside it); a syncfs would take it down by the
	// whole file, and by everything else dirty on the file system.
	if after := dirtyKB(t); after < written-unrelated/1024*9/10 {
		t.Errorf("archiving took the dirty pages from %d kB to %d kB: it flushed the unrelated file's %d MB", written, after, unrelated>>20)
	}
}

// dirtyKB is the kernel's count of dirty page cache (Dirty in /proc/meminfo).
func dirtyKB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Skip(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Dirty:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no Dirty in /proc/meminfo")
	return 0
}

// ArchiveBefore takes the sessions before seq, logs and prompts, and leaves
// the rest (a session of this run, a file that is not a session's) where it
// is; every session still reads back, archived or live.
func TestArchiveBefore(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	files := sampleLogs()
	files["notes.txt"] = "not a session's\n"
	want := writeLogs(t, s, "alice", files)
	if agents, err := s.LogAgents(); err != nil || !slices.Equal(agents, []string{"alice"}) {
		t.Fatalf("LogAgents = %v, %v; want [alice]", agents, err)
	}
	path, err := s.ArchiveBefore(context.Background(), "alice", 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := readArchive(t, path)
	if !slices.Equal(slices.Sorted(maps.Keys(got)), []string{"1.log", "1.prompt.md"}) {
		t.Fatalf("archive holds %v, want session 1's log and prompt", slices.Sorted(maps.Keys(got)))
	}
	if left := dirNames(t, s.LogDir("alice")); !slices.Equal(left, []string{"2.log", "2.prompt.md", "3.log", "notes.txt"}) {
		t.Fatalf("left in logs/alice: %v", left)
	}
	for seq := uint32(1); seq <= 3; seq++ {
		rc, _, err := s.Open("alice", seq)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if name := strconv.Itoa(int(seq)) + ".log"; string(b) != want[name] {
			t.Errorf("session %d reads %d bytes, want %d", seq, len(b), len(want[name]))
		}
	}
	// Nothing before seq 1: no archive.
	if path, err := s.ArchiveBefore(context.Background(), "alice", 1, time.Now()); err != nil || path != "" {
		t.Fatalf("ArchiveBefore(1) = %q, %v; want nothing", path, err)
	}
}
