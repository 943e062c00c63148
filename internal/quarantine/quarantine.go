// Package quarantine keeps the git objects a sandboxed session writes out of
// the repository's shared object store until they are checked.
//
// git never hashes an object again when it reads it, so a process that can
// write the shared store can put other content under any object's name: a
// blob of the merge target's, a peer's commit. A sandbox therefore sees the
// shared store read-only, at Mount, and in its place (the repository's
// objects directory, where git writes) an object directory of its agent's
// own whose alternate is Mount: git reads every object as before and writes
// the new ones here. Once the session has ended, Release hashes each object
// again and moves those whose content matches their name into the shared
// store; anything else is dropped, and reported.
package quarantine

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Store is the quarantines of a daemon's agents, one directory each under
// Dir.
type Store struct {
	dir    string // one directory an agent
	shared string // the repository's object store, on the host
	git    string // the repository's git directory, for unpack-objects and index-pack
	mount  string // where a sandbox sees shared: each quarantine's alternate
	// nameLen is the length of the repository's object names: 40 (SHA-1)
	// or 64 (SHA-256); 0 when its config could not say (either then).
	nameLen int

	// Exec runs the git of a release (New: os/exec). The daemon runs it
	// as a process tree of its own: its sessions' priority, a cgroup,
	// and a marker the next start sweeps if the daemon is killed.
	Exec Exec
	// Timeout is how long the git of a release may take over all its
	// packs (New: ten minutes); a pack it did not finish is refused.
	Timeout time.Duration
	// Git is the git binary the release runs (New: "git", from PATH);
	// the daemon names it by its absolute path, found where sessions
	// cannot write.
	Git string

	mu     sync.Mutex
	agents map[string]*sync.Mutex // one release of an agent's at a time
	failed map[string]bool        // agents whose last Release failed: objects may wait
	// slow are the packs whose git ran out of time in a Move, by agent
	// and then by name, with their size: the Release at the session's
	// end refuses them without running git on them again.
	slow map[string]map[string]int64
}

// Command is one git command of a release, on a pack a sandbox wrote.
type Command struct {
	Agent string   // whose quarantine the pack is in
	Argv  []string // the whole command line: a shell bounds git's address space to Memory, then execs git
	Env   []string // the whole environment
	Stdin *os.File // the pack
	// Memory is the bytes git may use: the shell's limit on its address
	// space says so already; a cgroup can bound its memory too.
	Memory int64
}

// Exec runs c to its end and returns what it wrote (stdout and stderr).
// Its error is a *GitError when git ran and failed; any other error means
// it could not run, or ctx ended first (and c was killed).
type Exec func(ctx context.Context, c Command) (output []byte, err error)

// GitError is a git that ran and failed: it could not read the pack whole.
type GitError struct {
	Status string // "exit status 128", "signal: killed"
}

func (e *GitError) Error() string { return "git: " + e.Status }

// execGit is Exec through os/exec.
func execGit(ctx context.Context, c Command) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Env, cmd.Stdin = c.Env, c.Stdin
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out, &GitError{Status: exit.ProcessState.String()}
	}
	return out, err
}

// New is the quarantines under dir of the repository whose git directory
// is gitDir (its objects directory is the shared store), as sandboxes see
// that store at mount.
func New(dir, gitDir, mount string) *Store {
	return &Store{dir: dir, shared: filepath.Join(gitDir, "objects"), git: gitDir, mount: mount,
		nameLen: objectNameLen(gitDir), Exec: execGit, Timeout: unpackTimeout, Git: "git",
		agents: map[string]*sync.Mutex{}, failed: map[string]bool{}, slow: map[string]map[string]int64{}}
}

// objectNameLen reads the repository's object format from its config
// (extensions.objectFormat): 64 hex digits for sha256, else 40; 0 if the
// config cannot be read.
func objectNameLen(gitDir string) int {
	b, err := os.ReadFile(filepath.Join(gitDir, "config"))
	if err != nil {
		return 0
	}
	if objectFormatSHA256.Match(b) {
		return 64
	}
	return 40
}

var objectFormatSHA256 = regexp.MustCompile(`(?im)^\s*objectformat\s*=\s*"?sha256"?\s*$`)

// lock serializes the releases of agent's quarantine: a session's task
// done may ask for a Move while another runs.
func (s *Store) lock(agent string) func() {
	s.mu.Lock()
	m, ok := s.agents[agent]
	if !ok {
		m = &sync.Mutex{}
		s.agents[agent] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// Shared is the repository's object store, which a sandbox sees at Mount.
func (s *Store) Shared() string { return s.shared }

// Mount is where a sandbox sees the shared store, read-only.
func (s *Store) Mount() string { return s.mount }

// Dir is agent's quarantine on the host; a sandbox sees it in place of the
// shared store.
func (s *Store) Dir(agent string) string { return filepath.Join(s.dir, agent) }

// Dirs are the agents' quarantines that exist, each a directory of its
// own (a link in their place is left out): the object directories whose
// objects the agents' branches may name before a session's end moves
// them into the shared store.
func (s *Store) Dirs() []string {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil
	}
	dirs := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type() == fs.ModeDir {
			dirs = append(dirs, filepath.Join(s.dir, e.Name()))
		}
	}
	return dirs
}

// Prepare makes agent's quarantine ready for a sandbox: the directory and
// its alternate, the shared store at Mount. (git makes the pack directory
// when it packs; a session's end with none has one directory less to read.)
func (s *Store) Prepare(agent string) (string, error) {
	dir := s.Dir(agent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("quarantine of %s: %w", agent, err)
	}
	// Through a Root, as Release: nothing a sandbox left there may lead
	// the write elsewhere.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("quarantine of %s: %w", agent, err)
	}
	defer root.Close()
	want := []byte(s.mount + "\n")
	if alternateIs(root, want) {
		return dir, nil
	}
	// Whatever the last sandbox made of info: anew.
	if err := removeTree(root, "info"); err != nil {
		return "", fmt.Errorf("quarantine of %s: %w", agent, err)
	}
	if err := root.Mkdir("info", 0o755); err != nil {
		return "", fmt.Errorf("quarantine of %s: %w", agent, err)
	}
	f, err := root.OpenFile(filepath.Join("info", "alternates"), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return "", fmt.Errorf("quarantine of %s: %w", agent, err)
	}
	_, err = f.Write(want)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("quarantine of %s: %w", agent, err)
	}
	return dir, nil
}

// alternateIs reports whether the quarantine's info/alternates is a
// regular file holding want: read by its size, never past it (a sandbox
// may have left a FIFO there, or a sparse file of a terabyte).
func alternateIs(root *os.Root, want []byte) bool {
	f, ok, err := openRegular(root, filepath.Join("info", "alternates"))
	if err != nil || !ok {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() != int64(len(want)) {
		return false
	}
	got := make([]byte, len(want))
	_, err = io.ReadFull(f, got)
	return err == nil && bytes.Equal(got, want)
}

// Released is what a Release or a Move did.
type Released struct {
	Moved   int      // objects checked and in the shared store now (some were already)
	Refused []string // objects not moved, each "NAME: why"
}

// Release checks every object in agent's quarantine and moves into the
// shared store those whose content hashes to their name: loose objects
// (SHA-1 names of 40 hex digits, SHA-256 of 64) one by one, packs through
// git unpack-objects or index-pack, which name each object by its content.
// Everything else is removed: the quarantine is empty after, but for its
// alternate.
// Call it when no process of the agent's sandbox runs.
func (s *Store) Release(ctx context.Context, agent string) (Released, error) {
	r, err := s.release(ctx, agent, true)
	s.mu.Lock()
	if err != nil {
		s.failed[agent] = true
	} else {
		delete(s.failed, agent)
	}
	s.mu.Unlock()
	return r, err
}

// Unreleased reports whether agent's last Release failed (a full disk,
// say): its branch may name objects that still wait in its quarantine, and
// a Release is worth trying again before the branch is read.
func (s *Store) Unreleased(agent string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed[agent]
}

// Move is Release while the agent's sandbox runs (its session reports its
// task done: the commit it froze must be readable by the reviewer and the
// merge queue at once). It checks and moves what is there now and removes
// nothing, so that no write of the running git is cut short; the Release
// at the session's end checks everything again and clears the quarantine.
func (s *Store) Move(ctx context.Context, agent string) (Released, error) {
	return s.release(ctx, agent, false)
}

// release reads the quarantine through an os.Root: a sandbox can put a
// symbolic link anywhere in it (info, pack, a fan-out directory, an
// object), and the daemon must never follow one out of it, neither to read
// nor to remove.
func (s *Store) release(ctx context.Context, agent string, final bool) (Released, error) {
	defer s.lock(agent)()
	var out Released
	root, err := os.OpenRoot(s.Dir(agent))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("release the quarantine of %s: %w", agent, err)
	}
	defer root.Close()
	if final {
		defer s.forgetSlow(agent)
	}
	ents, err := readDir(root, ".")
	if err != nil {
		return out, fmt.Errorf("release the quarantine of %s: %w", agent, err)
	}
	for _, e := range ents {
		var err error
		switch {
		case e.Name() == "pack" && e.IsDir():
			err = s.releasePacks(ctx, root, agent, final, &out)
		case len(e.Name()) == 2 && isHex(e.Name()) && e.IsDir():
			err = s.releaseLoose(root, e.Name(), final, &out)
		}
		if errors.Is(err, fs.ErrNotExist) && !final {
			err = nil // gone since the listing: the running session's git at work
		}
		if err == nil && final {
			if e.Name() == "info" && e.IsDir() {
				// The alternate stays; what git keeps beside it (a
				// commit-graph, the list of packs) was of the objects gone.
				err = removeAllBut(root, "info", "alternates")
			} else {
				err = removeTree(root, e.Name())
			}
		}
		if err != nil {
			return out, fmt.Errorf("release the quarantine of %s: %w", agent, err)
		}
	}
	return out, nil
}

// openRegular opens name in root for reading if it is a regular file (ok
// false if it is not, or no longer there). A running sandbox may have
// replaced what its directory listed: with a link (not followed), or with
// a FIFO, whose open would wait for a writer for good (not waited for:
// O_NONBLOCK, then the file's own type).
func openRegular(root *os.Root, name string) (f *os.File, ok bool, err error) {
	f, err = root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, false, err
	}
	return f, true, nil
}

// readDir lists dir in root, without following a symbolic link out of it.
func readDir(root *os.Root, dir string) ([]os.DirEntry, error) {
	f, err := root.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// ReleaseAll releases every agent's quarantine: at a start, what the
// sessions of a daemon that was killed left there.
func (s *Store) ReleaseAll(ctx context.Context) (map[string]Released, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release the quarantines: %w", err)
	}
	out := map[string]Released{}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		// One agent's quarantine that cannot be read or cleared does not
		// keep the others' objects out.
		r, err := s.Release(ctx, e.Name())
		if err != nil {
			errs = append(errs, err)
		}
		if r.Moved > 0 || len(r.Refused) > 0 {
			out[e.Name()] = r
		}
	}
	return out, errors.Join(errs...)
}

// releaseLoose moves the checked loose objects of the fan-out directory
// fan (named by the first two hex digits) into the shared store.
func (s *Store) releaseLoose(root *os.Root, fan string, final bool, out *Released) error {
	ents, err := readDir(root, fan)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := fan + e.Name()
		if !e.Type().IsRegular() || !isHex(e.Name()) || (len(name) != 40 && len(name) != 64) {
			continue // git's temporary files of a session cut short
		}
		if s.nameLen != 0 && len(name) != s.nameLen {
			out.Refused = append(out.Refused, name+": named for another object format than the repository's")
			continue
		}
		_, serr := os.Lstat(filepath.Join(s.shared, fan, e.Name()))
		if serr == nil && !final {
			continue // in the store: what a Move needs is there; Release checks it
		}
		in, ok, err := openRegular(root, filepath.Join(fan, e.Name()))
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		var why string
		if serr == nil {
			// The store has it (git writes an object again where it cannot
			// touch the store's copy): nothing to move, but a forgery of
			// it says what the session was at.
			why = checkLoose(in, name)
		} else {
			why, err = s.moveLoose(in, fan, e.Name())
		}
		in.Close()
		if err != nil {
			return err
		}
		if why != "" {
			out.Refused = append(out.Refused, name+": "+why)
			continue
		}
		out.Moved++
	}
	return nil
}

// moveLoose copies the loose object in into the shared store, checks the
// copy (no sandbox can write it) and gives it its name there; why says what
// was wrong with an object left out.
func (s *Store) moveLoose(in *os.File, fan, rest string) (why string, err error) {
	dst := filepath.Join(s.shared, fan)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dst, "tmp_obj_")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return "", err
	}
	why = checkLoose(tmp, fan+rest)
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if why != "" {
		return why, nil
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return "", err
	}
	if err := os.Link(tmp.Name(), filepath.Join(dst, rest)); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return "", nil
}

// checkLoose reads a loose object (zlib of "TYPE SIZE\0CONTENT") and says
// what is wrong with it under name, "" if nothing.
func checkLoose(r io.Reader, name string) string {
	h := newHash(name)
	if h == nil {
		return "not an object name"
	}
	z, err := zlib.NewReader(r)
	if err != nil {
		return "not a loose object: " + err.Error()
	}
	defer z.Close()
	// The header, "commit 1234\0", and what came with it of the content.
	var head [32]byte
	n, nul := 0, -1
	for nul < 0 && n < len(head) {
		m, err := z.Read(head[n:])
		n += m
		nul = bytes.IndexByte(head[:n], 0)
		if err != nil && nul < 0 {
			return "not a loose object: no header"
		}
	}
	if nul < 0 {
		return "not a loose object: no header"
	}
	kind, sizeText, ok := strings.Cut(string(head[:nul]), " ")
	size, err := strconv.ParseInt(sizeText, 10, 64)
	// git's own reading: decimal digits, no sign, no leading zero.
	canonical := sizeText != "" && strings.Trim(sizeText, "0123456789") == "" && (sizeText == "0" || sizeText[0] != '0')
	if !ok || err != nil || !canonical || !validType(kind) {
		return fmt.Sprintf("not a loose object: header %q", head[:nul])
	}
	h.Write(head[:n])
	// No further than the header says, and one byte to tell more: a small
	// file that inflates without end costs no more than its claim.
	rest, err := io.CopyN(h, z, size-int64(n-nul-1)+1)
	if err != nil && err != io.EOF {
		return "not a loose object: " + err.Error()
	}
	switch got := int64(n-nul-1) + rest; {
	case got > size:
		return fmt.Sprintf("more content than the %d bytes its header says", size)
	case got < size:
		return fmt.Sprintf("%d bytes of content, its header says %d", got, size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != name {
		return "its content is object " + sum
	}
	return ""
}

func validType(kind string) bool {
	switch kind {
	case "blob", "tree", "commit", "tag":
		return true
	}
	return false
}

// newHash is the hash of an object named name: SHA-1 for 40 hex digits,
// SHA-256 for 64; nil for anything else.
func newHash(name string) hash.Hash {
	switch len(name) {
	case 40:
		return sha1.New()
	case 64:
		return sha256.New()
	}
	return nil
}

// releasePacks unpacks each pack of the quarantine's pack directory into
// the shared store (unpack names every object by its content). A pack git
// cannot read whole is reported refused, and so is one git did not finish
// in the release's time: the time is the daemon's, spent on the agent's
// behalf, and a pack that took it once would take it again at every try.
func (s *Store) releasePacks(ctx context.Context, root *os.Root, agent string, final bool, out *Released) error {
	ents, err := readDir(root, "pack")
	if err != nil {
		return err
	}
	packCtx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".pack") || !e.Type().IsRegular() {
			continue
		}
		f, ok, err := openRegular(root, filepath.Join("pack", e.Name()))
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		why, n, err := s.unpackOnce(packCtx, f, agent, e.Name())
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			why, err = s.outOfTime(), nil
			if fi, serr := f.Stat(); serr == nil && !final {
				s.rememberSlow(agent, e.Name(), fi.Size())
			}
		}
		f.Close()
		if err != nil {
			return err
		}
		if why != "" {
			out.Refused = append(out.Refused, "pack "+e.Name()+": "+why)
		}
		out.Moved += n
	}
	return nil
}

// unpackOnce is unpack, but for a pack that ran out of time in a Move of
// this session: that one is refused at once.
func (s *Store) unpackOnce(ctx context.Context, f *os.File, agent, name string) (why string, n int, err error) {
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	s.mu.Lock()
	size, slow := s.slow[agent][name]
	s.mu.Unlock()
	if slow && size == fi.Size() {
		return s.outOfTime(), 0, nil
	}
	return s.unpack(ctx, f, agent)
}

// outOfTime is why a pack git did not finish in time is refused.
func (s *Store) outOfTime() string {
	return fmt.Sprintf("git did not finish with it within %v", s.Timeout)
}

// rememberSlow notes that git ran out of time on the pack name, of size
// bytes, in agent's quarantine.
func (s *Store) rememberSlow(agent, name string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slow[agent] == nil {
		s.slow[agent] = map[string]int64{}
	}
	s.slow[agent][name] = size
}

// forgetSlow drops what rememberSlow noted of agent: its quarantine has
// been cleared.
func (s *Store) forgetSlow(agent string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.slow, agent)
}

// unpackLimit is git's own transfer.unpackLimit: a pack of fewer objects
// is unpacked into loose objects, a larger one kept as a pack.
const unpackLimit = 100

// What git may take to unpack a pack: address space of 512 MiB and a
// hundred times the pack's size, 8 GiB at most; ten minutes for all the
// packs of a release (Store.Timeout).
const (
	unpackMemBase    = 512 << 20
	unpackMemPerByte = 100
	unpackMemMax     = 8 << 30
	unpackTimeout    = 10 * time.Minute
)

// unpack puts the objects of the pack f into the shared store: git unpack-objects
// for a small pack, git index-pack --stdin (which indexes each object by
// its content and writes the pack into the store) for a large one. why
// says why git refused it, n how many objects it held.
func (s *Store) unpack(ctx context.Context, f *os.File, agent string) (why string, n int, err error) {
	// A pack's header counts its objects: bytes 8-11, big-endian.
	var head [12]byte
	if _, err := io.ReadFull(f, head[:]); err != nil || string(head[:4]) != "PACK" {
		return "not a pack", 0, nil
	}
	n = int(head[8])<<24 | int(head[9])<<16 | int(head[10])<<8 | int(head[11])
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	op := "unpack-objects"
	args := []string{"--git-dir", s.git, "unpack-objects", "-q"}
	if n >= unpackLimit {
		op = "index-pack"
		args = []string{"--git-dir", s.git, "-c", "pack.threads=1", "index-pack", "--stdin"}
	}
	// git runs for the daemon, on a pack a sandbox wrote: a delta of a
	// few bytes can ask it to build an object of gigabytes. Its address
	// space is bounded by the pack's size, far above any real pack's
	// inflation, and its time by the release's.
	mem := min(unpackMemBase+unpackMemPerByte*fi.Size(), unpackMemMax)
	out, err := s.Exec(ctx, Command{
		Agent: agent,
		Argv: append([]string{"/bin/sh", "-c", `ulimit -v "$1" && shift && exec "$@"`, "sh",
			strconv.FormatInt(mem>>10, 10), s.Git}, args...), // KiB, as ulimit counts
		// The shared store alone, whatever the daemon's environment
		// names; no global configuration (it is in HOME, which sessions
		// write).
		Env:    append(os.Environ(), "GIT_OBJECT_DIRECTORY="+s.shared, "GIT_CONFIG_GLOBAL="+os.DevNull),
		Stdin:  f,
		Memory: mem,
	})
	var gerr *GitError
	switch {
	case ctx.Err() != nil:
		return "", 0, ctx.Err()
	case errors.As(err, &gerr):
		// What git wrote before it stopped is in the store, each object
		// under its content's name: harmless, and not counted.
		return "git " + op + " cannot read it whole: " + gitSays(out, gerr), 0, nil
	case err != nil:
		return "", 0, fmt.Errorf("git %s: %w", op, err)
	}
	return "", n, nil
}

// gitSays is why git failed: the first line of what it wrote (index-pack
// writes the pack's name on standard output only once it succeeded), else
// how it ended.
func gitSays(out []byte, gerr *GitError) string {
	if line := firstLine(strings.TrimSpace(string(out))); line != "" {
		return line
	}
	return gerr.Status
}

// removeAllBut removes everything in dir of root but keep.
func removeAllBut(root *os.Root, dir, keep string) error {
	ents, err := readDir(root, dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() != keep {
			if err := removeTree(root, filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeDepth is how many directory levels removeTree descends with a
// directory open at each; below, it moves what is left up to the top.
const removeDepth = 32

// removeTree removes name from root and everything below it, with at
// most removeDepth directories open at once. Root.RemoveAll holds one
// open for each level it descends: a sandbox can nest directories a
// million deep, and clearing them would take the daemon's every file
// descriptor (its logs', its sockets', its database's), for every agent,
// while it lasted. A directory below removeDepth is moved to the top of
// root under a new name and removed from there. Call it only while no
// process writes root.
func removeTree(root *os.Root, name string) error {
	r := remover{root: root, pending: []string{name}}
	for len(r.pending) > 0 {
		next := r.pending[len(r.pending)-1]
		r.pending = r.pending[:len(r.pending)-1]
		if err := r.remove(next, 1); err != nil {
			return err
		}
	}
	return nil
}

type remover struct {
	root    *os.Root
	pending []string // directories moved up to the top, to remove
	moved   int      // how many: the next one's name
}

// remove removes path, depth levels below the top, and what it holds.
func (r *remover) remove(path string, depth int) error {
	switch fi, err := r.root.Lstat(path); {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return r.root.Remove(path) // a file, or a link: never followed
	}
	for pass := 0; ; pass++ {
		err := r.removeEntries(path, depth)
		if err == nil {
			err = r.root.Remove(path)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case errors.Is(err, syscall.ENOTEMPTY) && pass < 2:
			continue // an entry the listing did not show as it changed: again
		}
		return err
	}
}

// removeEntries removes what the directory path holds.
func (r *remover) removeEntries(path string, depth int) error {
	f, err := r.root.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(1024)
		for _, e := range ents {
			p := path + "/" + e.Name()
			var err error
			switch {
			case !e.IsDir():
				err = r.root.Remove(p)
			case depth < removeDepth:
				err = r.remove(p, depth+1)
			default:
				err = r.moveUp(p)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if errors.Is(err, io.EOF) || len(ents) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// moveUp moves the directory path to the top of the root, under a name
// nothing there has, to be removed from there.
func (r *remover) moveUp(path string) error {
	for {
		to := ".swarmd-removing-" + strconv.Itoa(r.moved)
		r.moved++
		switch _, err := r.root.Lstat(to); {
		case err == nil:
			continue // the sandbox left one: removed as the release lists it
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		if err := r.root.Rename(path, to); err != nil {
			return err
		}
		r.pending = append(r.pending, to)
		return nil
	}
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
