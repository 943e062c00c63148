package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenNamesTheStore: a file that is no database, or a directory, where
// the store should be is refused by an error that names it.
func TestOpenNamesTheStore(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database\n", 200)), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "a-directory")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{garbage, sub} {
		db, err := Open(context.Background(), path, Options{})
		if err == nil {
			db.Close()
			t.Fatalf("Open(%s) took it for a store", path)
		}
		if !strings.HasPrefix(err.Error(), "store: open "+path+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%s): %q, want one line naming it", path, err)
		}
	}
}
