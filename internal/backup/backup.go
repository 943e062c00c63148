// Package backup copies a swarm's SQLite store while its daemon runs, and
// puts such a copy back in its place so that nothing the swarm did since
// is overwritten or mixed up: a restored store has not the sessions, the
// tasks and the gate runs made after its backup, but the state dir has
// their logs and the repository their lines and merges, and their numbers
// must not be given again (Restore).
package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// Settings a backup records in its copy, which a restore reads.
const (
	takenAtKey = "backup/taken_at" // when the copy was taken (RFC 3339)
	takenOfKey = "backup/of"       // the store it was taken of
)

// ErrExists: a backup never replaces a file.
var ErrExists = errors.New("the file exists")

// Copied is what Copy wrote.
type Copied struct {
	Path    string
	Bytes   int64
	TakenAt time.Time
}

// Copy writes a backup of db to path: the store as one transaction saw it
// (the daemon writes on meanwhile), compacted, checked whole by SQLite's
// integrity check, marked with when it was taken, synced, and only then
// given its name, which must be free. A copy cut short (a full disk, an
// interrupt) leaves nothing at path.
func Copy(ctx context.Context, db *store.DB, path string, now time.Time) (Copied, error) {
	fail := func(err error) (Copied, error) { return Copied{}, fmt.Errorf("backup to %s: %w", path, err) }
	abs, err := filepath.Abs(path)
	if err != nil {
		return fail(err)
	}
	if _, err := os.Lstat(abs); err == nil {
		return fail(fmt.Errorf("%w: a backup never replaces a file (give a new name)", ErrExists))
	} else if !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	if abs == db.Path() {
		return fail(errors.New("it is the store itself"))
	}
	dir := filepath.Dir(abs)
	work, err := os.MkdirTemp(dir, ".swarmd-backup-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(work)
	tmp := filepath.Join(work, "swarm.db")
	if err := db.CopyTo(ctx, tmp); err != nil {
		return fail(err)
	}
	if err := mark(ctx, tmp, db.Path(), now); err != nil {
		return fail(err)
	}
	// SQLite made the file by the umask; the store's mail is the
	// operator's alone.
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	n, err := syncFile(tmp)
	if err != nil {
		return fail(err)
	}
	// A link, not a rename: it fails if path appeared meanwhile.
	if err := os.Link(tmp, abs); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fail(fmt.Errorf("%w: a backup never replaces a file (give a new name)", ErrExists))
		}
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return Copied{Path: abs, Bytes: n, TakenAt: now}, nil
}

// mark checks the copy at path whole and records in it when it was taken
// and of what. It leaves the copy one file: no WAL beside it.
func mark(ctx context.Context, path, of string, now time.Time) error {
	c, err := store.Open(ctx, path, store.Options{NoCreate: true})
	if err != nil {
		return err
	}
	err = c.CheckIntegrity(ctx)
	if err == nil {
		err = c.SetSetting(ctx, takenAtKey, now.UTC().Format(time.RFC3339Nano))
	}
	if err == nil {
		err = c.SetSetting(ctx, takenOfKey, of)
	}
	if err := c.Close(); err != nil {
		return err
	}
	if err != nil {
		return err
	}
	for _, extra := range []string{path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(extra); err == nil && fi.Size() > 0 && extra == path+"-wal" {
			return fmt.Errorf("the copy's WAL was not checkpointed at its close (%s)", extra)
		}
		if err := os.Remove(extra); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// syncFile makes path's content durable and returns its size.
func syncFile(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// syncDir makes a new name in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyFile copies from to a new file at to (which must not exist), synced.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(to)
	}
	return err
}
