package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	minGitMajor = 2
	minGitMinor = 20

	// gitWaitDelay bounds how long a cancelled git may take to clean up after
	// SIGTERM before it is killed.
	gitWaitDelay = 5 * time.Second

	// lockPoll is how often a worktree operation retries a repository lock
	// held by another process.
	lockPoll = 20 * time.Millisecond
)

// gitCLI runs the git binary. Processes stay in the caller's process group
// (no Setpgid): the daemon's supervisor relies on that.
type gitCLI struct {
	bin          string
	env          []string
	major, minor int // its version
}

func newGitCLI(ctx context.Context, name string) (*gitCLI, string, error) {
	if name == "" {
		name = "git"
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, "", fmt.Errorf("%w (%v): install git %d.%d or newer", ErrGitMissing, err, minGitMajor, minGitMinor)
	}
	g := &gitCLI{bin: bin, env: GitEnv(os.Environ())}

	out, err := g.run(ctx, "", "version")
	if err != nil {
		return nil, "", fmt.Errorf("check git version: %w", err)
	}
	version := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "git version "))
	major, minor, ok := parseGitVersion(version)
	if !ok {
		return nil, "", fmt.Errorf("check git version: cannot parse %q", strings.TrimSpace(out))
	}
	if major < minGitMajor || (major == minGitMajor && minor < minGitMinor) {
		return nil, "", fmt.Errorf("%w: found %s at %s, need %d.%d or newer", ErrGitTooOld, version, bin, minGitMajor, minGitMinor)
	}
	g.major, g.minor = major, minor
	return g, version, nil
}

// GitEnv is environ made fit for running git on a repository named with
// "git -C dir": without the variables that would make git act on another
// repository (set, for example, when the daemon is started from a git
// hook), with LC_ALL=C (messages we parse and show are stable), no
// terminal prompts, GIT_OPTIONAL_LOCKS=0 (status checks must not take
// index.lock under a running agent), and no global configuration
// (GIT_CONFIG_GLOBAL=/dev/null, git 2.32 and later): ~/.gitconfig and
// ~/.config/git are in HOME, which sessions write unless each agent has a
// HOME of its own, and a filter or fsmonitor set there would be run by
// the daemon's git. What the daemon's pushes need (a credential helper, a
// URL rewrite) goes in the repository's configuration or /etc/gitconfig.
// It returns a new slice.
func GitEnv(environ []string) []string {
	drop := []string{
		"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
		"GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE",
		"GIT_PREFIX", "GIT_INTERNAL_SUPER_PREFIX",
		"LC_ALL", "GIT_TERMINAL_PROMPT", "GIT_OPTIONAL_LOCKS", "GIT_CONFIG_GLOBAL",
	}
	env := make([]string, 0, len(environ)+4)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(drop, k) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "GIT_CONFIG_GLOBAL="+os.DevNull)
}

// ParseGitVersion reads the output of "git version" ("git version 2.39.5")
// as major and minor numbers.
func ParseGitVersion(out string) (major, minor int, ok bool) {
	return parseGitVersion(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "git version ")))
}

// parseGitVersion reads "2.39.5", "2.39.5.windows.1" or "2.37.1 (Apple Git-137.1)".
func parseGitVersion(v string) (major, minor int, ok bool) {
	v, _, _ = strings.Cut(v, " ")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// GitOptions are the options of every git the daemon runs. It runs no
// hook: hooks are for people's git, and run by the daemon they would run
// as the daemon, outside every sandbox, with what the agents wrote (a
// relative core.hooksPath, as husky's .husky/_, names scripts in the
// working tree git runs in, or in the main checkout the merge queue
// fast-forwards with their merged work); the one it runs on purpose, a
// new worktree's post-checkout, it runs itself. It reads no attributes
// file of the user's (core.attributesFile defaults to one in HOME, which
// sessions write: its filter=… would name a driver to run), and, with no
// global configuration read (GitEnv), it trusts the repository it was
// given whoever owns it, as safe.directory in the user's configuration
// said before. It writes HEAD as a file, never as the symbolic link
// core.preferSymlinkRefs asks for: the daemon reads an agent's HEAD only
// as a file of its own (a link there is what a sandbox plants), and its
// own switch back to the agent's branch made the agent stop. And it
// starts no repository maintenance (git merge, rebase and fetch end with
// git gc --auto): the objects a sandbox writes reach the repository at
// its session's end, so an agent could have the daemon start a gc, in
// the background, outside every process tree of the swarm, while a
// session of its own had put a FIFO where gc reads every ref (held for
// good, with packed-refs.lock taken). gc is the operator's. Nor does it
// recurse into a submodule, whatever submodule.recurse says in the
// repository's config: reset --hard and checkout recursed into an active
// submodule of an agent's worktree, by that submodule's config, which the
// sandbox writes (its git directory is the worktree's, or in the
// worktree's own git directory), and a filter named there ran as the
// daemon. The daemon's fetch and push follow no submodule either.
var GitOptions = []string{"-c", "core.hooksPath=" + os.DevNull, "-c", "core.attributesFile=" + os.DevNull,
	"-c", "safe.directory=*", "-c", "core.preferSymlinkRefs=false", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
	"-c", "submodule.recurse=false"}

// run runs git (with -C dir unless dir is empty) with GitOptions, and
// returns its standard output. On cancellation git gets SIGTERM first, so that "worktree add" can
// remove what it half created, then SIGKILL after gitWaitDelay.
func (g *gitCLI) run(ctx context.Context, dir string, args ...string) (string, error) {
	return g.runWith(ctx, dir, GitOptions, args...)
}

// runWith is run with opts before the command instead of GitOptions: the
// look for the repository's own post-checkout hook must see its
// core.hooksPath.
func (g *gitCLI) runWith(ctx context.Context, dir string, opts []string, args ...string) (string, error) {
	return g.runEnv(ctx, dir, opts, nil, args...)
}

// atLeast reports whether this git is major.minor or newer.
func (g *gitCLI) atLeast(major, minor int) bool {
	return g.major > major || (g.major == major && g.minor >= minor)
}

// runEnv is runWith with env added to git's environment.
func (g *gitCLI) runEnv(ctx context.Context, dir string, opts, env []string, args ...string) (string, error) {
	return g.runInput(ctx, dir, opts, env, "", args...)
}

// runInput is runEnv with input on git's standard input ("": none).
func (g *gitCLI) runInput(ctx context.Context, dir string, opts, env []string, input string, args ...string) (string, error) {
	full := append([]string{}, opts...)
	if dir != "" {
		full = append(full, "-C", dir)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, g.bin, full...)
	cmd.Env = g.env
	if len(env) > 0 {
		cmd.Env = append(slices.Clip(g.env), env...)
	}
	if input != "" {
		cmd.Stdin = strings.NewReader(input)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = gitWaitDelay
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	gerr := &GitError{Args: args, Dir: dir, ExitCode: -1, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		gerr.Err = ctx.Err()
	case errors.As(err, &exit) && exit.Exited():
		gerr.ExitCode = exit.ExitCode()
	}
	return stdout.String(), gerr
}

// gitIn runs git in an agent's worktree at path as git would run there,
// but for what the worktree says of itself. Its .git link, HEAD and index
// are its sandbox's to write: a link to a git directory of the sandbox's
// making (its config naming a core.fsmonitor program, a filter) made the
// daemon's git status run the sandbox's program, as the daemon, outside
// the sandbox. So the git directory is the one registered for the
// worktree (adminDir, checked by inspect: the sandbox cannot change its
// links to the repository), and fsmonitor is off, as hooks are for all
// of the daemon's git (GitOptions).
func (m *Manager) gitIn(ctx context.Context, path, adminDir string, args ...string) (string, error) {
	if adminDir == "" {
		return "", fmt.Errorf("git %s in %s: the worktree's registered git directory is not known", strings.Join(args, " "), path)
	}
	return m.git.run(ctx, path, append(InWorktree(path, adminDir), args...)...)
}

// InWorktree are git's options for a command in the worktree at path
// whose registered git directory is adminDir (gitIn, and the merge
// queue's own worktrees).
func InWorktree(path, adminDir string) []string {
	return []string{"--git-dir=" + adminDir, "--work-tree=" + path, "-c", "core.fsmonitor=false"}
}

// flockDir takes an exclusive flock on dir (the repository's common git
// directory), so that worktree operations from other Managers and other
// swarmd processes on the same repository do not interleave. flock on the
// directory itself leaves no lock file behind in the user's .git.
func flockDir(ctx context.Context, dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	var tick *time.Ticker
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		if tick == nil {
			tick = time.NewTicker(lockPoll)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", dir, ctx.Err())
		case <-tick.C:
		}
	}
	return func() { f.Close() }, nil // closing the descriptor releases the lock
}

// LockRepo takes the lock that every Manager holds for worktree operations
// (add, remove, prune) on the repository whose common git directory is
// commonDir, so that another package creating a worktree of its own (the
// merge queue's integration worktree) never interleaves with them. Call
// the returned function to release it.
func LockRepo(ctx context.Context, commonDir string) (unlock func(), err error) {
	return flockDir(ctx, commonDir)
}
