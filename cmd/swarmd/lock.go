package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// stateLock is the one-daemon-per-state-dir lock: an flock on
// <state_dir>/swarmd.lock holding the owner's pid. The kernel drops it when
// the process dies, so a kill -9 never leaves a stale lock.
type stateLock struct{ f *os.File }

// errLocked is returned when another live daemon holds the lock.
var errLocked = errors.New("state dir is in use")

func acquireLock(stateDir string) (*stateLock, error) {
	path := filepath.Join(stateDir, "swarmd.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			pid := strings.TrimSpace(string(b[:n]))
			if pid == "" {
				pid = "unknown"
			}
			return nil, fmt.Errorf("%w: %s is locked by swarmd pid %s (stop that daemon first)", errLocked, stateDir, pid)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write lock file: %w", err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write lock file: %w", err)
	}
	return &stateLock{f: f}, nil
}

// Release unlocks; the file stays so that a waiting reader never sees it vanish.
func (l *stateLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close()
	l.f = nil
	return err
}
