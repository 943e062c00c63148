package worktree

import (
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Every session inspects its agent's worktree several times (the prompt's
// status, HEAD after the session, the lock clean-up, Verify), and a full
// inspection reads the .git link and the registration, resolves paths and
// opens the repository with go-git. A worktree found fine is remembered
// with the stat data of every file the answer came from: the worktree
// directory, its .git link, the registration's gitdir, HEAD and locked
// files, the branch's loose ref and packed-refs. git writes HEAD and refs
// by renaming a new file into place (a new inode), so any change to them
// shows; an answer is not remembered while any of them changed less than
// racyWindow before (an in-place write within one clock tick could keep
// its stat data), as for the status cache.

// inspectDeps are the files a wtOK inspection of agent depends on.
func (m *Manager) inspectDeps(agent, adminDir string) [7]string {
	return [7]string{
		m.Path(agent),
		filepath.Join(m.Path(agent), ".git"),
		filepath.Join(adminDir, "gitdir"),
		filepath.Join(adminDir, "HEAD"),
		filepath.Join(adminDir, "locked"),
		filepath.Join(m.commonDir, filepath.FromSlash(branchRef(agent).String())),
		filepath.Join(m.commonDir, "packed-refs"),
	}
}

type inspectEntry struct {
	in     inspection
	stamps [7]stamp // of inspectDeps, zero for a missing file
}

type inspectCache struct {
	mu      sync.Mutex
	entries map[string]inspectEntry // by agent
	admins  map[string]string       // the admin dir an agent's worktree last had
}

// admin is the admin dir the agent's worktree had last time, else def.
func (c *inspectCache) admin(agent, def string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[agent]; ok {
		return e.in.adminDir
	}
	if a, ok := c.admins[agent]; ok {
		return a
	}
	return def
}

func (c *inspectCache) setAdmin(agent, adminDir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if adminDir == "" {
		delete(c.admins, agent)
		return
	}
	if c.admins == nil {
		c.admins = map[string]string{}
	}
	c.admins[agent] = adminDir
}

// stampDeps stats the files; ok is false when one cannot be stat'ed for
// another reason than its absence. packed-refs (the last) matters only
// while the branch has no loose ref: with one, it is left unstat'ed (a
// zero stamp), and the loose ref's going shows in its own stamp.
func stampDeps(paths [7]string) (stamps [7]stamp, ok bool) {
	var st unix.Stat_t
	for i, p := range paths {
		if i == len(paths)-1 && stamps[i-1] != (stamp{}) {
			break
		}
		switch err := unix.Lstat(p, &st); err {
		case nil:
			stamps[i] = stampOfUnix(&st)
		case unix.ENOENT:
		default:
			return stamps, false
		}
	}
	return stamps, true
}

// cachedInspect is the remembered inspection of agent's worktree, if every
// file it came from is as it was then.
func (m *Manager) cachedInspect(agent string) (inspection, bool) {
	m.inspections.mu.Lock()
	e, ok := m.inspections.entries[agent]
	m.inspections.mu.Unlock()
	if !ok {
		return inspection{}, false
	}
	stamps, ok := stampDeps(m.inspectDeps(agent, e.in.adminDir))
	if !ok || stamps != e.stamps {
		return inspection{}, false
	}
	return e.in, true
}

// rememberInspect keeps a wtOK inspection (not one in a rebase, whose
// answer also depends on the rebase's files) taken after the stamps were,
// unless something changed too recently to trust the stat data.
func (m *Manager) rememberInspect(agent string, in inspection, stamps [7]stamp, start time.Time) {
	if in.state != wtOK || in.rebasing {
		m.forgetInspect(agent)
		return
	}
	for _, s := range stamps {
		if s.recent(start) {
			m.forgetInspect(agent)
			return
		}
	}
	m.inspections.mu.Lock()
	defer m.inspections.mu.Unlock()
	if m.inspections.entries == nil {
		m.inspections.entries = map[string]inspectEntry{}
	}
	m.inspections.entries[agent] = inspectEntry{in: in, stamps: stamps}
}

// Remember inspects the agent's worktree so that the next look at it
// (Head after a session, Ensure before one) is answered by the stat data
// alone. A worktree made moments ago cannot be remembered (its files are too
// recent to trust their times), so a daemon's start, which makes them all,
// leaves every one to be read whole at the first session's end: at a stop
// right after a start, 200 of them at once. Whatever it finds (a missing or
// foreign worktree) is for the next look to report.
func (m *Manager) Remember(agent string) {
	if checkName(agent) == nil {
		_, _ = m.inspect(agent)
	}
}

func (m *Manager) forgetInspect(agent string) {
	m.inspections.mu.Lock()
	defer m.inspections.mu.Unlock()
	delete(m.inspections.entries, agent)
}
