package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/swarmd/swarmd/internal/cgroup"
	"github.com/swarmd/swarmd/internal/metrics"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/quarantine"
	"github.com/swarmd/swarmd/internal/worktree"
)

// statusGit is the worktrees as the prompt builder reads them: it records
// whether the commit was in the repository when the branch was read.
type statusGit struct {
	gitDir, commit string
	found          *bool
}

func (g statusGit) Look(context.Context, string) (worktree.Status, error) {
	*g.found = exec.Command("git", "--git-dir", g.gitDir, "cat-file", "-e", g.commit).Run() == nil
	return worktree.Status{}, nil
}

func (g statusGit) RecentCommits(context.Context, string, int) ([]worktree.Commit, error) {
	return nil, nil
}

// newQuarantine is a repository (its work tree dir, its git directory) and
// the agents' quarantines of it.
func newQuarantine(t *testing.T) (dir, gitDir string, q *quarantine.Store) {
	dir = filepath.Dir(repo(t, ""))
	gitDir = filepath.Join(dir, ".git")
	return dir, gitDir, quarantine.New(filepath.Join(t.TempDir(), "q"), gitDir, filepath.Join(gitDir, "objects"))
}

// objectsDaemon is a daemon with the quarantine q, as Open leaves it.
func objectsDaemon(t *testing.T, q *quarantine.Store, log *zap.Logger) *Daemon {
	d := &Daemon{log: log, metrics: metrics.New(metrics.BuildInfo{})}
	d.host.quarantine = q
	d.host.releases, d.host.cutReleases = context.WithCancel(context.Background())
	t.Cleanup(d.host.cutReleases)
	return d
}

// sandboxedGit runs git in dir as a sandboxed session's git sees the
// repository (env: its quarantine as the object directory) and returns
// its output.
func sandboxedGit(t *testing.T, dir string, env ...string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
}

// A release that fails (here the store's fan-out directory is a file; a
// full disk fails the same way) leaves the objects in the quarantine, and
// the agent's next prompt moves them before it reads the branch: the agent
// goes on by itself once the store can take them.
func TestAPromptMovesWhatAFailedReleaseLeft(t *testing.T) {
	dir, gitDir, q := newQuarantine(t)
	objects, err := q.Prepare("alice")
	if err != nil {
		t.Fatal(err)
	}
	git := sandboxedGit(t, dir, "GIT_OBJECT_DIRECTORY="+objects)
	git("commit", "-q", "--allow-empty", "-m", "the session's")
	commit := git("rev-parse", "HEAD")
	blocker := filepath.Join(gitDir, "objects", commit[:2])
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	d := objectsDaemon(t, q, zap.NewNop())
	d.releaseObjects("alice") // the session's end
	if !d.host.quarantine.Unreleased("alice") {
		t.Fatal("a release that failed is not remembered")
	}
	// Nor does the merge feeder queue alice's task meanwhile.
	if d.objectsIn("alice") || !d.objectsIn("bob") {
		t.Error("objectsIn: alice's objects wait in her quarantine, bob has none waiting")
	}
	if err := os.Remove(blocker); err != nil { // room again
		t.Fatal(err)
	}
	var found bool
	g := objectsFirst{Git: statusGit{gitDir: gitDir, commit: commit, found: &found}, d: d}
	if _, err := g.Look(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Error("the next prompt read the branch before the commit was in the repository")
	}
	if d.host.quarantine.Unreleased("alice") || !d.objectsIn("alice") {
		t.Error("the release that succeeded is still remembered as failed")
	}
}

// The git of a release runs as a process tree of the daemon's: fed the
// pack on its standard input, at the sessions' priority, with the tree's
// marker, in a cgroup of its own where this machine lets the daemon make
// them; a git that fails is a *GitError with what it wrote, and one still
// running when the release's time ends is killed whole. A release through
// it moves a real pack's objects.
func TestAReleasesGitRunsAsATreeOfTheDaemons(t *testing.T) {
	sup, err := proc.NewSupervisor(t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Close() })
	var cg *cgroup.Hierarchy
	var name [6]byte
	_, _ = rand.Read(name[:])
	if h, err := cgroup.Open("swarmd-daemon-test-" + hex.EncodeToString(name[:])); err == nil {
		cg = h
		sup.UseCgroups(h)
		t.Cleanup(func() { _ = h.Close() }) // after the supervisor's Close: cleanups run last first
	} else {
		t.Logf("*** cgroup v2 not writable here (%v): the cgroup is not checked", err)
	}
	sup.SetNice(7)
	d := &Daemon{log: zap.NewNop(), metrics: metrics.New(metrics.BuildInfo{})}
	d.host.sup = sup

	pack := filepath.Join(t.TempDir(), "pack")
	writeFile(t, pack, "PACK!")
	stdin := func() *os.File {
		f, err := os.Open(pack)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	out, err := d.objectsGit(context.Background(), quarantine.Command{Agent: "alice", Stdin: stdin(), Memory: 64 << 20,
		Argv: []string{"/bin/sh", "-c", `wc -c; cut -d' ' -f19 /proc/self/stat; printenv ` + proc.MarkerEnv + `; grep '^0::' /proc/self/cgroup`}})
	if err != nil {
		t.Fatalf("git's stand-in: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 4 || lines[0] != "5" || lines[1] != "7" || !strings.Contains(lines[2], "objects-alice-") {
		t.Fatalf("it read %q, ran at nice %q with marker %q; want the pack's 5 bytes, nice 7 and the tree's marker", lines[0], lines[1], lines[2])
	}
	if cg != nil && !strings.Contains(lines[3], "/"+filepath.Base(cg.Dir())+"/objects-alice-") {
		t.Errorf("it ran in cgroup %q, not a tree's of %s", lines[3], cg.Dir())
	}

	out, err = d.objectsGit(context.Background(), quarantine.Command{Agent: "alice", Stdin: stdin(),
		Argv: []string{"/bin/sh", "-c", "echo fatal: pack has junk at the end; exit 128"}})
	var gerr *quarantine.GitError
	if !errors.As(err, &gerr) || gerr.Status != "exit status 128" || strings.TrimSpace(string(out)) != "fatal: pack has junk at the end" {
		t.Fatalf("a failing git: %v, %q; want a *GitError, exit status 128, and what it wrote", err, out)
	}

	// Time enough for the shell to start and print its pid on a loaded
	// machine (50 ms was not, once, in a clean-clone CI run), far short of
	// its sleep.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	out, err = d.objectsGit(ctx, quarantine.Command{Agent: "alice", Stdin: stdin(),
		Argv: []string{"/bin/sh", "-c", "echo $$; sleep 30 & wait"}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Fatalf("a git past its time: %v after %v", err, time.Since(start))
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if pid == 0 {
		t.Fatalf("the stand-in's pid: %q", out)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("the git past its time, pid %d, is still there", pid)
	}

	// A real release through it.
	dir, gitDir, q := newQuarantine(t)
	q.Exec = d.objectsGit
	objects, err := q.Prepare("alice")
	if err != nil {
		t.Fatal(err)
	}
	git := sandboxedGit(t, dir, "GIT_OBJECT_DIRECTORY="+objects, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+q.Shared())
	git("commit", "-q", "--allow-empty", "-m", "the session's")
	commit := git("rev-parse", "HEAD")
	git("repack", "-a", "-d", "-l", "-q")
	got, err := q.Release(context.Background(), "alice")
	if err != nil || got.Moved != 1 || len(got.Refused) != 0 {
		t.Fatalf("released %+v, %v; want the pack's commit moved", got, err)
	}
	if err := exec.Command("git", "--git-dir", gitDir, "cat-file", "-e", commit).Run(); err != nil {
		t.Errorf("the commit is not in the repository: %v", err)
	}
}

// A start gives git a bounded time on the packs a killed daemon's sessions
// left (here none at all): a pack it did not finish waits in its
// quarantine, and its agent's first prompt moves it, while the others'
// objects are moved at the start. One agent's pack (a hostile one takes
// git ten minutes) does not hold up the swarm's start.
func TestAStartLeavesAPackItHadNoTimeForToItsAgent(t *testing.T) {
	dir, gitDir, q := newQuarantine(t)
	commitIn := func(agent string, pack bool) string {
		objects, err := q.Prepare(agent)
		if err != nil {
			t.Fatal(err)
		}
		git := sandboxedGit(t, dir, "GIT_OBJECT_DIRECTORY="+objects, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+q.Shared())
		commit := git("commit-tree", "-p", "main", "-m", agent+"'s session", "main^{tree}")
		if pack {
			git("update-ref", "refs/heads/swarm/"+agent+"/work", commit) // reachable: packed
			git("repack", "-a", "-d", "-l", "-q")
		}
		return commit
	}
	alices, bobs := commitIn("alice", true), commitIn("bob", false)
	inRepo := func(commit string) bool {
		return exec.Command("git", "--git-dir", gitDir, "cat-file", "-e", commit).Run() == nil
	}

	core, logged := observer.New(zap.WarnLevel)
	d := objectsDaemon(t, q, zap.New(core))
	d.releaseLeft(context.Background(), 0)
	if inRepo(alices) || !inRepo(bobs) {
		t.Fatalf("after the start: alice's packed commit in the repository %v, bob's loose one %v; want false, true", inRepo(alices), inRepo(bobs))
	}
	if !q.Unreleased("alice") || q.Unreleased("bob") {
		t.Fatal("alice's quarantine is not left to her prompt")
	}
	if got := logged.FilterMessageSnippet("each agent's first prompt moves its own").Len(); got != 1 {
		t.Errorf("%d warnings that the rest is left to the agents' prompts, want 1: %v", got, logged.All())
	}
	var found bool
	g := objectsFirst{Git: statusGit{gitDir: gitDir, commit: alices, found: &found}, d: d}
	if _, err := g.Look(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if !found || q.Unreleased("alice") {
		t.Errorf("alice's first prompt read her branch with her commit in the repository: %v; still left: %v", found, q.Unreleased("alice"))
	}
}

// A stop lets its sessions' releases run for stopReleaseTime, and a force
// stop not at all: a release still running then (here a git that sleeps
// for ten minutes stands in for a pack that takes git that long) is cut
// short, its pack left in the quarantine for the next start, and SIGTERM
// is not held up by it.
func TestAStopCutsTheReleasesShort(t *testing.T) {
	for _, force := range []bool{false, true} {
		_, _, q := newQuarantine(t)
		objects, err := q.Prepare("alice")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(objects, "pack"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(objects, "pack", "pack-slow.pack"), "PACK\x00\x00\x00\x02\x00\x00\x00\x01")
		started := make(chan struct{})
		q.Exec = func(ctx context.Context, c quarantine.Command) ([]byte, error) {
			close(started)
			err := exec.CommandContext(ctx, "sleep", "600").Run()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		d := objectsDaemon(t, q, zap.NewNop())
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.releaseObjects("alice") // a session's end, as the stop begins
		}()
		<-started
		begun := time.Now()
		if force {
			d.ForceStop()
		} else {
			defer d.cutReleasesAfter(50 * time.Millisecond).Stop()
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("force %v: the release is still running %v after the stop began", force, time.Since(begun))
		}
		if !q.Unreleased("alice") {
			t.Errorf("force %v: the release cut short does not count as failed", force)
		}
		if _, err := os.Stat(filepath.Join(objects, "pack", "pack-slow.pack")); err != nil {
			t.Errorf("force %v: the pack is not left for the next start: %v", force, err)
		}
	}
}
