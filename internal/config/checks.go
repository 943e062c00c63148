package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Options are checks of the machine the daemon is to run on, beyond the
// file itself. The zero Options (what Load and Parse use) checks only the
// file, for the commands that merely read the config.
type Options struct {
	// LookPath resolves a backend's command as a session's start will: a
	// name without a slash in the PATH of env (the daemon's own PATH when
	// env sets none); a name with a slash is returned as it is. When set,
	// every backend an agent uses must have its program, so that a missing
	// CLI is found by `swarmd config validate` and at start, not after
	// max_consecutive_errors failed spawns.
	LookPath func(file string, env []string) (string, error)
}

// checkBinaries checks the command of every backend an agent uses. agents
// are the raw forms of cfg.Agents, in order; raws are the backends the file
// defines.
func (d *decoder) checkBinaries(cfg *Config, agents []*rawAgent, raws map[string]*rawBackend, defaultsSet keySet) {
	type checked struct{ backend, path string }
	seen := map[checked]bool{}
	for i, a := range cfg.Agents {
		b, ok := cfg.Backends[a.Backend]
		if !ok || b.Type == TypeScripted { // scripted runs /bin/sh with a generated script
			continue
		}
		env := sessionPATH(a, b)
		k := checked{b.Name, strings.Join(env, "")}
		if seen[k] {
			continue
		}
		seen[k] = true
		if problem := d.commandProblem(b, env); problem != "" {
			line, key := backendSite(b.Name, raws, agents[i], defaultsSet)
			d.errorf(line, key, "%s", problem)
		}
	}
}

// sessionPATH is the PATH an agent's sessions on b get when the config sets
// one (the agent's env wins over the backend's), as an env list for
// LookPath; nil when the daemon's own PATH applies.
func sessionPATH(a Agent, b Backend) []string {
	if p, ok := a.Env["PATH"]; ok {
		return []string{"PATH=" + p}
	}
	if p, ok := b.Env["PATH"]; ok {
		return []string{"PATH=" + p}
	}
	return nil
}

// commandProblem says what is wrong with b's command and what to do, or "".
func (d *decoder) commandProblem(b Backend, env []string) string {
	fix := fmt.Sprintf("set backends.%s.command to its absolute path", b.Name)
	p, err := d.opts.LookPath(b.Command, env)
	if err != nil {
		where := "PATH"
		if env != nil {
			where = "the PATH that env sets"
		}
		return fmt.Sprintf("command %q of backend %q is not in %s (install it, or %s)", b.Command, b.Name, where, fix)
	}
	if !filepath.IsAbs(p) {
		// A relative path is looked up from the session's directory, the
		// agent's worktree: a checkout of the repository.
		p = filepath.Join(d.repo, p)
	}
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("command %s of backend %q does not exist (install it there, or %s)", p, b.Name, fix)
	case err != nil:
		return fmt.Sprintf("command %s of backend %q: %v (%s)", p, b.Name, unwrapPath(err), fix)
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("command %s of backend %q is %s, not a program (%s)", p, b.Name, fileKind(fi.Mode()), fix)
	case unix.Access(p, unix.X_OK) != nil:
		return fmt.Sprintf("command %s of backend %q is not executable (chmod +x it, or %s)", p, b.Name, fix)
	}
	return ""
}

// backendSite is where a problem of backend name is reported: its command
// key, else its entry under backends, else the key that chose it for the
// agent (a built-in backend the file does not mention).
func backendSite(name string, raws map[string]*rawBackend, ra *rawAgent, defaultsSet keySet) (int, string) {
	if rb, ok := raws[name]; ok {
		if l, ok := rb.set.line("command"); ok {
			return l, join(rb.path, "command")
		}
		return rb.line, rb.path
	}
	if l, ok := ra.set.line("backend"); ok {
		return l, join(ra.path, "backend")
	}
	if l, ok := defaultsSet.line("backend"); ok {
		return l, "defaults.backend"
	}
	return ra.line, join(ra.path, "backend")
}

// warnListen warns when the HTTP listener is reachable from other machines
// and nothing on it asks for a token: hasToken says whether web.token is set.
func (d *decoder) warnListen(listen string, line int, hasToken bool) {
	if listen == "" || hasToken {
		return
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil || isLoopback(host) {
		return // a bad value is already an error
	}
	d.warnf(line, "listen", "%q is not a loopback address: /metrics, /healthz and /readyz are open to every machine that can reach it, with no token (listen on 127.0.0.1, or keep the port behind a firewall)", listen)
}

// isLoopback: "localhost" or a loopback IP; "" and 0.0.0.0 mean every
// interface, and a host name may resolve anywhere.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
