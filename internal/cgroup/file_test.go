package cgroup

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// readFile reads a file of any size whole (its buffer starts at 512
// bytes), writeFile replaces an existing file's content in one write, and
// both say a missing file is fs.ErrNotExist, which Kill and Usage rely on.
func TestReadWriteFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 513, 4096, 70000} {
		want := bytes.Repeat([]byte("0123456789\n"), size/11+1)[:size]
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("readFile of %d bytes = %d bytes, %v", size, len(got), err)
		}
	}
	p := filepath.Join(dir, "w")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(p, "max 100000"); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "max 100000" {
		t.Fatalf("after writeFile: %q, %v", got, err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := readFile(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readFile of a missing file: %v, want fs.ErrNotExist", err)
	}
	if err := writeFile(missing, "1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("writeFile of a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("writeFile created %s", missing)
	}
}
