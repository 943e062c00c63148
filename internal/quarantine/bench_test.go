package quarantine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkReleaseNothing is what every sandboxed session's end pays when
// it wrote no object: the quarantine's directories read.
func BenchmarkReleaseNothing(b *testing.B) {
	q := New(b.TempDir(), b.TempDir(), "/x")
	if _, err := q.Prepare("alice"); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := q.Release(ctx, "alice"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReleaseCommit is a session's end after one commit of one new
// file: a blob, a tree and the commit, each hashed and moved. Each round
// first puts the three objects back in the quarantine and takes them out
// of the shared store (BenchmarkReleaseCommitSetup is that part alone;
// b.StopTimer would cost more than the release).
func BenchmarkReleaseCommit(b *testing.B) { benchReleaseCommit(b, true) }

func BenchmarkReleaseCommitSetup(b *testing.B) { benchReleaseCommit(b, false) }

func benchReleaseCommit(b *testing.B, release bool) {
	r := newRepo(b, "sha1")
	r.commitInQuarantine("work.txt", "work\n")
	dir := r.q.Dir("alice")
	objects, _ := filepath.Glob(filepath.Join(dir, "??", "*"))
	content := map[string][]byte{}
	for _, o := range objects {
		rel, _ := filepath.Rel(dir, o)
		content[rel], _ = os.ReadFile(o)
	}
	ctx := context.Background()
	for b.Loop() {
		for rel, c := range content {
			_ = os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755)
			if err := os.WriteFile(filepath.Join(dir, rel), c, 0o444); err != nil {
				b.Fatal(err)
			}
			_ = os.Remove(filepath.Join(r.q.Shared(), rel))
		}
		if !release {
			for rel := range content {
				_ = os.RemoveAll(filepath.Join(dir, filepath.Dir(rel)))
			}
			continue
		}
		got, err := r.q.Release(ctx, "alice")
		if err != nil || got.Moved != 3 {
			b.Fatalf("%+v %v", got, err)
		}
	}
}
