package logs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is a fixed clock; archive names depend only on the time passed in.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.UTC)

func newStore(t testing.TB, keep int, maxAge time.Duration) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	return New(dir, keep, maxAge, zaptest.NewLogger(t)), dir
}

// attempt is one attempt's text as the backend writes it.
func attempt(id string, seq int, body string) string {
	return "=== swarmd session " + id + " seq " + strconv.Itoa(seq) + " started 2025-03-04T05:06:07Z ===\n" +
		body + "=== swarmd session " + id + " seq " + strconv.Itoa(seq) + " ended 2025-03-04T05:07:07Z outcome success: exit 0 ===\n"
}

// writeLogs writes files into logs/<agent>/ and returns them for comparison.
func writeLogs(t testing.TB, s *Store, agent string, files map[string]string) map[string]string {
	t.Helper()
	if err := os.MkdirAll(s.LogDir(agent), 0o750); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(s.LogDir(agent), name), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

func appendFile(t testing.TB, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// readArchive returns every entry of a tar.gz by name.
func readArchive(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(zr)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, h.Name, err)
		}
		got[h.Name] = string(b)
	}
}

// dirNames lists a directory's entries; a missing directory is empty.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// failAfter returns a writer that accepts n bytes then fails like a full disk.
type failAfter struct {
	w io.Writer
	n int
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k, _ := f.w.Write(p[:f.n])
		f.n = 0
		return k, errNoSpace
	}
	f.n -= len(p)
	return f.w.Write(p)
}

// errNoSpace stands in for ENOSPC; the test checks it comes back wrapped.
var errNoSpace = errors.New("no space left on device")

// syncBuffer is a bytes.Buffer Follow may write while the test reads it;
// every write signals changed.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the buffer holds exactly want.
func (b *syncBuffer) waitFor(t testing.TB, want string) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		got := b.String()
		if got == want {
			return
		}
		if len(got) > len(want) {
			t.Fatalf("follow output overshot:\n got %q\nwant %q", got, want)
		}
		select {
		case <-b.changed:
		case <-deadline.C:
			t.Fatalf("follow output after 10s:\n got %q\nwant %q", got, want)
		}
	}
}
