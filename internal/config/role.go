package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxRoleFile bounds a role prompt: it goes into every session's prompt, so
// anything bigger is a mistaken path.
const maxRoleFile = 1 << 20

// role resolves a role value: an existing file (relative to the config
// directory) is read; a value that looks like a path but names no file is an
// error rather than a one-line prompt nobody meant; anything else is inline.
//
// A role file's text goes into every prompt, and from there into the session
// logs and their archives, so a path is held to what a prompt file can be:
// a regular file under the config's directory or the repository. An absolute
// path reaches further, on purpose, but never into /proc, /sys or /dev
// (role: /proc/self/environ would hand the daemon's environment, API keys
// and all, to every agent).
func (d *decoder) role(value string, line int, key string) (text, file string, ok bool) {
	if strings.TrimSpace(value) == "" {
		d.errorf(line, key, "is empty: give a prompt file path or inline text")
		return "", "", false
	}
	if strings.ContainsAny(value, "\n\x00") {
		return value, "", true
	}
	p := value
	if !filepath.IsAbs(p) {
		p = filepath.Join(d.dir, p)
	}
	fi, err := os.Stat(p)
	switch {
	case err == nil && fi.Mode().IsRegular():
		data, err := d.readRole(p, filepath.IsAbs(value))
		if err != nil {
			d.errorf(line, key, "%v", err)
			return "", "", false
		}
		if strings.TrimSpace(string(data)) == "" {
			d.errorf(line, key, "role file %s is empty (write the agent's instructions into it)", p)
			return "", "", false
		}
		return string(data), p, true
	case !looksLikePath(value):
		return value, "", true
	case err == nil:
		d.errorf(line, key, "role file %s is %s, not a regular file (point role at a prompt file)", p, fileKind(fi.Mode()))
	case errors.Is(err, fs.ErrNotExist):
		d.errorf(line, key, "role file %s does not exist (relative paths are relative to the config file)", p)
	default:
		d.errorf(line, key, "role file %s: %v", p, unwrapPath(err))
	}
	return "", "", false
}

// specialDirs hold kernel and device files, never prompts.
var specialDirs = []string{"/proc", "/sys", "/dev"}

// specialFS are the file systems of kernel state, wherever they are mounted.
var specialFS = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "procfs",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroupfs",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2fs",
	0x62656570:               "configfs", // CONFIGFS_MAGIC, not in x/sys
	unix.EFIVARFS_MAGIC:      "efivarfs",
}

// readRole reads the role file at p (absolute; absolute says the config
// gave it so), refusing what is not a prompt file. It opens the file
// without blocking and checks the open file itself, so a FIFO or a file
// swapped in after the Stat is refused too.
func (d *decoder) readRole(p string, absolute bool) ([]byte, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, fmt.Errorf("role file %s: %w", p, unwrapPath(err))
	}
	for _, dir := range specialDirs {
		if within(p, dir) || within(real, dir) {
			return nil, fmt.Errorf("role file %s is under %s, which holds kernel and device files, not prompts (use a prompt file)", p, dir)
		}
	}
	if !absolute {
		roots := []string{realDir(d.dir)}
		if d.repo != "" {
			roots = append(roots, realDir(d.repo))
		}
		inside := false
		for _, r := range roots {
			inside = inside || within(real, r)
		}
		if !inside {
			return nil, fmt.Errorf("role file %s resolves to %s, outside the config's directory and the repository (move it under one of them, or give an absolute path to use it from elsewhere)", p, real)
		}
	}
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("read role file %s: %w", p, unwrapPath(err))
	}
	defer f.Close()
	if err := checkOpenRole(f); err != nil {
		return nil, fmt.Errorf("role file %s %w (use a prompt file)", p, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRoleFile+1))
	if err != nil {
		return nil, fmt.Errorf("read role file %s: %w", p, unwrapPath(err))
	}
	if len(data) > maxRoleFile {
		return nil, fmt.Errorf("role file %s is larger than 1 MiB; a role prompt should be far smaller (point role at the prompt file)", p)
	}
	return data, nil
}

// checkOpenRole checks what was opened: a regular file on an ordinary file
// system.
func checkOpenRole(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cannot be examined: %w", unwrapPath(err))
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("is %s, not a regular file", fileKind(fi.Mode()))
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("cannot be examined: %w", err)
	}
	var st unix.Statfs_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstatfs(int(fd), &st) }); err != nil {
		return fmt.Errorf("cannot be examined: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("cannot be examined: %w", serr)
	}
	if name, ok := specialFS[int64(st.Type)]; ok {
		return fmt.Errorf("is on %s, which holds kernel state, not prompts", name)
	}
	return nil
}

// within reports whether path is dir or under it (both clean and absolute).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// realDir is dir with symlinks resolved, so that it compares with a role
// file's resolved path; dir itself when it cannot be resolved.
func realDir(dir string) string {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return r
	}
	return filepath.Clean(dir)
}

// fileKind names a file type for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "a special file"
}
