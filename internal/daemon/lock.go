package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/store"
)

// stateLock is the one-daemon-per-state-dir lock: an flock on the state
// directory itself, which no path operation inside it can replace (deleting
// swarmd.lock lets nobody in), plus <state_dir>/swarmd.lock holding the
// owner's pid for the error message, and on a second line the boot its
// leases name (namesake.go). The kernel drops the flock when the process
// dies, so a kill -9 never leaves a stale lock.
type stateLock struct {
	dir, f *os.File
	// prev is the last holder's pid and boot as its file said: a daemon
	// that died holding the lock (a clean stop leaves the file empty).
	prev store.Lease
}

// errLocked is returned when another live daemon holds the lock.
var errLocked = errors.New("state dir is in use")

func acquireLock(stateDir, boot string) (*stateLock, error) {
	dir, err := os.Open(stateDir)
	if err != nil {
		return nil, fmt.Errorf("open state dir for locking: %w", err)
	}
	path := filepath.Join(stateDir, "swarmd.lock")
	if err := unix.Flock(int(dir.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		dir.Close()
		return nil, lockedBy(stateDir, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	var prev store.Lease
	if err == nil {
		prev = lockHolder(f)
		if err = f.Truncate(0); err == nil {
			_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"+boot+"\n"), 0)
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		dir.Close()
		return nil, fmt.Errorf("write lock file %s: %w", path, err)
	}
	return &stateLock{dir: dir, f: f, prev: prev}, nil
}

// last is the lock's last holder before this one (zero: none known).
func (l *stateLock) last() store.Lease {
	if l == nil {
		return store.Lease{}
	}
	return l.prev
}

// lockHolder reads the pid and boot a lock file's last holder wrote (zero
// when it wrote no boot: an older daemon's, or a clean stop's empty file).
func lockHolder(f *os.File) store.Lease {
	var buf [512]byte
	n, _ := f.ReadAt(buf[:], 0)
	first, rest, _ := strings.Cut(string(buf[:n]), "\n")
	boot, _, _ := strings.Cut(rest, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || strings.TrimSpace(boot) == "" {
		return store.Lease{}
	}
	return store.Lease{PID: pid, Boot: strings.TrimSpace(boot)}
}

// Release unlocks; the file stays so that a waiting reader never sees it vanish.
func (l *stateLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := errors.Join(l.f.Close(), l.dir.Close())
	l.f, l.dir = nil, nil
	return err
}

// StateDirInUse reports whether a daemon holds stateDir's lock (a missing
// directory is not in use). A command that would create the store there
// must not while one does: its swarm.db was deleted under it, and a new
// empty one would split the swarm in two.
func StateDirInUse(stateDir string) (bool, error) {
	dir, err := os.Open(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open state dir %s: %w", stateDir, err)
	}
	defer dir.Close()
	err = unix.Flock(int(dir.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock %s: %w", stateDir, err)
	}
	return false, unix.Flock(int(dir.Fd()), unix.LOCK_UN)
}

// HoldStateDir takes stateDir's lock as a daemon does, for a command that
// must not run beside one (a restore of the store): no daemon starts there
// until release. It writes no pid: the lock file keeps its last daemon's,
// which the next start reads.
func HoldStateDir(stateDir string) (release func() error, err error) {
	dir, err := os.Open(stateDir)
	if err != nil {
		return nil, fmt.Errorf("open state dir for locking: %w", err)
	}
	if err := unix.Flock(int(dir.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		dir.Close()
		return nil, lockedBy(stateDir, err)
	}
	return dir.Close, nil
}

// lockedBy is the error of a lock of stateDir that flock refused with err:
// errLocked naming the daemon's pid when another holds it.
func lockedBy(stateDir string, err error) error {
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("lock %s: %w", stateDir, err)
	}
	pid := "unknown"
	if b, err := os.ReadFile(filepath.Join(stateDir, "swarmd.lock")); err == nil {
		if first, _, _ := strings.Cut(string(b), "\n"); strings.TrimSpace(first) != "" {
			pid = strings.TrimSpace(first)
		}
	}
	return fmt.Errorf("%w: %s is locked by swarmd pid %s (stop that daemon first)", errLocked, stateDir, pid)
}
