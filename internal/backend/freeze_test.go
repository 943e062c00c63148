package backend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCancelThawsFrozenSession: a frozen session would keep its cancel
// signal pending for ever; Cancel thaws it, so the CLI's own SIGTERM
// handling runs (its trap writes a file) and the session ends.
func TestCancelThawsFrozenSession(t *testing.T) {
	sp := spec(t)
	trapped := filepath.Join(sp.Dir, "trapped")
	c := newCommand(t, CommandConfig{Command: "/bin/sh", Args: []string{"-c",
		`trap 'echo yes > ` + trapped + `; exit 7' TERM; echo ready; while :; do sleep 0.05; done`}})
	s := start(t, c, sp)
	waitFor(t, "ready", func() bool {
		b, _ := os.ReadFile(sp.LogPath)
		return strings.Contains(string(b), "ready")
	})
	f, ok := s.(interface {
		Freeze() (int, error)
		Thaw() (int, error)
	})
	if !ok {
		t.Fatal("a backend session cannot be frozen")
	}
	n, err := f.Freeze()
	if err != nil || n < 1 {
		t.Fatalf("Freeze = %d, %v", n, err)
	}
	if err := s.Cancel(); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	r := wait(t, s)
	if r.ExitCode != 7 {
		t.Fatalf("result %+v; want the trap's exit 7", r)
	}
	if b, err := os.ReadFile(trapped); err != nil || strings.TrimSpace(string(b)) != "yes" {
		t.Fatalf("the TERM trap did not run: %v", err)
	}
	if n, err := f.Freeze(); n != 0 || err != nil {
		t.Fatalf("Freeze after the end = %d, %v; want 0, nil", n, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
