// Package sysfile reads and writes the kernel's small files (/proc,
// cgroupfs) with plain system calls. os.ReadFile would also stat each file,
// allocate an *os.File, and register the descriptor with the runtime's
// poller (cgroupfs files can be polled, so the registration succeeds) and
// remove it again: several more system calls per file, for files that
// process supervision reads once per child per scan and a cgroup's owner
// at every session's start and end.
package sysfile

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// Read reads the whole of a small file into buf, grown as needed, and
// returns it; on an error it returns buf (emptied if the file could not be
// opened) for the caller to reuse. Errors are *fs.PathError.
func Read(path string, buf []byte) ([]byte, error) {
	fd, err := open(path, unix.O_RDONLY)
	if err != nil {
		return buf[:0], err
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return buf, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// Write writes v to an existing file in one write, as the kernel's files
// take their values. Errors are *fs.PathError.
func Write(path, v string) error {
	fd, err := open(path, unix.O_WRONLY)
	if err != nil {
		return err
	}
	for {
		_, err = unix.Write(fd, []byte(v))
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

func open(path string, mode int) (int, error) {
	for {
		fd, err := unix.Open(path, mode|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}
