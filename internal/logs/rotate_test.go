package logs

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// A running agent's settled sessions are archived every N, and only those:
// the session after the last settled one (its prompt written already) stays.
func TestRotationArchivesEveryNSettledSessions(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	files := map[string]string{}
	for seq := 1; seq <= 7; seq++ {
		n := strconv.Itoa(seq)
		files[n+".log"] = attempt("s"+n, seq, "output of "+n+"\n")
		files[n+".prompt.md"] = "prompt " + n + "\n"
	}
	files["8.prompt.md"] = "the next session's prompt\n"
	writeLogs(t, s, "alice", files)
	r := s.NewRotation(3)

	r.Settled("alice", 1)
	r.Settled("alice", 2)
	r.rotate(context.Background())
	if archives := dirNames(t, s.ArchiveDir("alice")); len(archives) != 0 {
		t.Fatalf("archived after 2 of 3 sessions: %v", archives)
	}
	r.Settled("alice", 3)
	r.rotate(context.Background())
	archives := dirNames(t, s.ArchiveDir("alice"))
	if len(archives) != 1 {
		t.Fatalf("archives after 3 settled sessions: %v, want 1", archives)
	}
	got := readArchive(t, filepath.Join(s.ArchiveDir("alice"), archives[0]))
	want := []string{"1.log", "1.prompt.md", "2.log", "2.prompt.md", "3.log", "3.prompt.md"}
	if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, want) {
		t.Fatalf("first archive holds %v, want %v", names, want)
	}
	for _, name := range want {
		if got[name] != files[name] {
			t.Errorf("%s archived as %q, want %q", name, got[name], files[name])
		}
	}

	// The count starts again; an agent of its own counts apart.
	r.Settled("bob", 1)
	for seq := uint32(4); seq <= 6; seq++ {
		r.Settled("alice", seq)
	}
	r.rotate(context.Background())
	left := dirNames(t, s.LogDir("alice"))
	if want := []string{"7.log", "7.prompt.md", "8.prompt.md"}; !slices.Equal(left, want) {
		t.Fatalf("left in logs/alice: %v, want %v", left, want)
	}
	// Every session still reads, from its archive or its file.
	for seq := uint32(1); seq <= 7; seq++ {
		rc, _, err := s.Open("alice", seq)
		if err != nil {
			t.Fatalf("open session %d: %v", seq, err)
		}
		rc.Close()
	}
}

// Run archives in the background when woken, and returns when its context
// ends.
func TestRotationRun(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	writeLogs(t, s, "alice", map[string]string{"1.log": attempt("a", 1, "x\n"), "2.prompt.md": "next\n"})
	r := s.NewRotation(1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	r.Settled("alice", 1)
	deadline := time.Now().Add(10 * time.Second)
	for len(dirNames(t, s.ArchiveDir("alice"))) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no archive 10 s after the session settled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(s.LogDir("alice"), "2.prompt.md")); err != nil {
		t.Errorf("the next session's prompt: %v", err)
	}
	cancel()
	<-done
}

// every < 1 rotates nothing, and a nil Rotation takes calls.
func TestRotationOff(t *testing.T) {
	s, _ := newStore(t, 0, 0)
	r := s.NewRotation(0)
	r.Settled("alice", 1)
	if len(r.due) != 0 {
		t.Fatalf("due with rotation off: %v", r.due)
	}
	var none *Rotation
	none.Settled("alice", 1)
}
