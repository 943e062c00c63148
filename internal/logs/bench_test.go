package logs

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchSession is a session log of about 256 KiB that reads like agent
// output: varied lines, so gzip does real work.
func benchSession(seq int) string {
	var b strings.Builder
	b.WriteString(attempt("s", seq, ""))
	for i := 0; b.Len() < 256<<10; i++ {
		fmt.Fprintf(&b, "[%05d] tool call edit_file path=internal/pkg%d/file%d.go lines=%d-%d ok\n", i, i%17, i%101, i, i*3)
	}
	return b.String()
}

func benchLogs(n int) map[string]string {
	files := make(map[string]string, 2*n)
	for seq := 1; seq <= n; seq++ {
		files[strconv.Itoa(seq)+".log"] = benchSession(seq)
		files[strconv.Itoa(seq)+".prompt.md"] = strings.Repeat("# role\nfix the failing tests in the worktree\n", 50)
	}
	return files
}

// BenchmarkArchive is one agent stopping: 10 sessions (~2.6 MB of logs and
// prompts) packed, fsynced, renamed, originals removed, archives pruned.
func BenchmarkArchive(b *testing.B) {
	s := New(b.TempDir(), 1000, 0, nil) // no zaptest: benchmarks always print their logs
	files := benchLogs(10)
	var size int64
	for _, body := range files {
		size += int64(len(body))
	}
	b.SetBytes(size)
	b.ReportAllocs()
	now := t0
	for b.Loop() {
		b.StopTimer()
		writeLogs(b, s, "alice", files)
		now = now.Add(time.Second)
		b.StartTimer()
		if _, err := s.Archive(context.Background(), "alice", now); err != nil {
			b.Fatal(err)
		}
	}
}

// benchArchives makes 10 archives of 10 sessions each (seqs 1..100).
func benchArchives(b *testing.B) *Store {
	s := New(b.TempDir(), 0, 0, nil)
	for a := range 10 {
		files := make(map[string]string)
		for i := 1; i <= 10; i++ {
			files[strconv.Itoa(a*10+i)+".log"] = benchSession(i)
		}
		writeLogs(b, s, "alice", files)
		if _, err := s.Archive(context.Background(), "alice", t0.Add(time.Duration(a)*time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkOpenArchived reads a whole session out of the oldest of 10
// archives: the worst case, since Open searches newest first.
func BenchmarkOpenArchived(b *testing.B) {
	s := benchArchives(b)
	b.ReportAllocs()
	for b.Loop() {
		rc, _, err := s.Open("alice", 5)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			b.Fatal(err)
		}
		rc.Close()
	}
}

// BenchmarkSessions lists 100 sessions spread over 10 archives (what
// `swarmd logs AGENT` does before it picks one).
func BenchmarkSessions(b *testing.B) {
	s := benchArchives(b)
	b.ReportAllocs()
	for b.Loop() {
		refs, err := s.Sessions("alice")
		if err != nil {
			b.Fatal(err)
		}
		if len(refs) != 100 {
			b.Fatalf("%d sessions", len(refs))
		}
	}
}

// BenchmarkArchiveStop is a daemon's stop: 200 agents, each with one short
// session's log and prompt, archived at once into a fresh state dir (every
// agent's archive directory new). One op is the wall time until all are
// archived.
//
//	go test -run '^$' -bench ArchiveStop -benchtime 5x ./internal/logs
func BenchmarkArchiveStop(b *testing.B) {
	const agents = 200
	files := map[string]string{"1.log": benchSession(1)[:4<<10], "1.prompt.md": strings.Repeat("# role\n", 300)}
	for b.Loop() {
		b.StopTimer()
		s := New(b.TempDir(), 0, 0, nil)
		for i := range agents {
			writeLogs(b, s, "a"+strconv.Itoa(i), files)
		}
		b.StartTimer()
		var wg sync.WaitGroup
		for i := range agents {
			wg.Go(func() {
				if _, err := s.Archive(context.Background(), "a"+strconv.Itoa(i), t0); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}
