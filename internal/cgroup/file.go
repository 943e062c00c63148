package cgroup

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// The files of a tree's cgroup are read and written at every session's
// start and end (cgroup.procs, cgroup.events, cpu.stat, cgroup.kill). They
// go through plain system calls: os.ReadFile would also stat each file and
// register it with the runtime's poller (cgroupfs files can be polled, so
// the registration succeeds) and remove it again, three more system calls
// per file for nothing a cgroup file needs.

// readFile reads the whole of a small file.
func readFile(path string) ([]byte, error) {
	fd, err := openFile(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// writeFile writes v to an existing file in one write, as the kernel's
// cgroup files take their values.
func writeFile(path, v string) error {
	fd, err := openFile(path, unix.O_WRONLY)
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

func openFile(path string, mode int) (int, error) {
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
