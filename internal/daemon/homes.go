package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/swarmd/swarmd/internal/config"
)

// sharedHomes says which writable state directories (HOME, CODEX_HOME,
// CLAUDE_CONFIG_DIR: stateHomes) the running config's agents share with
// each other or with the daemon, "" when none: a part of isolation that is
// the config's, not the host's, so a reload changes it.
type sharedHomes struct{ v atomic.Pointer[string] }

func (s *sharedHomes) set(v string) { s.v.Store(&v) }

func (s *sharedHomes) get() string {
	if s == nil {
		return ""
	}
	if p := s.v.Load(); p != nil {
		return *p
	}
	return ""
}

// homeSharing is what sharedHomes holds for cfg: in a sandbox an agent's
// HOME is writable, and the CLIs read their settings there (Claude Code's
// hooks, Codex's config, the shell's profile, git's config). Shared between
// agents, one agent's session can leave a setting that another agent's
// session runs, with that agent's authority (a reviewer's verdicts
// included); the daemon's own HOME also holds the operator's (~/.ssh, the
// shell's files). daemonHome is the daemon's HOME.
func homeSharing(cfg *config.Config, daemonHome string) string {
	type writer struct{ dir, agent string }
	var ws []writer
	for _, a := range cfg.Agents {
		for _, dir := range stateHomes(cfg, a.Name) {
			ws = append(ws, writer{resolved(dir), a.Name})
		}
	}
	daemonHome = resolved(filepath.Clean(daemonHome))
	ownHome := usableDir(daemonHome)
	shared := map[string][]string{} // a directory written -> who else writes it or within it
	var dirs []string
	note := func(dir string, who ...string) {
		if _, ok := shared[dir]; !ok {
			dirs = append(dirs, dir)
		}
		for _, w := range who {
			if !slices.Contains(shared[dir], w) {
				shared[dir] = append(shared[dir], w)
			}
		}
	}
	for i, a := range ws {
		if ownHome && (within(a.dir, daemonHome) || within(daemonHome, a.dir)) {
			note(a.dir, a.agent)
		}
		for _, b := range ws[i+1:] {
			if a.agent != b.agent && (within(a.dir, b.dir) || within(b.dir, a.dir)) {
				note(shorter(a.dir, b.dir), a.agent, b.agent)
			}
		}
	}
	if len(dirs) == 0 {
		return ""
	}
	slices.Sort(dirs)
	parts := make([]string, 0, len(dirs))
	for _, dir := range dirs {
		who := shared[dir]
		slices.Sort(who)
		what := dir
		if ownHome && (within(dir, daemonHome) || within(daemonHome, dir)) {
			what += " (the daemon's HOME)"
		}
		parts = append(parts, fmt.Sprintf("%s write%s %s", listNames(who), plural(len(who)), what))
	}
	return "a HOME of each agent's own: " + strings.Join(parts, ", ") +
		"; one agent's session can leave a setting there that another's CLI (or the operator's shell) runs: give each agent env: {HOME: ...} of its own"
}

// resolved is dir with its symbolic links resolved, as the sandbox binds it:
// a HOME that is a link to the daemon's is the daemon's.
func resolved(dir string) string {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return r
	}
	return dir
}

func shorter(a, b string) string {
	if len(b) < len(a) {
		return b
	}
	return a
}

func plural(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}

// listNames is "a", "a and b", "a, b and c".
func listNames(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// checkHomes updates what the agents of cfg share of their HOMEs, where a
// sandbox is in force (without one they share everything already), and
// refuses it under isolation: strict.
func (d *Daemon) checkHomes(cfg *config.Config) error {
	if d.host.iso.sandbox == nil {
		return nil
	}
	s := homeSharing(cfg, os.Getenv("HOME"))
	if s != "" && d.host.iso.level == config.IsolationStrict {
		return setupErrorf("isolation: strict, and %s", s)
	}
	d.host.iso.homes.set(s)
	return nil
}
