package daemon

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/service"
)

// settleQuiet is how long no agent may change state before the start counts
// as settled and its memory is returned (trimWhenSettled). A start's
// transitions come every few milliseconds to a few hundred (one worktree at a
// time): a second without one is the end of the ramp.
const settleQuiet = time.Second

// settleWatch notes when an agent last changed state: an observer, so the
// runners pay one atomic store per transition.
type settleWatch struct{ last atomic.Int64 } // unix nanoseconds

func (w *settleWatch) OnTransition(t runner.Transition)  { w.last.Store(time.Now().UnixNano()) }
func (w *settleWatch) OnSessionEnd(runner.SessionRecord) {}
func (w *settleWatch) OnIdle(string, bool, time.Time)    {}

// trimWhenSettled returns the start's memory to the kernel once, when no
// agent has changed state for quiet: starting a swarm (recovery, worktrees,
// a prompt and a spawn per agent, the dependencies' package init) leaves a
// heap the garbage collector keeps for reuse and executable pages that
// nothing runs again, which an idle swarm would hold for as long as it
// sleeps. trim is d.settled but in tests; its ctx ends when the daemon
// stops. It is a service whose goroutine ends after the trim.
func (d *Daemon) trimWhenSettled(quiet time.Duration, trim func(context.Context)) service.Service {
	return service.Loop(func(ctx context.Context) {
		d.run.ramp.last.Store(time.Now().UnixNano()) // the quiet counts from the start
		t := time.NewTimer(quiet)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if wait := quiet - time.Since(time.Unix(0, d.run.ramp.last.Load())); wait > 0 {
				t.Reset(wait)
				continue
			}
			trim(ctx)
			return
		}
	})
}

// settled is what the daemon does once its start has settled: make every
// agent's log archive directory, so that an agent's stop finds it made,
// off the ramp (where 200 directory creations in one directory queue on
// its lock); remember each worktree's inspection, which the ramp's fresh
// files did not let it keep, so that a session's end reads its HEAD by
// stat data (worktree.Manager.Remember); archive the logs the run before
// left (archivePrevious); then return the start's memory (trimMemory).
func (d *Daemon) settled(ctx context.Context) {
	for _, name := range d.reg.Names() {
		if err := d.kit.logs.PrepareArchive(name); err != nil {
			d.log.Warn("prepare the log archive", zap.String("agent", name), zap.Error(err))
		}
		d.trees.Remember(name)
	}
	d.archivePrevious(ctx)
	d.trimMemory()
}

// archivePrevious archives the logs of the sessions before this run. A
// daemon's stop leaves its agents' logs where they are: archiving them all
// (a tar.gz, a file and a directory fsync each) was most of what a stop of
// 200 agents waited for, and a restart would wait for it again. swarmd logs
// reads them there meanwhile; a stop before this has run leaves them for
// the next start. Only the sessions before each agent's first of this run
// are taken (logs.Store.ArchiveBefore): no file of a session of this run,
// running or not, is touched. An agent the config no longer has is taken
// up to its last recorded session: a reload that adds it back starts after
// that.
func (d *Daemon) archivePrevious(ctx context.Context) {
	agents, err := d.kit.logs.LogAgents()
	if err != nil {
		d.log.Warn("archive the logs of the run before", zap.Error(err))
		return
	}
	for _, name := range agents {
		if ctx.Err() != nil {
			return // the originals stay for the next start
		}
		rc, ok := d.run.recovered[name]
		first := rc.seq
		if !ok {
			last, err := d.db.MaxSeq(ctx, name)
			if err != nil {
				d.log.Warn("archive the logs of the run before", zap.String("agent", name), zap.Error(err))
				continue
			}
			first = last + 1
		}
		if _, err := d.kit.logs.ArchiveBefore(ctx, name, first, time.Now()); err != nil && ctx.Err() == nil {
			d.log.Warn("archive the logs of the run before", zap.String("agent", name), zap.Error(err))
		}
	}
}

// trimMemory collects the garbage and returns the free heap to the kernel
// (the runtime would keep it, up to the next heap goal), then unmaps the
// executable's pages (dropExecutablePages).
func (d *Daemon) trimMemory() {
	debug.FreeOSMemory()
	n, err := dropExecutablePages()
	if err != nil {
		d.log.Debug("drop the executable's resident pages", zap.Error(err))
	}
	d.log.Debug("start settled: memory returned", zap.Int("executable_kib_dropped", n))
}

// dropExecutablePages unmaps the resident pages of the executable's
// read-only mappings (code, read-only data, the symbol table) and returns how
// many KiB were resident. They are clean pages of the file: they stay in the
// page cache and the next use maps them again with a minor fault, so only
// what runs afterwards (an idle daemon's timers, the next session) is
// resident again. The start touches most of a 43 MB binary (every package's
// init, the SQLite engine, the store's and git's code), 25 MB of it resident
// at 200 agents; an idle swarm runs a few MB of it.
//
// A mapping holding anonymous pages (written, as a relocated one would be)
// is left alone: discarding those would lose the writes.
func dropExecutablePages() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("drop executable pages: %w", err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("drop executable pages: %w", err)
	}
	defer f.Close()
	var maps []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if m, ok := smapsHeader(line, exe); ok {
			maps = append(maps, m)
			continue
		}
		if len(maps) == 0 {
			continue
		}
		cur := &maps[len(maps)-1]
		if v, ok := smapsKiB(line, "Rss:"); ok {
			cur.rss = v
		} else if v, ok := smapsKiB(line, "Anonymous:"); ok {
			cur.anon = v
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("drop executable pages: read smaps: %w", err)
	}
	dropped := 0
	for _, m := range maps {
		if !m.ok || m.anon != 0 || m.rss == 0 {
			continue
		}
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.lo, m.hi-m.lo, unix.MADV_DONTNEED); e != 0 {
			return dropped, fmt.Errorf("drop executable pages: madvise %#x-%#x: %w", m.lo, m.hi, e)
		}
		dropped += m.rss
	}
	return dropped, nil
}

// mapping is one entry of /proc/self/smaps.
type mapping struct {
	lo, hi    uintptr
	ok        bool // read-only, of the executable
	rss, anon int  // KiB
}

// smapsHeader parses a mapping's first line in /proc/self/smaps
// ("lo-hi perms offset dev inode path"); ok says whether it is one; the
// mapping's ok field whether it maps exe without write permission.
func smapsHeader(line []byte, exe string) (m mapping, isHeader bool) {
	f := bytes.Fields(line)
	if len(f) < 5 {
		return m, false
	}
	lo, hi, found := bytes.Cut(f[0], []byte("-"))
	if !found {
		return m, false
	}
	l, err1 := strconv.ParseUint(string(lo), 16, 64)
	h, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil {
		return m, false
	}
	m.lo, m.hi = uintptr(l), uintptr(h)
	m.ok = len(f) >= 6 && string(f[5]) == exe && len(f[1]) >= 2 && f[1][0] == 'r' && f[1][1] == '-'
	return m, true
}

// smapsKiB parses a "Key:   123 kB" line of smaps.
func smapsKiB(line []byte, key string) (int, bool) {
	rest, ok := bytes.CutPrefix(line, []byte(key))
	if !ok {
		return 0, false
	}
	f := bytes.Fields(rest)
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(f[0]))
	return n, err == nil
}
