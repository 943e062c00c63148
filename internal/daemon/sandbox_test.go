package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// What a sandbox brings back of the private /tmp for a command: never /tmp
// whole; a binary lying in /tmp itself alone; an npm .bin directory's
// node_modules.
func TestTmpNeeds(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin")
	f, err := os.CreateTemp("/tmp", "swarmd-tmpneeds-*.sh")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	defer os.Remove(f.Name())
	got := tmpNeeds(f.Name())
	if slices.Contains(got, "/tmp") || !slices.Contains(got, f.Name()) {
		t.Errorf("a binary in /tmp itself: %v, want the file and never /tmp", got)
	}

	dir := t.TempDir() // /tmp/TestTmpNeeds.../001
	bin := filepath.Join(dir, "node_modules", ".bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":/usr/bin")
	got = tmpNeeds("/usr/bin/env")
	if !slices.Contains(got, filepath.Join(dir, "node_modules")) {
		t.Errorf("PATH's npm .bin under /tmp: %v, want its node_modules", got)
	}
	for _, p := range got {
		if p == "/tmp" || p == "/usr/bin" {
			t.Errorf("%s brought back: %v", p, got)
		}
	}
}
