package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/sandbox"
	"github.com/swarmd/swarmd/internal/worktree"
)

// A session's sandbox (isolation: bubblewrap): it sees the file system
// read-only, writes only its worktree, what git needs of the repository for
// its own branch (worktree.Access), its HOME and a private /tmp; the state
// directory (swarm.db, the logs, every other agent's worktree, the
// operator's control socket) is not there. In its place at
// <state_dir>/swarmd.sock is a socket made for its agent alone: the daemon
// knows who calls by the socket (and the agent's running session by its
// own record), whatever the caller's environment says.
//
// One socket an agent, not a session (binding one was most of what a
// sandbox cost the daemon). Who holds a connection is decided when it is
// accepted, never later: the agent's session then running, and, with
// cgroups, only if the kernel puts the connecting process in that
// session's cgroup. A connection from a session that has ended (a request
// in flight as it was killed, one queued in the backlog) is nobody's, so
// it can never act as the agent's next session.

// sessionSandboxes is the runners' Container while the sandbox is in force.
type sessionSandboxes struct {
	d *Daemon

	mu      sync.Mutex
	sockets map[string]agentSocket // by agent
	running map[string]string      // agent -> the session in its sandbox now
	made    int64                  // sockets made: the next one's name

	homes homesMemo // every agent's state homes, for the sandboxes to hide
}

// agentSocket is an agent's socket: its path on the host, and the socket.
type agentSocket struct {
	path string
	held *control.Held
}

func newSessionSandboxes(d *Daemon) *sessionSandboxes {
	return &sessionSandboxes{d: d, sockets: map[string]agentSocket{}, running: map[string]string{}}
}

// controlWait bounds how long a session start waits for the control socket
// of a daemon still starting (its sessions connect through it).
const controlWait = 30 * time.Second

// maxSocketPath is what a unix socket's path may hold (sun_path, with its
// NUL).
const maxSocketPath = 107

func (c *sessionSandboxes) Contain(agentName, sessionID string) (func(argv, files []string) []string, func(), error) {
	d := c.d
	select {
	case <-d.serve.controlUp:
	case <-d.run.ctx.Done():
		return nil, nil, d.run.ctx.Err()
	case <-time.After(controlWait):
		return nil, nil, errors.New("the control socket is not up yet")
	}
	cfg, _ := d.current()
	acc, err := d.trees.Access(agentName)
	if err != nil {
		return nil, nil, err
	}
	sock, err := c.socket(cfg.StateDir, agentName)
	if err != nil {
		return nil, nil, err
	}
	objects, err := d.host.quarantine.Prepare(agentName)
	if err != nil {
		return nil, nil, err
	}
	sb := d.host.iso.sandbox
	wrap := func(argv, files []string) []string {
		spec := c.baseSpec(cfg, d.trees.Path(agentName), argv[0], agentName)
		spec.Writable = slices.Concat(spec.Writable, acc.Writable, stateHomes(cfg, agentName))
		// The repository's own directory stays read-only even under a HOME
		// that holds it: the merge target's ref, packed-refs, config and
		// hooks are the daemon's.
		// The files the backend wrote for the session (Gemini CLI's tools
		// policy, in the state directory's f/, which the sandbox hides).
		spec.ReadOnly = slices.Concat(spec.ReadOnly, []string{acc.Repo, acc.CommonDir}, acc.Pinned, files)
		spec.Binds = append(append(spec.Binds, sandbox.Bind{Src: sock, Dest: cfg.SocketPath()}), d.objectBinds(acc, objects)...)
		return sb.Command(spec, argv)
	}
	c.mu.Lock()
	c.running[agentName] = sessionID
	c.mu.Unlock()
	release := func() {
		c.mu.Lock()
		if c.running[agentName] == sessionID {
			delete(c.running, agentName)
		}
		held := c.sockets[agentName].held
		c.mu.Unlock()
		// Nothing of the session is served from now on, whatever it
		// left open (see control.Held).
		held.Drop(sessionID)
		// The session has ended: what it committed goes into the shared
		// store before anything reads its branch (its record, a reviewer,
		// the merge queue).
		d.releaseObjects(agentName)
		d.scrub(agentName)
	}
	return wrap, release, nil
}

// scrub removes what a sandbox of agent's that has ended left in the git
// directories it writes that git would follow out of them or wait on
// (worktree.Manager.Scrub): not at the agent's next look at its worktree,
// which an agent stopped in its session, or a daemon stopped, never
// takes, while the operator's git gc and the daemon's git for the other
// agents waited on a FIFO there.
func (d *Daemon) scrub(agentName string) {
	ctx, cancel := context.WithTimeout(context.Background(), scrubTimeout)
	defer cancel()
	if err := d.trees.Scrub(ctx, agentName); err != nil {
		d.log.Error("clean what a sandbox left in its git directories", zap.String("agent", agentName), zap.Error(err))
	}
}

// scrubTimeout bounds the wait for the agent's worktree lock at scrub: a
// git of the daemon's holding it has its own bounds.
const scrubTimeout = time.Minute

// socket is agent's socket, attached to the control server at its first
// session; it lives as long as the server.
func (c *sessionSandboxes) socket(stateDir, agentName string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sockets[agentName]; ok {
		return s.path, nil
	}
	c.made++
	path, err := sessionSocket(stateDir, c.made)
	if err != nil {
		return "", err
	}
	held, err := c.d.serve.control.Attach(path, func(pid int) (string, bool) { return c.accept(agentName, pid) })
	if err != nil {
		return "", err
	}
	c.sockets[agentName] = agentSocket{path: path, held: held}
	return path, nil
}

// accept names the holder of a connection to agent's socket from process
// pid: the session running in the agent's sandbox now, if pid is one of
// its processes (by its cgroup, where cgroups are in force).
func (c *sessionSandboxes) accept(agentName string, pid int) (sessionID string, ok bool) {
	c.mu.Lock()
	sessionID, ok = c.running[agentName]
	c.mu.Unlock()
	if !ok {
		return "", false
	}
	if h := c.d.host.iso.cgroups; h != nil {
		if tree, in := h.TreeOf(pid); !in || tree != sessionID {
			return "", false
		}
	}
	return sessionID, true
}

// session is the agent whose session holds a connection (control.Holder),
// while that session still runs: a request that outlives its session is
// nobody's.
func (c *sessionSandboxes) session(holder string) (agentName string, ok bool) {
	agentName, ok = runner.AgentOfSession(holder)
	if !ok {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return agentName, c.running[agentName] == holder
}

// gateSandbox contains the merge gate like a session (merge.Options
// Sandbox), nil while no sandbox is in force: the gate runs code from the
// branch it tests, so it writes only its checkout, its HOME and the
// configured paths, sees neither the state directory nor any worktree, and
// gets no control socket: no authority over the swarm at all.
func (d *Daemon) gateSandbox() func(dir string, argv []string) []string {
	sb := d.host.iso.sandbox
	if sb == nil {
		return nil
	}
	return func(dir string, argv []string) []string {
		cfg, _ := d.current()
		spec := d.host.sandboxes.baseSpec(cfg, dir, argv[0], "")
		spec.Writable = []string{dir}
		if home, err := gateHome(cfg); err == nil {
			// The gate's HOME (openMerge) is an empty directory of this
			// run's: one shared between runs (a cache, a ~/.gitconfig)
			// let the code of one branch change another's result, the
			// run ahead's the front's included.
			if run, err := freshGateDir(cfg, dir, "home"); err == nil {
				spec.Binds = append(spec.Binds, sandbox.Bind{Src: run, Dest: home, Writable: true})
			}
		}
		// So is each of sandbox.writable's paths: the agents' sessions
		// write them (a shared build cache), and what an agent left there
		// must not change the result of a gate run of any task. A path
		// whose run directory cannot be made stays hidden.
		for i, p := range cfg.Sandbox.Writable {
			// Nor through a read-only path at or under it.
			spec.ReadOnly = slices.DeleteFunc(spec.ReadOnly, func(ro string) bool { return worktree.Within(ro, p) })
			if run, err := freshGateDir(cfg, dir, "writable-"+strconv.Itoa(i)); err == nil {
				spec.Binds = append(spec.Binds, sandbox.Bind{Src: run, Dest: p, Writable: true})
			} else {
				spec.Hidden = append(spec.Hidden, p)
			}
		}
		if d.trees != nil {
			spec.ReadOnly = append(spec.ReadOnly, d.trees.CommonDir())
		}
		return sb.Command(spec, argv)
	}
}

// postCheckoutSandbox contains a new worktree's post-checkout hook
// (worktree.Options.HookSandbox), nil while no sandbox is in force: the
// hook is the repository's, and with a relative core.hooksPath its
// scripts are files of the main checkout, which merged work changes. It
// writes the new worktree and its agent's HOME, and sees what a session
// sees, no socket included.
func (d *Daemon) postCheckoutSandbox() func(agent, dir string, argv []string) []string {
	sb := d.host.iso.sandbox
	if sb == nil {
		return nil
	}
	return func(agentName, dir string, argv []string) []string {
		cfg, _ := d.current()
		spec := d.host.sandboxes.baseSpec(cfg, dir, argv[0], agentName)
		spec.Writable = append(append(spec.Writable, dir), stateHomes(cfg, agentName)...)
		return sb.Command(spec, argv)
	}
}

// gateHome is the merge gate's HOME as its environment names it, under
// the state directory (hidden from every sandbox), made if need be; each
// run gets an empty one there (freshGateDir).
func gateHome(cfg *config.Config) (string, error) {
	home := filepath.Join(cfg.StateDir, "home", ".gate")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return "", fmt.Errorf("the merge gate's HOME: %w", err)
	}
	return home, nil
}

// freshGateDir is an empty directory, named name, for a gate run in the
// queue's worktree dir (its HOME, a sandbox.writable path): one per
// worktree (the front batch's and the run ahead's run at once), emptied
// before each run.
func freshGateDir(cfg *config.Config, dir, name string) (string, error) {
	run := filepath.Join(cfg.StateDir, "home", ".gate-"+filepath.Base(dir))
	if name != "home" {
		run = filepath.Join(cfg.StateDir, "home", ".gate-"+filepath.Base(dir)+"-"+name)
	}
	if err := os.RemoveAll(run); err != nil {
		return "", fmt.Errorf("the merge gate's %s: %w", name, err)
	}
	if err := os.MkdirAll(run, 0o700); err != nil {
		return "", fmt.Errorf("the merge gate's %s: %w", name, err)
	}
	return run, nil
}

// hookSandbox contains an agent's hooks like its sessions (hooks.Config
// Sandbox), nil while no sandbox is in force: a hook may run a script from
// the agent's branch, so it sees what the agent's sessions see, and gets no
// control socket (no authority over the swarm; not even the mailbox).
func (d *Daemon) hookSandbox() func(agent, dir string, argv []string) ([]string, func()) {
	sb := d.host.iso.sandbox
	if sb == nil {
		return nil
	}
	return func(agentName, dir string, argv []string) ([]string, func()) {
		cfg, _ := d.current()
		spec := d.host.sandboxes.baseSpec(cfg, dir, argv[0], agentName)
		var ended func()
		if acc, err := d.trees.Access(agentName); err == nil {
			spec.Writable = append(spec.Writable, acc.Writable...)
			spec.ReadOnly = append(append(spec.ReadOnly, acc.CommonDir), acc.Pinned...)
			// What it commits waits in the agent's quarantine until it has
			// ended; the agent's next prompt reads its branch.
			if objects, err := d.host.quarantine.Prepare(agentName); err == nil {
				spec.Binds = append(spec.Binds, d.objectBinds(acc, objects)...)
				ended = func() { d.releaseObjects(agentName); d.scrub(agentName) }
			} else {
				ended = func() { d.scrub(agentName) }
			}
		} else if dir != "" {
			spec.Writable = append(spec.Writable, dir)
		}
		spec.Writable = append(spec.Writable, stateHomes(cfg, agentName)...)
		return sb.Command(spec, argv), ended
	}
}

// baseSpec is what every sandbox of this daemon sees, run in dir for the
// binary bin: the configured paths, the repository and what bin needs of
// the private roots read-only, the hidden paths, no variable naming what
// is hidden.
func (c *sessionSandboxes) baseSpec(cfg *config.Config, dir, bin, self string) sandbox.Spec {
	spec := sandbox.Spec{
		Writable: slices.Clone(cfg.Sandbox.Writable),
		ReadOnly: slices.Concat([]string{cfg.Repo}, cfg.Sandbox.ReadOnly, privateNeeds(bin)),
		Hidden:   slices.Concat(hiddenPaths(cfg), othersHomes(cfg, c.homes.of(cfg), self, dir, bin)),
		Dir:      dir,
		// swarm.db is not there: a session's `swarmd mail` and `swarmd
		// task` go through its socket.
		Unsetenv: append([]string{"SWARM_DB_PATH", "CREDENTIALS_DIRECTORY"}, hostSocketVars(cfg, os.Getenv)...),
	}
	if fi, err := os.Stat(cfg.Path); err == nil && fi.Mode().IsRegular() {
		// The daemon's config reads as empty: its web.token unlocks the
		// dashboard's actions (stop, mail and tasks as the operator), which
		// a session reaches on the host's loopback. An empty file, not
		// /dev/null: a sandbox's mounts are nodev, and opening a device
		// there fails where reading an empty config says what it should.
		spec.Binds = append(spec.Binds, sandbox.Bind{Src: emptyFile(cfg), Dest: cfg.Path})
	}
	return spec
}

// emptyFile is an empty file in the state directory, bound over what a
// sandbox must not read (the daemon's config).
func emptyFile(cfg *config.Config) string { return filepath.Join(cfg.StateDir, "empty") }

// makeEmptyFile makes emptyFile, empty whatever was there.
func makeEmptyFile(cfg *config.Config) error {
	if err := os.WriteFile(emptyFile(cfg), nil, 0o444); err != nil {
		if rerr := os.Remove(emptyFile(cfg)); rerr != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		if err := os.WriteFile(emptyFile(cfg), nil, 0o444); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	return nil
}

// usableDir reports whether p is an existing absolute directory other
// than "/", worth binding into a sandbox.
func usableDir(p string) bool {
	if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
		return false
	}
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// hiddenPaths are what no sandbox sees: the state directory, and the
// daemon's systemd credentials (the store's password)
func hiddenPaths(cfg *config.Config) []string {
	hidden := []string{cfg.StateDir}
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); usableDir(dir) {
		hidden = append(hidden, dir)
	}
	return hidden
}

// hostSocketVars are the variables of the environment that name the
// host's sockets and runtime directory (the operator's ssh agent, D-Bus,
// tmux, screen), which a sandbox does not see: a CLI would try them and
// fail, or, for an abstract socket, reach the host's. One whose path the
// config binds into the sandbox (sandbox.readable, sandbox.writable) is
// kept: the operator gave it on purpose.
func hostSocketVars(cfg *config.Config, getenv func(string) string) []string {
	var out []string
	for _, k := range []string{"SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "TMUX", "TMUX_PANE", "STY"} {
		v := getenv(k)
		if v == "" {
			continue
		}
		path := v
		if after, ok := strings.CutPrefix(v, "unix:path="); ok {
			path, _, _ = strings.Cut(after, ",")
		} else if k == "TMUX" {
			path, _, _ = strings.Cut(v, ",")
		}
		given := slices.ContainsFunc(slices.Concat(cfg.Sandbox.ReadOnly, cfg.Sandbox.Writable), func(p string) bool {
			return filepath.IsAbs(path) && worktree.Within(path, p)
		})
		if !given {
			out = append(out, k)
		}
	}
	return out
}

// othersHomes are the HOMEs (and CODEX_HOME, CLAUDE_CONFIG_DIR) of the
// agents other than self ("": every agent's, for the merge gate), hidden
// from self's sandboxes: they hold those agents' logins and their CLIs'
// transcripts, whole prompts with their mail. A directory is left
// visible where hiding it would hide something the sandbox needs: self's
// own, the repository, the configured paths, dir, the binary's directory
// and PATH's (a CLI installed in the daemon's HOME, which the agents
// without a HOME of their own share). homes is every agent's, resolved
// (homesMemo).
func othersHomes(cfg *config.Config, homes map[string][]string, self, dir, bin string) []string {
	needs := slices.Concat([]string{cfg.Repo, dir, filepath.Dir(bin), selfDir()}, cfg.Sandbox.Writable, cfg.Sandbox.ReadOnly,
		filepath.SplitList(os.Getenv("PATH")))
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		needs = append(needs, filepath.Dir(real))
	}
	needs = slices.DeleteFunc(needs, func(n string) bool { return n == "" || !filepath.IsAbs(n) })
	for i, n := range needs {
		needs[i] = filepath.Clean(resolved(n))
	}
	own := homes[self]
	needs = append(needs, own...)
	var out []string
	for _, a := range cfg.Agents {
		if a.Name == self {
			continue
		}
		for _, h := range homes[a.Name] {
			if slices.Contains(out, h) || underAny(h, own) || slices.ContainsFunc(needs, func(n string) bool { return underAny(n, []string{h}) }) {
				continue
			}
			out = append(out, h)
		}
	}
	return out
}

// homesMemo keeps every agent's state homes (stateHomes), resolved, for
// one config: each sandboxed session's start reads them all, and a stat
// and a walk of links for each of hundreds of agents cost milliseconds
// there. A reload is a new config, and reads them again.
type homesMemo struct {
	mu      sync.Mutex
	cfg     *config.Config
	byAgent map[string][]string
}

func (m *homesMemo) of(cfg *config.Config) map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg != cfg {
		m.cfg, m.byAgent = cfg, make(map[string][]string, len(cfg.Agents))
		for _, a := range cfg.Agents {
			hs := stateHomes(cfg, a.Name)
			for i, h := range hs {
				hs[i] = filepath.Clean(resolved(h))
			}
			m.byAgent[a.Name] = hs
		}
	}
	return m.byAgent
}

// sessionSocket is where the n-th agent socket lives on the host: under
// the state directory (hidden from every sandbox), and no longer a path
// than the operator's socket for the first 10^9 (config checks that one
// against the limit).
func sessionSocket(stateDir string, n int64) (string, error) {
	dir := filepath.Join(stateDir, "s")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("session socket: %w", err)
	}
	path := filepath.Join(dir, strconv.FormatInt(n, 10))
	if len(path) > maxSocketPath {
		return "", fmt.Errorf("session socket %s: path over %d bytes (use a shorter state_dir)", path, maxSocketPath)
	}
	return path, nil
}

// stateHomes are the directories where a session of agent's CLIs keep
// their state, writable in its sandbox: HOME, and CODEX_HOME and
// CLAUDE_CONFIG_DIR where set; each from the agent's env, else its
// backend's, else the daemon's. Only existing absolute directories other
// than "/".
func stateHomes(cfg *config.Config, agentName string) []string {
	var out []string
	for _, key := range writableKeys {
		if dir := agentEnv(cfg, agentName, key); usableDir(dir) {
			out = append(out, filepath.Clean(dir))
		}
	}
	return out
}

// privateNeeds is what of /tmp, /run and /var/tmp (private in a sandbox:
// sandbox.PrivateRoots) the session's command needs to run: the directory
// of its binary (the binary alone when it lies in a private root itself),
// swarmd's, and the PATH's directories there (NixOS's /run/current-system
// and /run/wrappers); an npm .bin directory brings its node_modules. Never
// a private root whole.
func privateNeeds(bin string) []string {
	inRoot := func(p string) bool {
		root, ok := sandbox.PrivateRoot(p)
		return ok && filepath.Dir(p) == root
	}
	paths := []string{filepath.Dir(bin), selfDir()}
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		paths = append(paths, filepath.Dir(real))
		if inRoot(real) {
			paths = append(paths, real)
		}
	}
	if inRoot(bin) {
		paths = append(paths, bin)
	}
	paths = append(paths, filepath.SplitList(os.Getenv("PATH"))...)
	var out []string
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		p = filepath.Clean(p)
		if root, ok := sandbox.PrivateRoot(p); !ok || p == root {
			continue
		}
		if filepath.Base(p) == ".bin" {
			p = filepath.Dir(p)
		}
		if _, err := os.Stat(p); err == nil && !containsPath(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func containsPath(list []string, p string) bool {
	for _, q := range list {
		if q == p || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}
