package logs

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// packedFile is a log as it was archived; removeOriginals compares the file
// with it before deleting.
type packedFile struct {
	name    string
	size    int64
	modTime time.Time
}

// archiveFile is one archive of an agent, with the time its name carries.
type archiveFile struct {
	path  string
	stamp time.Time
}

// Archive packs every file in logs/<agent>/ into one new tar.gz under
// archive/<agent>/, removes the originals, then prunes the agent's archives.
// It returns the archive's path, or "" and nil when there was nothing to
// archive.
//
// The archive is written to a ".tmp-" file in the archive directory, fsynced,
// renamed into place and the directory fsynced; only then are the originals
// removed. A crash before the rename leaves the originals intact (and a temp
// file for Startup to remove); a crash after it leaves a complete archive and
// perhaps some originals, which the next Archive packs again into a new
// archive: a duplicate, never a loss.
//
// A non-empty path with an error means the archive is complete but removing
// the originals or pruning failed. ctx cancels an archive in progress, leaving
// the originals as they were.
func (s *Store) Archive(ctx context.Context, agent string, now time.Time) (string, error) {
	return s.archive(ctx, "archive", agent, now, nil)
}

// ArchiveBefore is Archive of the sessions before seq only: their logs and
// prompts ("<n>.log", "<n>.prompt.md" with n < seq). A daemon's stop leaves
// its agents' logs where they are, and the next start archives them with
// it, in the background: the sessions it starts have seq or later, so
// their files are never taken while in use. Other files stay for the
// agent's next Archive.
func (s *Store) ArchiveBefore(ctx context.Context, agent string, seq uint32, now time.Time) (string, error) {
	return s.archive(ctx, "archive earlier sessions", agent, now, func(name string) bool {
		n, ok := fileSeq(name)
		return ok && n < seq
	})
}

// archive is Archive of the files take accepts (nil: all).
func (s *Store) archive(ctx context.Context, op, agent string, now time.Time, take func(name string) bool) (string, error) {
	if err := checkAgent(agent); err != nil {
		return "", opErr(op, agent, err)
	}
	defer s.lock(agent)()

	path, packed, err := s.pack(ctx, agent, now, take)
	if err != nil {
		return "", opErr(op, agent, err)
	}
	var errs []error
	if path != "" {
		if err := s.removeOriginals(agent, packed); err != nil {
			errs = append(errs, fmt.Errorf("archived to %s but: %w", path, err))
		}
	}
	if _, err := s.prune(agent, now); err != nil {
		errs = append(errs, err)
	}
	if err := joinErrs(errs...); err != nil {
		return path, opErr(op, agent, err)
	}
	return path, nil
}

// LogAgents are the agents with a log directory: those whose logs a start
// may find left by the run before.
func (s *Store) LogAgents() ([]string, error) {
	entries, err := os.ReadDir(s.logsRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, opErr("list log directories", "", err)
	}
	var agents []string
	for _, e := range entries {
		if e.IsDir() && checkAgent(e.Name()) == nil {
			agents = append(agents, e.Name())
		}
	}
	return agents, nil
}

// PrepareArchive creates the agent's archive directory, durably, ahead of
// its first Archive. The next start archives what a daemon's stop left of
// every agent at once (and an agent stopped on its own archives at its
// stop): creating their directories then, hundreds of directory creations
// and syncs, would queue on the state dir's lock; the daemon prepares them
// once its start has settled.
func (s *Store) PrepareArchive(agent string) error {
	if err := checkAgent(agent); err != nil {
		return opErr("prepare archive", agent, err)
	}
	dir := s.ArchiveDir(agent)
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return opErr("prepare archive", agent, err)
	}
	if err := s.syncArchiveDirs(dir, true); err != nil {
		return opErr("prepare archive", agent, err)
	}
	return nil
}

// pack writes the regular files of logs/<agent>/ that take accepts (nil:
// all) into a new, durable archive
// and returns its path and what it holds. It never touches the originals; on
// any failure the temp file is removed.
func (s *Store) pack(ctx context.Context, agent string, now time.Time, take func(name string) bool) (string, []packedFile, error) {
	src := s.LogDir(agent)
	names, err := s.logFiles(agent, src)
	if take != nil {
		names = slices.DeleteFunc(names, func(n string) bool { return !take(n) })
	}
	if err != nil || len(names) == 0 {
		return "", nil, err
	}

	dir := s.ArchiveDir(agent)
	_, statErr := os.Stat(dir)
	newDir := statErr != nil
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", nil, fmt.Errorf("create archive directory: %w", err)
	}
	dest, err := s.nextArchivePath(agent, now)
	if err != nil {
		return "", nil, err
	}

	tmp, err := os.CreateTemp(dir, tmpPrefix+agent+"-*"+archiveExt)
	if err != nil {
		return "", nil, fmt.Errorf("create temp archive: %w", err)
	}
	closed, renamed := false, false
	defer func() {
		if !closed {
			_ = tmp.Close()
		}
		if !renamed {
			_ = os.Remove(tmp.Name())
		}
	}()

	var w io.Writer = tmp
	if s.wrapTemp != nil {
		w = s.wrapTemp(w)
	}
	var size int64
	packed := make([]packedFile, 0, len(names))
	pool, level := &s.gzips, gzip.DefaultCompression
	if s.small(src, names) {
		pool, level = &s.fastGzips, gzip.BestSpeed
	}
	select {
	case s.compressing <- struct{}{}:
	case <-ctx.Done():
		return "", nil, fmt.Errorf("write %s: %w", tmp.Name(), ctx.Err())
	}
	zw := gzipWriter(pool, level, w)
	compressed := false
	doneCompressing := func() {
		if !compressed {
			compressed = true
			pool.Put(zw)
			<-s.compressing
		}
	}
	defer doneCompressing()
	tw := tar.NewWriter(zw)
	for _, name := range names {
		p, err := addFile(ctx, tw, src, name)
		if err != nil {
			return "", nil, fmt.Errorf("write %s: %w", tmp.Name(), err)
		}
		packed = append(packed, p)
		size += p.size
	}
	if err := tw.Close(); err != nil {
		return "", nil, fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := zw.Close(); err != nil {
		return "", nil, fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	doneCompressing() // the syncs below need neither the slot nor the writer
	if err := tmp.Chmod(0o640); err != nil {
		return "", nil, fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	// Our file and our directories are synced, never the whole file
	// system: a syncfs would wait for every dirty page on it (a build's, a
	// checkout's), not only ours. Archives made at once (a daemon's stop
	// archives every agent) fsync concurrently, and the journal commits
	// those together.
	if err := tmp.Sync(); err != nil {
		return "", nil, fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	closed = true
	if err := tmp.Close(); err != nil {
		return "", nil, fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return "", nil, fmt.Errorf("rename archive into place: %w", err)
	}
	renamed = true
	// Until the directories are synced the rename may not survive a crash,
	// so the originals must stay: an error here keeps them. The parents are
	// synced too when MkdirAll may just have created them.
	if err := s.syncArchiveDirs(dir, newDir); err != nil {
		return "", nil, err
	}
	s.log.Info("archived session logs", zap.String("agent", agent), zap.String("archive", dest),
		zap.Int("files", len(names)), zap.Int64("bytes", size))
	return dest, packed, nil
}

// smallArchive is the size under which logs are compressed at
// gzip.BestSpeed: the default level's deeper search saves a few KB there,
// and cost half the CPU of a daemon's stop, which archives every agent's
// short last session at once.
const smallArchive = 256 << 10

// small reports whether the files in dir add up to less than smallArchive.
func (s *Store) small(dir string, names []string) bool {
	var total int64
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(dir, n))
		if err != nil {
			return false
		}
		if total += fi.Size(); total >= smallArchive {
			return false
		}
	}
	return true
}

// gzipWriter is a gzip writer to w at level, reused from pool (which holds
// writers of that level) when one is there.
func gzipWriter(pool *sync.Pool, level int, w io.Writer) *gzip.Writer {
	if zw, ok := pool.Get().(*gzip.Writer); ok {
		zw.Reset(w)
		return zw
	}
	zw, _ := gzip.NewWriterLevel(w, level) // a valid level: no error
	return zw
}

// logFiles are the regular files of an agent's log directory src, the
// ones an archive takes.
func (s *Store) logFiles(agent, src string) ([]string, error) {
	entries, err := os.ReadDir(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read log directory: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			// Symlinks and directories are not ours; leave them where they are.
			s.log.Warn("not archiving non-regular file", zap.String("agent", agent),
				zap.String("path", filepath.Join(src, e.Name())))
			continue
		}
		names = append(names, e.Name())
	}
	return names, nil
}

// syncArchiveDirs makes a rename into dir durable: dir, and its parents
// when MkdirAll may just have created them. The parents are shared by
// every agent, so their fsyncs are coalesced; the state dir's, once per
// process (the archive root's entry in it is durable after one).
func (s *Store) syncArchiveDirs(dir string, newDir bool) error {
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	if !newDir {
		return nil
	}
	if err := s.rootSync.do(func() error { return syncDir(s.archiveRoot) }); err != nil {
		return fmt.Errorf("sync %s: %w", s.archiveRoot, err)
	}
	if s.rootDurable.Load() {
		return nil
	}
	parent := filepath.Dir(s.archiveRoot)
	if err := s.parentSync.do(func() error { return syncDir(parent) }); err != nil {
		return fmt.Errorf("sync %s: %w", parent, err)
	}
	s.rootDurable.Store(true)
	return nil
}

// addFile copies one log into the archive, as large as it is when opened. A
// live writer may append meanwhile; removeOriginals notices and keeps the file.
func addFile(ctx context.Context, tw *tar.Writer, dir, name string) (packedFile, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return packedFile{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return packedFile{}, err
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Size:     info.Size(),
		Mode:     int64(info.Mode().Perm()),
		ModTime:  info.ModTime(),
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return packedFile{}, err
	}
	n, err := io.Copy(tw, io.LimitReader(ctxReader{ctx, f}, hdr.Size))
	if err != nil {
		return packedFile{}, err
	}
	if n != hdr.Size {
		return packedFile{}, fmt.Errorf("%w: %s shrank from %d to %d bytes", ErrChanged, name, hdr.Size, n)
	}
	return packedFile{name: name, size: info.Size(), modTime: info.ModTime()}, nil
}

// nextArchivePath names a new archive after now, or just after the newest
// existing one if that is later (same millisecond, or a clock that stepped
// back). Names then sort in creation order, so the archive just written is
// always the newest: prune keeps it, and Open prefers it.
func (s *Store) nextArchivePath(agent string, now time.Time) (string, error) {
	arcs, err := s.listArchives(agent)
	if err != nil {
		return "", err
	}
	stamp := now.UTC().Truncate(time.Millisecond)
	if len(arcs) > 0 {
		if newest := arcs[len(arcs)-1].stamp; !stamp.After(newest) {
			stamp = newest.Add(time.Millisecond)
		}
	}
	return filepath.Join(s.ArchiveDir(agent), agent+"-"+stamp.Format(stampLayout)+archiveExt), nil
}

// removeOriginals deletes the archived files, except one that changed since
// it was archived: that one has data the archive lacks, so it stays for the
// next Archive and the change is reported as ErrChanged. Syncing the
// directory is not needed: a removal lost in a crash only means that file is
// archived again.
func (s *Store) removeOriginals(agent string, packed []packedFile) error {
	var errs, changed []error
	for _, p := range packed {
		path := filepath.Join(s.LogDir(agent), p.name)
		info, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !info.Mode().IsRegular() || info.Size() != p.size || !info.ModTime().Equal(p.modTime) {
			changed = append(changed, fmt.Errorf("%s (%d bytes archived, %d now)", p.name, p.size, info.Size()))
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(changed) > 0 {
		errs = append(errs, fmt.Errorf("%w, kept for the next archive (is a session still running?): %w",
			ErrChanged, joinErrs(changed...)))
	}
	return joinErrs(errs...)
}

// listArchives returns an agent's archives, oldest first. Files that are not
// named like an archive of this agent (temp files included) are ignored.
func (s *Store) listArchives(agent string) ([]archiveFile, error) {
	dir := s.ArchiveDir(agent)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read archive directory: %w", err)
	}
	var arcs []archiveFile
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		stamp, ok := parseArchiveName(agent, e.Name())
		if !ok {
			continue
		}
		arcs = append(arcs, archiveFile{path: filepath.Join(dir, e.Name()), stamp: stamp})
	}
	slices.SortFunc(arcs, func(a, b archiveFile) int {
		if c := a.stamp.Compare(b.stamp); c != 0 {
			return c
		}
		return strings.Compare(a.path, b.path)
	})
	return arcs, nil
}

func parseArchiveName(agent, name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, agent+"-")
	if !ok {
		return time.Time{}, false
	}
	rest, ok = strings.CutSuffix(rest, archiveExt)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(stampLayout, rest)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// Prune removes an agent's archives beyond the newest keep, and those whose
// name says they are older than maxAge. Other files are left alone.
func (s *Store) Prune(agent string, now time.Time) (removed int, err error) {
	if err := checkAgent(agent); err != nil {
		return 0, opErr("prune", agent, err)
	}
	defer s.lock(agent)()
	n, err := s.prune(agent, now)
	if err != nil {
		return n, opErr("prune", agent, err)
	}
	return n, nil
}

func (s *Store) prune(agent string, now time.Time) (int, error) {
	arcs, err := s.listArchives(agent)
	if err != nil {
		return 0, err
	}
	cutoff := now.Add(-s.maxAge)
	removed := 0
	var errs []error
	for i, a := range arcs {
		newer := len(arcs) - 1 - i
		if newer < s.keep && !a.stamp.Before(cutoff) {
			continue
		}
		if err := os.Remove(a.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("prune: %w", err))
			continue
		}
		removed++
		s.log.Info("pruned log archive", zap.String("agent", agent), zap.String("archive", a.path),
			zap.Time("archived", a.stamp))
	}
	return removed, joinErrs(errs...)
}

// Startup cleans up after a previous run: it removes the temp files an
// interrupted Archive left in every archive directory, then prunes every
// agent's archives. Directories that are not named like an agent are skipped.
func (s *Store) Startup(now time.Time) error {
	entries, err := os.ReadDir(s.archiveRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return opErr("startup", "", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		agent := e.Name()
		if checkAgent(agent) != nil {
			s.log.Warn("skipping archive directory that is not an agent's",
				zap.String("path", filepath.Join(s.archiveRoot, agent)))
			continue
		}
		if err := s.startupAgent(agent, now); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", agent, err))
		}
	}
	if err := joinErrs(errs...); err != nil {
		return opErr("startup", "", err)
	}
	return nil
}

func (s *Store) startupAgent(agent string, now time.Time) error {
	defer s.lock(agent)()
	dir := s.ArchiveDir(agent)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tmpPrefix) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		s.log.Info("removed unfinished archive", zap.String("agent", agent), zap.String("path", path))
	}
	if _, err := s.prune(agent, now); err != nil {
		errs = append(errs, err)
	}
	return joinErrs(errs...)
}

// ctxReader stops a long copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
