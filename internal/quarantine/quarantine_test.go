package quarantine

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// repo is a repository with one commit on main holding README (its content
// "honest\n"), and a linked worktree for alice.
type repo struct {
	t        testing.TB
	dir, git string
	wt       string
	q        *Store
}

func newRepo(t testing.TB, format string) *repo {
	t.Helper()
	root := t.TempDir()
	r := &repo{t: t, dir: filepath.Join(root, "repo"), wt: filepath.Join(root, "alice")}
	r.run("", nil, "init", "-q", "-b", "main", "--object-format="+format, r.dir)
	if err := os.WriteFile(filepath.Join(r.dir, "README"), []byte("honest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.run(r.dir, nil, "add", "README")
	r.run(r.dir, nil, "commit", "-q", "-m", "init")
	r.run(r.dir, nil, "worktree", "add", "-q", "-b", "swarm/alice/work", r.wt)
	r.git = filepath.Join(r.dir, ".git")
	// Git in the test sees the quarantine by its environment; a sandbox
	// sees it by a bind over the objects directory, the same to git.
	r.q = New(filepath.Join(root, "q"), r.git, filepath.Join(r.git, "objects"))
	return r
}

// run runs git in dir with env added and returns its output.
func (r *repo) run(dir string, env []string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "gc.auto=0"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// has reports whether the shared store has object name.
func (r *repo) has(name string) bool {
	return exec.Command("git", "--git-dir", r.git, "cat-file", "-e", name).Run() == nil
}

// commitInQuarantine commits file in alice's worktree with the quarantine
// as git's object directory, as a sandboxed session does; it returns the
// commit and the new blob.
func (r *repo) commitInQuarantine(file, content string) (commit, blob string) {
	r.t.Helper()
	dir, err := r.q.Prepare("alice")
	if err != nil {
		r.t.Fatal(err)
	}
	env := []string{"GIT_OBJECT_DIRECTORY=" + dir}
	if err := os.WriteFile(filepath.Join(r.wt, file), []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.run(r.wt, env, "add", file)
	r.run(r.wt, env, "commit", "-q", "-m", "work")
	return r.run(r.wt, env, "rev-parse", "HEAD"), r.run(r.wt, env, "rev-parse", "HEAD:"+file)
}

// left is what the quarantine holds after a release, its alternate aside.
func (r *repo) left() []string {
	var out []string
	dir := r.q.Dir("alice")
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && p != filepath.Join(dir, "info", "alternates") {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	return out
}

func TestReleaseMovesASessionsObjects(t *testing.T) {
	for _, format := range []string{"sha1", "sha256"} {
		t.Run(format, func(t *testing.T) {
			r := newRepo(t, format)
			commit, blob := r.commitInQuarantine("work.txt", "the session's work\n")
			if r.has(commit) || r.has(blob) {
				t.Fatal("the session's objects are in the shared store before the release")
			}
			got, err := r.q.Release(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			if got.Moved != 3 || len(got.Refused) != 0 { // the commit, its tree, the blob
				t.Errorf("released %+v, want 3 moved and none refused", got)
			}
			if !r.has(commit) || !r.has(blob) {
				t.Fatal("the session's objects are not in the shared store after the release")
			}
			r.run(r.dir, nil, "fsck", "--full", "--no-dangling")
			if left := r.left(); len(left) != 0 {
				t.Errorf("the quarantine holds %v after the release", left)
			}
			// Ready for the next session: its alternate stays.
			if _, err := os.Stat(filepath.Join(r.q.Dir("alice"), "info", "alternates")); err != nil {
				t.Error(err)
			}
		})
	}
}

// A session that puts other content under the name of an object the
// target has (README's blob) changes nothing outside its quarantine, and
// its forgery is refused; so is a file that is not an object at all.
func TestReleaseRefusesForgedObjects(t *testing.T) {
	r := newRepo(t, "sha1")
	_, blob := r.commitInQuarantine("work.txt", "mallory's content\n")
	readme := r.run(r.dir, nil, "rev-parse", "main:README")
	dir := r.q.Dir("alice")
	forged := filepath.Join(dir, readme[:2], readme[2:])
	if err := os.MkdirAll(filepath.Dir(forged), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, blob[:2], blob[2:]))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(forged, b, 0o444); err != nil {
		t.Fatal(err)
	}
	junk := strings.Repeat("ab", 20)
	for name, content := range map[string]string{
		filepath.Join(junk[:2], junk[2:]):         "not zlib",
		filepath.Join(junk[:2], "tmp_obj_x1y2z3"): "git's temporary file",
		"stray":                                  "a file of nobody's",
		filepath.Join("pack", "tmp_pack_aXbYcZ"): "a pack cut short",
		filepath.Join("info", "commit-graph"):    "git's, of objects gone",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	got, err := r.q.Release(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got.Refused)
	want := []string{junk + ": not a loose object: zlib: invalid header", readme + ": its content is object " + blob}
	slices.Sort(want)
	if !slices.Equal(got.Refused, want) || got.Moved != 3 {
		t.Errorf("released %+v, want 3 moved and refused %q", got, want)
	}
	if show := r.run(r.dir, nil, "cat-file", "blob", "main:README"); show != "honest" {
		t.Errorf("main's README reads %q after the release", show)
	}
	r.run(r.dir, nil, "fsck", "--full", "--no-dangling")
	if left := r.left(); len(left) != 0 {
		t.Errorf("the quarantine holds %v after the release", left)
	}
}

// A session's git may pack its objects (gc --auto); the pack's objects are
// unpacked into the shared store, each named by its content, and a pack
// git cannot read is refused whole.
func TestReleaseUnpacksPacks(t *testing.T) {
	r := newRepo(t, "sha1")
	commit, blob := r.commitInQuarantine("work.txt", "packed work\n")
	dir := r.q.Dir("alice")
	env := []string{"GIT_OBJECT_DIRECTORY=" + dir, "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + r.q.Shared()}
	r.run(r.wt, env, "repack", "-a", "-d", "-l", "-q")
	packs, _ := filepath.Glob(filepath.Join(dir, "pack", "*.pack"))
	if len(packs) != 1 {
		t.Fatalf("packs in the quarantine: %v", packs)
	}
	if err := os.WriteFile(filepath.Join(dir, "pack", "pack-broken.pack"), []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x05junk"), 0o444); err != nil {
		t.Fatal(err)
	}
	got, err := r.q.Release(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.Moved != 3 || len(got.Refused) != 1 || !strings.HasPrefix(got.Refused[0], "pack pack-broken.pack: git unpack-objects cannot read it whole") {
		t.Errorf("released %+v, want 3 moved and the broken pack refused", got)
	}
	if !r.has(commit) || !r.has(blob) {
		t.Fatal("the pack's objects are not in the shared store")
	}
	if left := r.left(); len(left) != 0 {
		t.Errorf("the quarantine holds %v after the release", left)
	}
}

// A pack of many objects (a session's fetch, say) is indexed into the
// store as a pack, by git index-pack, rather than unpacked.
func TestReleaseKeepsALargePackAPack(t *testing.T) {
	r := newRepo(t, "sha1")
	dir, err := r.q.Prepare("alice")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"GIT_OBJECT_DIRECTORY=" + dir}
	for i := range unpackLimit {
		if err := os.WriteFile(filepath.Join(r.wt, fmt.Sprintf("f%d", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.run(r.wt, env, "add", "-A")
	r.run(r.wt, env, "commit", "-q", "-m", "many files")
	commit := r.run(r.wt, env, "rev-parse", "HEAD")
	r.run(r.wt, env, "repack", "-a", "-d", "-l", "-q")
	got, err := r.q.Release(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.Moved != unpackLimit+2 || len(got.Refused) != 0 || !r.has(commit) {
		t.Fatalf("released %+v; want %d objects moved", got, unpackLimit+2)
	}
	packs, _ := filepath.Glob(filepath.Join(r.q.Shared(), "pack", "*.pack"))
	if len(packs) != 1 {
		t.Errorf("packs in the shared store: %v, want the session's", packs)
	}
	r.run(r.dir, nil, "fsck", "--full", "--no-dangling")
}

// A start releases what the sessions of a killed daemon left, every agent's.
func TestReleaseAllTakesEveryAgents(t *testing.T) {
	r := newRepo(t, "sha1")
	commit, _ := r.commitInQuarantine("work.txt", "left by a killed daemon\n")
	if _, err := r.q.Prepare("bob"); err != nil {
		t.Fatal(err)
	}
	got, err := r.q.ReleaseAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["alice"].Moved != 3 {
		t.Errorf("released %+v, want alice's 3 objects only", got)
	}
	if !r.has(commit) {
		t.Error("alice's commit is not in the shared store")
	}
	if got, err := New(filepath.Join(t.TempDir(), "none"), r.git, "/x").ReleaseAll(context.Background()); err != nil || got != nil {
		t.Errorf("no quarantines: %v, %v", got, err)
	}
}

func FuzzCheckLoose(f *testing.F) {
	f.Add([]byte("x\x9c\x4b\xca\xc9\x4f\x52\x30\x62\x00\x00\x0b\x2c\x02\x0f"))
	f.Add([]byte("not zlib"))
	f.Fuzz(func(t *testing.T, b []byte) {
		name := strings.Repeat("0", 40)
		if why := checkLoose(strings.NewReader(string(b)), name); why == "" {
			t.Fatalf("%x accepted as object %s", b, name)
		}
	})
}

// A session reporting its task done while it runs: what it committed is
// moved at once, and nothing of its quarantine is taken from under its git
// (a temporary file it is writing included); its end's Release clears it.
func TestMoveLeavesTheQuarantineAlone(t *testing.T) {
	r := newRepo(t, "sha1")
	commit, _ := r.commitInQuarantine("work.txt", "reported done\n")
	tmp := filepath.Join(r.q.Dir("alice"), commit[:2], "tmp_obj_writing")
	if err := os.WriteFile(tmp, []byte("half an object"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := r.left()
	got, err := r.q.Move(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.Moved != 3 || len(got.Refused) != 0 || !r.has(commit) {
		t.Fatalf("moved %+v, and the commit in the store: %v; want its 3 objects", got, r.has(commit))
	}
	if after := r.left(); !slices.Equal(after, before) {
		t.Errorf("the quarantine held %v, and %v after the move", before, after)
	}
	next, _ := r.commitInQuarantine("more.txt", "after the report\n")
	if got, err = r.q.Release(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if got.Moved != 6 || len(got.Refused) != 0 || !r.has(next) {
		t.Errorf("released %+v, and the second commit in the store: %v; want 6 objects, 3 of them moved before", got, r.has(next))
	}
	if left := r.left(); len(left) != 0 {
		t.Errorf("the quarantine holds %v after the release", left)
	}
}

// A sandbox can leave symbolic links anywhere in its quarantine. The
// daemon, which may run as root, follows none out of it: it reads no
// object through one (another repository's, say), and removes the links,
// not what they point to.
func TestReleaseFollowsNoLinkOut(t *testing.T) {
	r := newRepo(t, "sha1")
	other := newRepo(t, "sha1") // objects the sandbox could not have written
	if err := os.WriteFile(filepath.Join(other.dir, "secret"), []byte("another repository's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other.run(other.dir, nil, "add", "secret")
	other.run(other.dir, nil, "commit", "-q", "-m", "secret")
	other.run(other.dir, nil, "repack", "-a", "-q")
	blob := other.run(other.dir, nil, "rev-parse", "main:secret")
	if _, err := r.q.Prepare("alice"); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	if err := os.WriteFile(keep, []byte("not the quarantine's"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A loose copy of the other repository's blob, outside.
	loose := filepath.Join(outside, "loose")
	if err := os.MkdirAll(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "--git-dir", other.git, "cat-file", "blob", blob)
	content, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	w := exec.Command("git", "--git-dir", other.git, "hash-object", "-w", "--stdin")
	w.Env = append(os.Environ(), "GIT_OBJECT_DIRECTORY="+loose)
	w.Stdin = strings.NewReader(string(content))
	if out, err := w.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	dir := r.q.Dir("alice")
	for link, to := range map[string]string{
		"info":           outside,                                     // removeAllBut would empty it
		blob[:2]:         filepath.Join(loose, blob[:2]),              // a fan-out directory
		"pack":           filepath.Join(other.git, "objects", "pack"), // packs to unpack
		"cd/" + blob[2:]: filepath.Join(loose, blob[:2], blob[2:]),    // one object
	} {
		p := filepath.Join(dir, link)
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.q.Release(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.Moved != 0 || len(got.Refused) != 0 || r.has(blob) {
		t.Errorf("released %+v, the other repository's blob in the store: %v; want nothing read through a link", got, r.has(blob))
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a file the info link pointed to: %v", err)
	}
	if _, err := os.Stat(filepath.Join(loose, blob[:2], blob[2:])); err != nil {
		t.Errorf("the object the links pointed to: %v", err)
	}
	if left := r.left(); len(left) != 0 {
		t.Errorf("the quarantine holds %v after the release", left)
	}
	if _, err := r.q.Prepare("alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "alternates")); err == nil {
		t.Error("Prepare wrote its alternate through the info link")
	}
}

// A loose object that inflates far past what its header says is refused
// once it passes it, not inflated to its end.
func TestCheckLooseStopsAtTheHeadersSize(t *testing.T) {
	var b bytes.Buffer
	z := zlib.NewWriter(&b)
	z.Write([]byte("blob 3\x00abc"))
	zeros := make([]byte, 1<<20)
	for range 64 { // 64 MiB inflated, some 64 kB on disk
		z.Write(zeros)
	}
	z.Close()
	total := b.Len()
	r := &countingReader{r: &b}
	why := checkLoose(r, strings.Repeat("0", 40))
	if why != "more content than the 3 bytes its header says" {
		t.Errorf("checkLoose: %q", why)
	}
	if r.n > total/4 {
		t.Errorf("checkLoose read %d of the object's %d bytes: it inflated past the header's size", r.n, total)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A FIFO named like an object (one a running sandbox put there between
// the listing and the open) is skipped, not waited on for a writer.
func TestOpenRegularSkipsAFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	done := make(chan bool, 1)
	go func() {
		f, ok, err := openRegular(root, "fifo")
		if f != nil {
			f.Close()
		}
		done <- ok || err != nil
	}()
	select {
	case bad := <-done:
		if bad {
			t.Error("a FIFO opened as a regular file, or an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("openRegular waits on a FIFO")
	}
}

// zlibOf is b compressed as a loose object file is.
func zlibOf(b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// putLoose writes a loose object file (raw: its compressed bytes) named
// name into agent's quarantine, as a sandbox can.
func putLoose(t testing.TB, q *Store, agent, name string, raw []byte) string {
	t.Helper()
	p := filepath.Join(q.Dir(agent), name[:2], name[2:])
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, raw, 0o444); err != nil {
		t.Fatal(err)
	}
	return p
}

// What a sandbox leaves as info/alternates (a sparse file of a terabyte,
// which a read of its size would try to allocate; a FIFO, whose open waits
// for a writer) is replaced by the next Prepare, which neither reads past
// the size it expects nor waits.
func TestPrepareReplacesWhatTheSandboxLeftAsItsAlternate(t *testing.T) {
	for _, leave := range []func(string) error{
		func(p string) error { return os.Truncate(p, 1<<40) },
		func(p string) error { os.Remove(p); return syscall.Mkfifo(p, 0o644) },
		func(p string) error { os.Remove(p); return os.Symlink("/etc/passwd", p) },
	} {
		r := newRepo(t, "sha1")
		dir, err := r.q.Prepare("alice")
		if err != nil {
			t.Fatal(err)
		}
		alt := filepath.Join(dir, "info", "alternates")
		if err := leave(alt); err != nil {
			t.Fatal(err)
		}
		if _, err := r.q.Release(context.Background(), "alice"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := r.q.Prepare("alice"); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Prepare waits on what the sandbox left as its alternate")
		}
		fi, err := os.Lstat(alt)
		if b, _ := os.ReadFile(alt); err != nil || !fi.Mode().IsRegular() || string(b) != r.q.Mount()+"\n" {
			t.Errorf("the alternate after Prepare: %v %v %q", fi, err, b)
		}
	}
}

// Headers git would not read ("blob 05", "blob +5", "blob -0") and names
// of the other object format are refused: moved, they would be objects
// that fail git fsck, or junk git never prunes.
func TestReleaseRefusesWhatGitWouldNotRead(t *testing.T) {
	r := newRepo(t, "sha1")
	if _, err := r.q.Prepare("alice"); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, body := range []string{"blob 05\x00hello", "blob +5\x00hello", "blob -0\x00"} {
		sum := sha1.Sum([]byte(body))
		names = append(names, hex.EncodeToString(sum[:]))
		putLoose(t, r.q, "alice", names[len(names)-1], zlibOf([]byte(body)))
	}
	sum := sha256.Sum256([]byte("blob 6\x00junk!\n"))
	names = append(names, hex.EncodeToString(sum[:]))
	putLoose(t, r.q, "alice", names[len(names)-1], zlibOf([]byte("blob 6\x00junk!\n")))
	got, err := r.q.Release(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.Moved != 0 || len(got.Refused) != len(names) {
		t.Errorf("released %+v, want all %d refused", got, len(names))
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(r.q.Shared(), n[:2], n[2:])); err == nil {
			t.Errorf("%s moved into the store", n)
		}
	}
	r.run(r.dir, nil, "fsck", "--full", "--no-dangling")
}

// A pack of two objects whose delta asks for a 2 GiB object: git, run on
// it as the daemon and outside every sandbox's cgroup, stops at its
// address-space bound instead of taking the host's memory.
func TestReleaseBoundsAPacksDeltaBomb(t *testing.T) {
	r := newRepo(t, "sha1")
	dir, err := r.q.Prepare("alice")
	if err != nil {
		t.Fatal(err)
	}
	pack := deltaBomb(1<<20, 2048)
	if err := os.MkdirAll(filepath.Join(dir, "pack"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pack", "pack-bomb.pack"), pack, 0o444); err != nil {
		t.Fatal(err)
	}
	got, err := r.q.Release(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	if len(got.Refused) != 1 {
		t.Errorf("released %+v: want the pack refused", got)
	}
	if ru.Maxrss>>10 > 1024 { // KiB to MiB
		t.Errorf("a %d-byte pack made git use %d MiB", len(pack), ru.Maxrss>>10)
	}
}

// One agent's quarantine that cannot be cleared (a directory nested deeper
// than the daemon may open files) does not keep another agent's objects,
// left by a killed daemon, out of the repository.
func TestReleaseAllGoesPastAQuarantineItCannotClear(t *testing.T) {
	r := newRepo(t, "sha1")
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
	aliceDir, err := r.q.Prepare("alice")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("rm", "-rf", aliceDir).Run() })
	nest(t, aliceDir, 400, nil)
	bobDir, err := r.q.Prepare("bob")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"GIT_OBJECT_DIRECTORY=" + bobDir}
	r.run(r.dir, env, "commit", "-q", "--allow-empty", "-m", "bob's")
	bob := r.run(r.dir, env, "rev-parse", "HEAD")
	if _, err := r.q.ReleaseAll(context.Background()); err == nil {
		t.Log("alice's quarantine cleared after all")
	}
	if !r.has(bob) {
		t.Error("bob's commit is not in the store: alice's quarantine stopped ReleaseAll")
	}
}

// An object that goes while a Move reads the quarantine (the running
// session's git gc packs and prunes them) is skipped, not the end of the
// Move.
func TestMoveGoesPastAVanishedObject(t *testing.T) {
	r := newRepo(t, "sha1")
	commit, blob := r.commitInQuarantine("work.txt", "kept\n")
	dir := r.q.Dir("alice")
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// The listing said regular file; the file is gone by the open.
	if f, ok, err := openRegular(root, filepath.Join(blob[:2], "0000000000000000000000000000000000000000"[:38])); f != nil || ok || err != nil {
		t.Errorf("openRegular of a vanished object: %v %v %v", f, ok, err)
	}
	if _, err := r.q.Move(context.Background(), "alice"); err != nil || !r.has(commit) {
		t.Errorf("Move: %v; the commit in the store: %v", err, r.has(commit))
	}
}

// deltaBomb is a pack of two objects: a blob of base zero bytes, and a
// delta that copies it copies times over.
func deltaBomb(base, copies uint64) []byte {
	entryHead := func(typ int, size uint64) []byte {
		b := []byte{byte(typ<<4) | byte(size&15)}
		for size >>= 4; size > 0; size >>= 7 {
			b[len(b)-1] |= 0x80
			b = append(b, byte(size&0x7f))
		}
		return b
	}
	varint := func(v uint64) (b []byte) {
		for ; v >= 0x80; v >>= 7 {
			b = append(b, byte(v)|0x80)
		}
		return append(b, byte(v))
	}
	var pack bytes.Buffer
	pack.WriteString("PACK")
	binary.Write(&pack, binary.BigEndian, uint32(2))
	binary.Write(&pack, binary.BigEndian, uint32(2))
	off1 := pack.Len()
	pack.Write(entryHead(3, base)) // a blob of zeros
	pack.Write(zlibOf(make([]byte, base)))
	off2 := pack.Len()
	delta := append(varint(base), varint(base*copies)...)
	for range copies {
		delta = append(delta, 0x80|0x40, 0x10) // copy the whole base again
	}
	pack.Write(entryHead(6, uint64(len(delta)))) // OFS_DELTA
	ofs := uint64(off2 - off1)
	ob := []byte{byte(ofs & 127)}
	for ofs >>= 7; ofs > 0; ofs >>= 7 {
		ofs--
		ob = append([]byte{byte(128 | ofs&127)}, ob...)
	}
	pack.Write(ob)
	pack.Write(zlibOf(delta))
	trailer := sha1.Sum(pack.Bytes())
	pack.Write(trailer[:])
	return pack.Bytes()
}

// writePack puts pack in agent's quarantine as pack/NAME.pack.
func (r *repo) writePack(name string, pack []byte) {
	r.t.Helper()
	dir, err := r.q.Prepare("alice")
	if err != nil {
		r.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pack"), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pack", name+".pack"), pack, 0o444); err != nil {
		r.t.Fatal(err)
	}
}

// A pack that keeps git busy past the release's time (here a blob of 256
// MiB to build and hash, in 50 ms) is refused, like one git cannot read:
// the time is the daemon's, spent for the agent, and a pack that took it
// once takes it at every try. A Move does not run git on it again, and
// the Release at the session's end drops it. The session's other objects
// reach the repository.
func TestReleaseRefusesAPackGitDoesNotFinishInTime(t *testing.T) {
	r := newRepo(t, "sha1")
	commit, _ := r.commitInQuarantine("work.txt", "loose work\n")
	r.writePack("pack-slow", deltaBomb(1<<20, 256))
	r.q.Timeout = 50 * time.Millisecond
	var runs atomic.Int32
	r.q.Exec = func(ctx context.Context, c Command) ([]byte, error) {
		runs.Add(1)
		return execGit(ctx, c)
	}
	refusedForTime := func(got Released) bool {
		return len(got.Refused) == 1 && strings.HasPrefix(got.Refused[0], "pack pack-slow.pack: git did not finish with it within 50ms")
	}
	got, err := r.q.Move(context.Background(), "alice")
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	if !refusedForTime(got) || !r.has(commit) {
		t.Fatalf("moved %+v: want the commit moved and the pack refused for its time", got)
	}
	if got, err = r.q.Move(context.Background(), "alice"); err != nil || !refusedForTime(got) {
		t.Fatalf("second move: %+v, %v", got, err)
	}
	if got, err = r.q.Release(context.Background(), "alice"); err != nil || !refusedForTime(got) {
		t.Fatalf("release: %+v, %v", got, err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("git ran %d times on the pack, want once", n)
	}
	if r.q.Unreleased("alice") {
		t.Error("the release counts as failed: the next prompt would run git on the pack again")
	}
	if left := r.left(); len(left) != 0 {
		t.Errorf("the quarantine holds %v after the release", left)
	}
	// The next session's pack of that name is run again.
	r.writePack("pack-slow", deltaBomb(1<<20, 256))
	if got, err = r.q.Release(context.Background(), "alice"); err != nil || !refusedForTime(got) || runs.Load() != 2 {
		t.Fatalf("the next session's release: %+v, %v, git ran %d times in all", got, err, runs.Load())
	}
}

// A release its caller gives up on (the daemon's start, stopped) is not a
// refusal: the pack stays, and the release counts as failed, to be tried
// again.
func TestReleaseKeepsAPackItsCallerStoppedFor(t *testing.T) {
	r := newRepo(t, "sha1")
	r.writePack("pack-slow", deltaBomb(1<<20, 256))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.q.Exec = func(ctx context.Context, c Command) ([]byte, error) {
		cancel()
		return execGit(ctx, c)
	}
	got, err := r.q.Release(ctx, "alice")
	if !errors.Is(err, context.Canceled) || len(got.Refused) != 0 {
		t.Fatalf("release: %+v, %v; want context.Canceled and nothing refused", got, err)
	}
	if !r.q.Unreleased("alice") {
		t.Error("the release does not count as failed")
	}
	if left := r.left(); len(left) != 1 || left[0] != "pack/pack-slow.pack" {
		t.Errorf("the quarantine holds %v, want the pack", left)
	}
}

// A directory nested thousands of levels deep (a sandbox can nest them a
// million deep) is cleared with a few files open: Root.RemoveAll held one
// open for each level, and ran the daemon out of descriptors, every
// agent's logs and sockets with it, while it lasted. Here the process may
// open 48 more files than it has open, and the tree is 3,000 deep, with a
// wide directory, links and files on the way.
func TestReleaseClearsADeepTreeWithFewFilesOpen(t *testing.T) {
	r := newRepo(t, "sha1")
	commit, _ := r.commitInQuarantine("work.txt", "work\n")
	dir := r.q.Dir("alice")
	nest(t, dir, 3000, func(fd, level int) error {
		if level%500 != 0 {
			return nil
		}
		for j := range 50 {
			if err := syscall.Mkdirat(fd, fmt.Sprintf("w%d", j), 0o755); err != nil {
				return err
			}
		}
		if err := unix.Symlinkat("/", fd, "root"); err != nil {
			return err
		}
		return unix.Mknodat(fd, "fifo", unix.S_IFIFO|0o644, 0)
	})
	t.Cleanup(func() { exec.Command("rm", "-rf", dir).Run() })

	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = uint64(len(open) + 48)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	_, err = r.q.Release(context.Background(), "alice")
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	if !r.has(commit) {
		t.Error("the session's commit is not in the store")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "info" {
		t.Errorf("the quarantine holds %v after the release, want info alone", ents)
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Errorf("the link to / was followed: %v", err)
	}
}

// nest makes a chain of directories d/d/d/… depth deep in dir, with a
// directory open at a time; at, if set, adds to each level (its fd).
func nest(t *testing.T, dir string, depth int, at func(fd, level int) error) {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for level := range depth {
		if at != nil {
			err = at(fd, level)
		}
		if err == nil {
			err = syscall.Mkdirat(fd, "d", 0o755)
		}
		next := -1
		if err == nil {
			next, err = syscall.Openat(fd, "d", syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
		}
		syscall.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	syscall.Close(fd)
}

// TestDirsAreTheQuarantinesOfTheirOwn: Dirs lists the agents'
// quarantines, leaving out a link in the place of one (git, reading
// them as alternates, would follow it).
func TestDirsAreTheQuarantinesOfTheirOwn(t *testing.T) {
	dir := t.TempDir()
	s := New(dir, t.TempDir(), "/x")
	if got := s.Dirs(); len(got) != 0 {
		t.Fatalf("Dirs of none = %v", got)
	}
	for _, a := range []string{"alice", "bob"} {
		if _, err := s.Prepare(a); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "eve")); err != nil {
		t.Fatal(err)
	}
	got, want := s.Dirs(), []string{s.Dir("alice"), s.Dir("bob")}
	if !slices.Equal(got, want) {
		t.Errorf("Dirs = %v, want %v", got, want)
	}
}
