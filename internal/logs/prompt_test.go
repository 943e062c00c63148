package logs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A prompt lands at PromptPath, in a directory WritePrompt creates, with the
// modes the runner always used.
func TestWritePrompt(t *testing.T) {
	s, dir := newStore(t, 0, 0)
	path := s.PromptPath("alice", 3)
	if want := filepath.Join(dir, "logs", "alice", "3.prompt.md"); path != want {
		t.Fatalf("PromptPath = %s, want %s", path, want)
	}
	if err := WritePrompt(path, "# role\nfix the tests\n"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "# role\nfix the tests\n" {
		t.Fatalf("prompt %q, %v", b, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("prompt mode %v, want 0640", fi.Mode().Perm())
	}
	di, err := os.Stat(s.LogDir("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o750 {
		t.Errorf("log dir mode %v, want 0750", di.Mode().Perm())
	}
	// A second write replaces the prompt: a retried seq gets the new one.
	if err := WritePrompt(path, "p2"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "p2" {
		t.Errorf("rewritten prompt %q", b)
	}
}

// A full disk stays recognisable through WritePrompt's error.
func TestWritePromptFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	if err := WritePrompt("/dev/full", "p"); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("WritePrompt(/dev/full) = %v, want ENOSPC", err)
	}
}
