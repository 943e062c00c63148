package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/worktree"
)

// The daemon's own programs (git for the worktrees, the merge queue, the
// objects' checks and the gc; the merge gate's commands) are found in a
// PATH without the directories a sandboxed session may write: a session
// that could drop a `git` into ~/go/bin, with the daemon's HOME its own,
// would have it run by the daemon, outside any sandbox, on the next
// release of its objects.

// daemonTools is where the daemon finds its programs.
type daemonTools struct {
	git     string // the git binary, an absolute path; "git" while no sandbox is in force
	path    string // PATH for the daemon's children that run the branch's code (the gate)
	dropped []string
	// remoteEnv is added to the environment of the daemon's pushes and
	// fetches: where sessions write the daemon's HOME, an ssh that reads
	// no ~/.ssh/config, whose ProxyCommand or Match exec a session could
	// set to run as the daemon.
	remoteEnv []string
}

// findTools resolves the daemon's programs for cfg. Without a sandbox
// sessions are not contained, and PATH is taken as it is.
func findTools(cfg *config.Config, sandboxed bool, path string) (daemonTools, error) {
	if !sandboxed {
		return daemonTools{git: "git", path: path}, nil
	}
	roots := sessionWritable(cfg)
	kept, dropped := trustedPATH(path, roots)
	t := daemonTools{path: kept, dropped: dropped}
	git, err := lookIn(kept, "git", roots)
	if err != nil {
		where := ""
		if p, _ := lookIn(path, "git", nil); p != "" {
			where = fmt.Sprintf(": %s is in a directory sessions write (give each agent a HOME of its own with env: HOME, or install git elsewhere)", p)
		}
		return t, fmt.Errorf("find git in PATH outside the directories sessions write%s", where)
	}
	t.git = git
	if sshConfigWritable(roots) && os.Getenv("GIT_SSH_COMMAND") == "" && os.Getenv("GIT_SSH") == "" && !repoSetsSSH(git, cfg.Repo) {
		sys := "/etc/ssh/ssh_config"
		if _, err := os.Stat(sys); err != nil {
			sys = os.DevNull
		}
		t.remoteEnv = []string{"GIT_SSH_COMMAND=ssh -F " + sys}
	}
	return t, nil
}

// sshConfigWritable reports whether a session may write the ssh client's
// user configuration: ~/.ssh of the user's home in the password database
// (where ssh reads it) or of HOME.
func sshConfigWritable(roots []string) bool {
	homes := []string{os.Getenv("HOME")}
	if u, err := user.Current(); err == nil {
		homes = append(homes, u.HomeDir)
	}
	real := cleanResolved(roots)
	for _, h := range homes {
		if h != "" && underAny(filepath.Clean(resolved(filepath.Join(h, ".ssh"))), real) {
			return true
		}
	}
	return false
}

// repoSetsSSH reports whether the repository's configuration names the
// ssh its remotes use (core.sshCommand): the operator's choice, which an
// environment variable would override.
func repoSetsSSH(git, repo string) bool {
	cmd := exec.Command(git, "-C", repo, "config", "--get", "core.sshCommand")
	cmd.Env = worktree.GitEnv(os.Environ())
	out, err := cmd.Output()
	return err == nil && strings.TrimSpace(string(out)) != ""
}

func cleanResolved(dirs []string) []string {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if d != "" {
			out = append(out, filepath.Clean(resolved(d)))
		}
	}
	return out
}

// sessionWritable are the host directories a sandboxed session may write
// into, beside the private /tmp: its agent's HOME and the CLIs' state
// directories, the configured sandbox.writable paths, and the state
// directory (the worktrees are in it).
func sessionWritable(cfg *config.Config) []string {
	out := []string{cfg.StateDir}
	out = append(out, cfg.Sandbox.Writable...)
	for _, a := range cfg.Agents {
		out = append(out, stateHomes(cfg, a.Name)...)
	}
	return out
}

// trustedPATH is path without its relative entries and those under any of
// roots, symbolic links resolved on both sides; dropped lists what was
// left out.
func trustedPATH(path string, roots []string) (kept string, dropped []string) {
	real := cleanResolved(roots)
	var keep []string
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) || underAny(filepath.Clean(resolved(dir)), real) {
			if dir != "" && !slices.Contains(dropped, dir) {
				dropped = append(dropped, dir)
			}
			continue
		}
		keep = append(keep, dir)
	}
	return strings.Join(keep, string(os.PathListSeparator)), dropped
}

// lookIn is exec.LookPath over path rather than the process's PATH,
// passing over a file that resolves (a symbolic link) under roots.
func lookIn(path, file string, roots []string) (string, error) {
	real := cleanResolved(roots)
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && !underAny(resolved(p), real) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found", file)
}

func underAny(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}
