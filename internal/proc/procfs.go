package proc

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"github.com/swarmd/swarmd/internal/sysfile"
)

// procStat is the part of /proc/PID/stat that supervision needs.
type procStat struct {
	state byte // R, S, D, Z, X, ...
	pgid  int
	sid   int
	start uint64 // start time in clock ticks since boot: (pid, start) names one process
	// threads is num_threads: a single-threaded process lists its children
	// in one file.
	threads int
	// kthread: a kernel thread (PF_KTHREAD in flags), whose environment
	// reads empty for good.
	kthread bool
}

// pfKthread is the kernel's PF_KTHREAD, a bit of /proc/PID/stat's flags.
const pfKthread = 0x00200000

// dead: a zombie, or a process dying. A process whose main thread exited
// while its other threads run on reads as a zombie too, but it lives (and
// is not reapable) until they end: num_threads still counts them.
func (st procStat) dead() bool { return (st.state == 'Z' || st.state == 'X') && st.threads <= 1 }

// readStat parses /proc/PID/stat. The command name is in parentheses and may
// itself contain spaces and parentheses, so fields are counted after the last ')'.
func readStat(pid int, buf []byte) (procStat, []byte, error) {
	buf, err := sysfile.Read("/proc/"+strconv.Itoa(pid)+"/stat", buf)
	if err != nil {
		return procStat{}, buf, err
	}
	st, err := parseStat(buf)
	return st, buf, err
}

var errBadStat = errors.New("proc: malformed stat line")

func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, errBadStat
	}
	// Fields after "comm)": state(3) ppid(4) pgrp(5) session(6) ... flags(9)
	// ... starttime(22).
	rest := b[i+2:]
	var st procStat
	for field := 3; field <= 22; field++ {
		sp := bytes.IndexByte(rest, ' ')
		var tok []byte
		if sp < 0 {
			tok, rest = rest, nil
		} else {
			tok, rest = rest[:sp], rest[sp+1:]
		}
		switch field {
		case 3:
			if len(tok) != 1 {
				return procStat{}, errBadStat
			}
			st.state = tok[0]
		case 5, 6, 9, 20, 22:
			n, err := strconv.ParseUint(string(bytes.TrimSpace(tok)), 10, 64)
			if err != nil {
				return procStat{}, errBadStat
			}
			switch field {
			case 5:
				st.pgid = int(n)
			case 6:
				st.sid = int(n)
			case 9:
				st.kthread = n&pfKthread != 0
			case 20:
				st.threads = int(n)
			case 22:
				st.start = n
			}
		}
		if rest == nil && field < 22 {
			return procStat{}, errBadStat
		}
	}
	return st, nil
}

// readEnvVar returns the value of key in /proc/PID/environ (the environment
// the process was exec'd with, which is what its children inherit unless it
// rebuilds it) and the size of that environment. It reads empty (or fails,
// as the kernel's version has it) for a zombie, for a kernel thread, for a
// process exiting, and for a moment in the middle of an execve: size 0. A
// process that is not ours to read (another user's, one not dumpable) is
// size -1. The returned slice aliases buf.
func readEnvVar(pid int, key string, buf []byte) (val []byte, ok bool, size int, out []byte) {
	buf, err := sysfile.Read("/proc/"+strconv.Itoa(pid)+"/environ", buf)
	if errors.Is(err, syscall.ESRCH) {
		// The main thread is gone; other threads may run on, and have it.
		buf, err = readThreadsEnv(pid, buf)
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, false, -1, buf
	}
	if err != nil {
		return nil, false, 0, buf
	}
	val, ok = envLookup(buf, key)
	return val, ok, len(buf), buf
}

// readThreadsEnv reads the environment of pid through its first live
// thread other than the main one.
func readThreadsEnv(pid int, buf []byte) ([]byte, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	d, err := os.Open(dir)
	if err != nil {
		return buf[:0], err
	}
	tids, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return buf[:0], err
	}
	err = syscall.ESRCH
	for _, tid := range tids {
		if tid == strconv.Itoa(pid) {
			continue
		}
		var rerr error
		if buf, rerr = sysfile.Read(dir+tid+"/environ", buf); rerr == nil {
			return buf, nil
		}
		if errors.Is(rerr, fs.ErrPermission) {
			err = rerr
		}
	}
	return buf[:0], err
}

// envLookup finds the first KEY= entry in a NUL-separated environment block,
// as getenv(3) does.
func envLookup(environ []byte, key string) ([]byte, bool) {
	for len(environ) > 0 {
		entry := environ
		if i := bytes.IndexByte(environ, 0); i >= 0 {
			entry, environ = environ[:i], environ[i+1:]
		} else {
			environ = nil
		}
		if len(entry) > len(key) && entry[len(key)] == '=' && string(entry[:len(key)]) == key {
			return entry[len(key)+1:], true
		}
	}
	return nil, false
}

// listChildren appends the pids of this process's direct children. The
// kernel keeps children per thread. An orphan is reparented to the first live
// thread of the subreaper, which is the main thread (it never exits in a Go
// program), so that one file is enough to find orphans: allThreads also reads
// the others, where our own fork()s (leaders, os/exec children) are listed.
func listChildren(pids []int, buf []byte, self int, allThreads bool) ([]int, []byte, error) {
	if !allThreads {
		var err error
		buf, err = sysfile.Read("/proc/self/task/"+strconv.Itoa(self)+"/children", buf)
		if err != nil {
			return pids, buf, err
		}
		return appendPids(pids, buf), buf, nil
	}
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return pids, buf, err
	}
	tids, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return pids, buf, err
	}
	for _, tid := range tids {
		buf, err = sysfile.Read("/proc/self/task/"+tid+"/children", buf)
		if err != nil {
			continue // the thread exited: its children moved to another thread
		}
		pids = appendPids(pids, buf)
	}
	return pids, buf, nil
}

func appendPids(pids []int, b []byte) []int {
	for _, f := range bytes.Fields(b) {
		if n, err := strconv.Atoi(string(f)); err == nil && n > 0 {
			pids = append(pids, n)
		}
	}
	return pids
}

// allPids lists every process in /proc except this one.
func allPids() ([]int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	pids := make([]int, 0, len(names))
	for _, name := range names {
		if n, err := strconv.Atoi(name); err == nil && n > 0 && n != self {
			pids = append(pids, n)
		}
	}
	return pids, nil
}
