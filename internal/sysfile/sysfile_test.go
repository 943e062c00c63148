package sysfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Read reads a file of any size whole, from an empty buffer or one smaller
// than the file; Write replaces an existing file's content in one write;
// both say a missing file is fs.ErrNotExist (cgroup's Kill relies on it),
// and Write creates nothing.
func TestReadWrite(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 513, 4096, 70000} {
		want := bytes.Repeat([]byte("0123456789\n"), size/11+1)[:size]
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, buf := range [][]byte{nil, make([]byte, 3, 512)} {
			got, err := Read(p, buf)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Read of %d bytes (buffer cap %d) = %d bytes, %v", size, cap(buf), len(got), err)
			}
		}
	}
	p := filepath.Join(dir, "w")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, "max 100000"); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "max 100000" {
		t.Fatalf("after Write: %q, %v", got, err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := Read(missing, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing file: %v, want fs.ErrNotExist", err)
	}
	if err := Write(missing, "1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Write of a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Write created %s", missing)
	}
}
