package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/worktree"
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
	// Each agent's directories as configured (existing yet or not: a
	// session can make one inside what it writes) and as they resolve:
	// a link can name one directory and lead to another.
	type place struct {
		agent     string
		forms     []string // the path as named, and as resolved when that differs
		writes    bool     // bound writable in its sandbox (stateHomes)
		everyones bool     // sandbox.writable: every agent writes it
	}
	forms := func(dir string) []string {
		dir = filepath.Clean(dir)
		if r := resolved(dir); r != dir {
			return []string{dir, r}
		}
		return []string{dir}
	}
	var ps []place
	for _, a := range cfg.Agents {
		for _, key := range settingsKeys {
			dir := agentEnv(cfg, a.Name, key)
			if !filepath.IsAbs(dir) || filepath.Clean(dir) == "/" {
				continue
			}
			ps = append(ps, place{agent: a.Name, forms: forms(dir), writes: slices.Contains(writableKeys, key)})
		}
	}
	for _, w := range cfg.Sandbox.Writable {
		ps = append(ps, place{forms: forms(w), writes: true, everyones: true})
	}
	overlap := func(a, b place) (string, bool) {
		for _, x := range a.forms {
			for _, y := range b.forms {
				if worktree.Within(x, y) || worktree.Within(y, x) {
					return shorter(x, y), true
				}
			}
		}
		return "", false
	}
	daemonHome = filepath.Clean(daemonHome)
	ownHome := usableDir(daemonHome)
	home := place{forms: forms(daemonHome)}
	shared := map[string][]string{} // a directory -> the agents that share it
	everyone := map[string]bool{}   // of those, the ones sandbox.writable gives every agent
	daemons := map[string]bool{}    // of those, the daemon's HOME or a settings directory of its
	var dirs []string
	note := func(dir string, who ...string) {
		if _, ok := shared[dir]; !ok {
			dirs = append(dirs, dir)
			shared[dir] = nil
		}
		for _, w := range who {
			if w != "" && !slices.Contains(shared[dir], w) {
				shared[dir] = append(shared[dir], w)
			}
		}
	}
	for i, a := range ps {
		if a.writes && !a.everyones && ownHome && writesOwnHome(a.forms, home.forms) {
			note(home.forms[len(home.forms)-1], a.agent)
			daemons[home.forms[len(home.forms)-1]] = true
		}
		for _, b := range ps[i+1:] {
			if a.agent == b.agent || !a.writes && !b.writes {
				continue
			}
			if dir, ok := overlap(a, b); ok {
				note(dir, a.agent, b.agent)
				if a.everyones || b.everyones {
					everyone[dir] = true
				}
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
		switch {
		case daemons[dir]:
			what += " (the daemon's HOME)"
		case everyone[dir]:
			what += " (sandbox.writable: every agent writes it)"
		}
		parts = append(parts, fmt.Sprintf("%s write%s %s", listNames(who), plural(len(who)), what))
	}
	return "a HOME of each agent's own: " + strings.Join(parts, ", ") +
		"; one agent's session can leave a setting there that another's CLI (or the operator's shell) runs: give each agent env: {HOME: ...} of its own"
}

// settingsKeys name the directories an agent's CLIs and tools read their
// settings from; writableKeys, those its sandbox binds writable
// (stateHomes).
var (
	settingsKeys = []string{"HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "XDG_CONFIG_HOME", "GEMINI_CLI_HOME"}
	writableKeys = []string{"HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR"}
)

// agentEnv is key in agent's environment: its env's, else its backend's,
// else the daemon's.
func agentEnv(cfg *config.Config, agentName, key string) string {
	v := os.Getenv(key)
	if a, ok := cfg.Agent(agentName); ok {
		if b, ok := cfg.Backends[a.Backend]; ok && b.Env[key] != "" {
			v = b.Env[key]
		}
		if a.Env[key] != "" {
			v = a.Env[key]
		}
	}
	return v
}

// writesOwnHome reports whether a directory (in its forms) writes the
// daemon's HOME (in its): holds it, or is one of its dot-directories or
// inside one (where the operator's tools keep their settings). A directory
// of its own under the daemon's HOME (~/agents/alice) does not.
func writesOwnHome(dir, home []string) bool {
	for _, d := range dir {
		for _, h := range home {
			if worktree.Within(h, d) {
				return true
			}
			if rel, err := filepath.Rel(h, d); err == nil && worktree.Within(d, h) && strings.HasPrefix(rel, ".") && rel != "." {
				return true
			}
		}
	}
	return false
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
