package logs

import (
	"archive/tar"
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// SessionRef says where one session's log is.
type SessionRef struct {
	Seq     uint32
	Live    bool   // in logs/<agent>/; otherwise in Archive
	Archive string // path of the newest archive holding it; "" when Live
	Size    int64  // bytes of the log, uncompressed
}

// Sessions lists the sessions of an agent, live or archived, by seq. A seq
// appears once: live if it is live, otherwise from the newest archive that
// holds it (the one Open reads). An archive that cannot be read is logged and
// skipped, so one bad file does not hide the rest.
func (s *Store) Sessions(agent string) ([]SessionRef, error) {
	if err := checkAgent(agent); err != nil {
		return nil, opErr("sessions", agent, err)
	}
	refs, err := s.sessions(agent)
	if err != nil {
		return nil, opErr("sessions", agent, err)
	}
	return refs, nil
}

func (s *Store) sessions(agent string) ([]SessionRef, error) {
	seen := make(map[uint32]SessionRef)
	entries, err := os.ReadDir(s.LogDir(agent))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read log directory: %w", err)
	}
	for _, e := range entries {
		seq, ok := parseSeq(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // archived since ReadDir; the archives below have it
		}
		if err != nil {
			return nil, err
		}
		seen[seq] = SessionRef{Seq: seq, Live: true, Size: info.Size()}
	}

	arcs, err := s.listArchives(agent)
	if err != nil {
		return nil, err
	}
	for _, a := range slices.Backward(arcs) {
		err := walkArchive(a.path, func(h *tar.Header, _ io.Reader) bool {
			if seq, ok := parseSeq(h.Name); ok && h.Typeflag == tar.TypeReg {
				if _, dup := seen[seq]; !dup {
					seen[seq] = SessionRef{Seq: seq, Archive: a.path, Size: h.Size}
				}
			}
			return false
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) { // pruned meanwhile: nothing to list
			s.log.Warn("skipping unreadable log archive", zap.String("agent", agent),
				zap.String("archive", a.path), zap.Error(err))
		}
	}

	refs := make([]SessionRef, 0, len(seen))
	for _, r := range seen {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, func(a, b SessionRef) int { return cmp.Compare(a.Seq, b.Seq) })
	return refs, nil
}

// Open returns a reader of one session's log: the live file if there is one,
// otherwise the copy in the newest archive holding it. The caller closes it.
// A session that exists nowhere is a *NoSessionError (ErrNoSession).
func (s *Store) Open(agent string, seq uint32) (io.ReadCloser, SessionRef, error) {
	if err := checkAgent(agent); err != nil {
		return nil, SessionRef{}, opErr("open", agent, err)
	}
	rc, ref, err := s.open(agent, seq)
	if err != nil {
		return nil, SessionRef{}, opErr("open", agent, err)
	}
	return rc, ref, nil
}

func (s *Store) open(agent string, seq uint32) (io.ReadCloser, SessionRef, error) {
	f, err := os.Open(s.LogPath(agent, seq))
	switch {
	case err == nil:
		info, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, SessionRef{}, err
		}
		return f, SessionRef{Seq: seq, Live: true, Size: info.Size()}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, SessionRef{}, err
	}

	// Not live (or archived since): the newest archive that has it.
	arcs, err := s.listArchives(agent)
	if err != nil {
		return nil, SessionRef{}, err
	}
	want := strconv.FormatUint(uint64(seq), 10) + logExt
	for _, a := range slices.Backward(arcs) {
		rc, size, err := openInArchive(a.path, want)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			s.log.Warn("skipping unreadable log archive", zap.String("agent", agent),
				zap.String("archive", a.path), zap.Error(err))
			continue
		}
		return rc, SessionRef{Seq: seq, Archive: a.path, Size: size}, nil
	}
	return nil, SessionRef{}, s.noSession(agent, seq)
}

// noSession builds the error that tells the operator what does exist.
func (s *Store) noSession(agent string, seq uint32) error {
	e := &NoSessionError{Agent: agent, Seq: seq}
	refs, err := s.sessions(agent)
	if err != nil {
		s.log.Warn("listing sessions", zap.String("agent", agent), zap.Error(err))
	}
	for _, r := range refs {
		if r.Live {
			e.Live = append(e.Live, r.Seq)
		} else {
			e.Archived = append(e.Archived, r.Seq)
		}
	}
	return e
}

// walkArchive calls fn for every entry of a tar.gz until fn returns true.
func walkArchive(path string, fn func(*tar.Header, io.Reader) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if fn(h, tr) {
			return nil
		}
	}
}

// openInArchive returns a reader positioned on entry name of a tar.gz, or
// fs.ErrNotExist when the archive does not hold it.
func openInArchive(path, name string) (io.ReadCloser, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			_ = zr.Close()
			_ = f.Close()
			if err == io.EOF {
				err = fs.ErrNotExist
			}
			return nil, 0, err
		}
		if h.Name == name && h.Typeflag == tar.TypeReg {
			return &archivedLog{Reader: tr, zr: zr, f: f}, h.Size, nil
		}
	}
}

type archivedLog struct {
	io.Reader
	zr *gzip.Reader
	f  *os.File
}

func (a *archivedLog) Close() error {
	_ = a.zr.Close()
	return a.f.Close()
}

// Follow copies a session's log to w and keeps copying what is appended, like
// tail -f, polling the file. It returns nil when ctx ends or once the file is
// archived or removed (after copying everything written before that). A
// session that is already archived is copied from the archive at once.
func (s *Store) Follow(ctx context.Context, agent string, seq uint32, w io.Writer) error {
	if err := checkAgent(agent); err != nil {
		return opErr("follow", agent, err)
	}
	path := s.LogPath(agent, seq)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		rc, _, err := s.open(agent, seq)
		if err != nil {
			return opErr("follow", agent, err)
		}
		defer rc.Close()
		if _, err := io.Copy(w, ctxReader{ctx, rc}); err != nil && ctx.Err() == nil {
			return opErr("follow", agent, err)
		}
		return nil
	}
	if err != nil {
		return opErr("follow", agent, err)
	}
	defer f.Close()
	if err := s.follow(ctx, f, path, w); err != nil {
		return opErr("follow", agent, fmt.Errorf("session %d: %w", seq, err))
	}
	return nil
}

func (s *Store) follow(ctx context.Context, f *os.File, path string, w io.Writer) error {
	buf := make([]byte, 32<<10)
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	for {
		if err := drain(ctx, f, w, buf); err != nil {
			return err
		}
		gone, err := replaced(f, path)
		if err != nil {
			return err
		}
		if gone {
			// Whatever was written before the removal is still in f.
			return drain(ctx, f, w, buf)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// drain copies f from its offset to its current end, stopping early (without
// error) when ctx ends.
func drain(ctx context.Context, f *os.File, w io.Writer, buf []byte) error {
	for ctx.Err() == nil {
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return fmt.Errorf("write: %w", werr)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
	}
	return nil
}

// replaced reports whether path no longer names the open file f: archived
// (removed), or removed and created anew.
func replaced(f *os.File, path string) (bool, error) {
	cur, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	open, err := f.Stat()
	if err != nil {
		return false, err
	}
	return !os.SameFile(cur, open), nil
}

// Agents are the names with a directory of live logs or of archives (the
// merge queue's gate logs are under "merge"), sorted.
func (s *Store) Agents() ([]string, error) {
	var names []string
	for _, root := range []string{s.logsRoot, s.archiveRoot} {
		entries, err := os.ReadDir(root)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("logs: list agents: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() && checkAgent(e.Name()) == nil {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// HighestSeq is the highest seq of a session agent has a log of, live or
// archived (0: none), reading the archives made at since or later whole
// (zero: all): a log is archived after its file was made, so an archive
// made before since holds nothing made after it. It is for a restore,
// not for a daemon's start. An archive that cannot be read fails it: what
// it holds cannot be known.
func (s *Store) HighestSeq(agent string, since time.Time) (uint32, error) {
	if err := checkAgent(agent); err != nil {
		return 0, opErr("highest seq", agent, err)
	}
	var hi uint32
	entries, err := os.ReadDir(s.LogDir(agent))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, opErr("highest seq", agent, err)
	}
	for _, e := range entries {
		if seq, ok := fileSeq(e.Name()); ok {
			hi = max(hi, seq)
		}
	}
	arcs, err := s.listArchives(agent)
	if err != nil {
		return 0, opErr("highest seq", agent, err)
	}
	for _, a := range arcs {
		if a.stamp.Before(since) {
			continue
		}
		err := walkArchive(a.path, func(h *tar.Header, _ io.Reader) bool {
			if seq, ok := fileSeq(h.Name); ok {
				hi = max(hi, seq)
			}
			return false
		})
		if err != nil {
			return 0, opErr("highest seq", agent, fmt.Errorf("%s: %w", a.path, err))
		}
	}
	return hi, nil
}
