package merge

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// aliceWork commits g.txt ("honest work") on alice's branch and returns its
// blob's name, the path of its loose object, and a loose object file of
// other content ("evil work") to put there under the same name.
func aliceWork(t *testing.T, e *env) (blob, path string, evil []byte) {
	t.Helper()
	alice := e.worker("alice")
	commitFile(t, alice, "g.txt", "honest work\n", "alice: work")
	blob = gitT(t, alice, "rev-parse", "HEAD:g.txt")
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	fmt.Fprintf(zw, "blob %d\x00%s", len("evil work\n"), "evil work\n")
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return blob, filepath.Join(e.repo, ".git", "objects", blob[:2], blob[2:]), z.Bytes()
}

// wantCorrupt checks that task 7 was rejected as corrupt, naming blob,
// with main still at before, after gates gate runs.
func wantCorrupt(t *testing.T, e *env, q *Queue, blob, before string, gates int) {
	t.Helper()
	if e.main() != before {
		t.Fatalf("main moved to a change whose object was replaced: %s -> %s", before, e.main())
	}
	c := e.cb.waitCalls(t, 1)[0]
	if c.task != 7 || c.kind != KindCorrupt || !strings.Contains(c.detail, blob) {
		t.Fatalf("rejection = %+v; want %s naming %s", c, KindCorrupt, blob)
	}
	ent, err := q.Store().Latest(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if ent.Attempts != gates {
		t.Errorf("gate runs = %d, want %d", ent.Attempts, gates)
	}
}

// A session can write the shared object store (every sandbox does, to
// commit): one that replaces an object of another agent's change, same
// name and other content, would have the queue merge the change as it is
// now, not as it was committed and reviewed, since git does not hash an
// object again when it reads it. The queue does, and rejects the change
// before any gate runs.
func TestTamperedChangeRejectedBeforeTheGate(t *testing.T) {
	e := newEnv(t)
	q := e.open(e.options(`echo the gate ran`))
	blob, path, evil := aliceWork(t, e)
	if err := os.Chmod(path, 0o644); err != nil { // git makes loose objects read-only; their directory is not
		t.Fatal(err)
	}
	if err := os.WriteFile(path, evil, 0o444); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, e.repo, "cat-file", "-p", blob); got != "evil work" {
		t.Fatalf("git reads the replaced object as %q: the test proves nothing", got)
	}

	before := e.main()
	if _, err := q.Enqueue(context.Background(), 7, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeRejected)
	wantCorrupt(t, e, q, blob, before, 0)
}

// An object replaced while the gate runs: the gate passed on the honest
// files, but the target would take the objects by name. The queue checks
// them again before it moves the target: nothing moves, and the next step
// rejects the change as corrupt.
func TestObjectReplacedDuringTheGateNotMerged(t *testing.T) {
	e := newEnv(t)
	blob, path, evil := aliceWork(t, e)
	evilFile := filepath.Join(t.TempDir(), "evil")
	if err := os.WriteFile(evilFile, evil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The gate sees the honest file, then replaces the object behind it.
	q := e.open(e.options(`grep -q "honest work" g.txt`, fmt.Sprintf(`chmod u+w %[1]q && cp %[2]q %[1]q`, path, evilFile)))
	before := e.main()
	if _, err := q.Enqueue(context.Background(), 7, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	step(t, q, OutcomeRebuild)
	if e.main() != before {
		t.Fatalf("main moved to a change whose object was replaced during its gate: %s -> %s", before, e.main())
	}
	step(t, q, OutcomeRejected)
	wantCorrupt(t, e, q, blob, before, 1) // the run that passed before the object was replaced
}

// hashBatch names the objects whose content does not hash to their name,
// and the missing ones, in both object formats.
func TestHashBatch(t *testing.T) {
	out := "" +
		"ce013625030ba8dba906f756967f9e9ca394464a blob 6\nhello\n\n" + // sha1("blob 6\0hello\n")
		"0000000000000000000000000000000000000001 blob 3\nabc\n" +
		"1111111111111111111111111111111111111111 missing\n" +
		"2cf8d83d9ee29543b34a87727421fdecb7e3f3a183d337639025de576db9ebb4 blob 6\nhello\n\n" // sha256 of the same
	check, err := hashBatch(bufio.NewReader(strings.NewReader(out)))
	if err != nil {
		t.Fatal(err)
	}
	bad := check.bad
	want := []string{"0000000000000000000000000000000000000001", "1111111111111111111111111111111111111111 (missing)"}
	if !slices.Equal(bad, want) {
		t.Fatalf("hashBatch = %q, want %q", bad, want)
	}
	if _, err := hashBatch(bufio.NewReader(strings.NewReader("ce01 blob 6\nhello\n\n"))); err == nil {
		t.Error("hashBatch took a name of neither length")
	}
}

// taskOf reads the task trailer where the queue writes it and git looks
// for trailers: the message's last paragraph, not a header nor the body.
func TestTaskOf(t *testing.T) {
	head := "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\n\n"
	for _, c := range []struct{ commit, want string }{
		{head + "Merge task 7 from swarm/task/7\n\nswarm/task/7 at abc.\n\nSwarmd-Task: 7\n", "7"},
		{head + "Task 8\n\n* one\n\nSquashed.\n\nswarmd-task:  8 \nSigned-off-by: a <a@b>\n", "8"},
		{head + "Mentions\n\nSwarmd-Task: 9\n\nin the body only.\n", ""},
		{head + "Swarmd-Task: 10\n", ""}, // the subject is no trailer
		{head + "Merge\n\nSwarmd-Task:\n", ""},
		{"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nSwarmd-Task: 11\n", ""}, // no message
	} {
		if got := taskOf([]byte(c.commit)); got != c.want {
			t.Errorf("taskOf(%q) = %q, want %q", c.commit, got, c.want)
		}
	}
}
