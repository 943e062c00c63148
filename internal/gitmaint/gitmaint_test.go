package gitmaint

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/quarantine"
)

func TestMain(m *testing.M) {
	// Tests must not depend on the machine's git config.
	for k, v := range map[string]string{
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME":     "Test",
		"GIT_AUTHOR_EMAIL":    "test@example.com",
		"GIT_COMMITTER_NAME":  "Test",
		"GIT_COMMITTER_EMAIL": "test@example.com",
	} {
		os.Setenv(k, v)
	}
	goleak.VerifyTestMain(m)
}

const waitLimit = 60 * time.Second // generous: -race on two shared cores

// threshold is the tests' gc.auto: more than 2 loose objects in objects/17.
const threshold = 300

func git(t testing.TB, dir string, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// repo is a repository whose branch main is a commit of n files, all its
// objects loose, with a linked worktree on branch swarm/a/work.
func repo(t *testing.T, n int) (dir, gitDir string) {
	t.Helper()
	scratch := t.TempDir()
	git(t, scratch, nil, "init", "-q", "-b", "main")
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit refs/heads/main\ncommitter T <t@e> 1700000000 +0000\ndata 2\nc0\n")
	for i := 0; i < n; i++ {
		body := "file " + strconv.Itoa(i) + "\n"
		fmt.Fprintf(&in, "M 100644 inline f%d\ndata %d\n%s", i, len(body), body)
	}
	git(t, scratch, in.Bytes(), "fast-import", "--quiet")
	pack := git(t, scratch, nil, "pack-objects", "--all", "--stdout")

	dir = filepath.Join(t.TempDir(), "repo")
	git(t, filepath.Dir(dir), nil, "init", "-q", "-b", "main", dir)
	git(t, dir, []byte(pack), "unpack-objects", "-q")
	git(t, dir, nil, "update-ref", "refs/heads/main", git(t, scratch, nil, "rev-parse", "main"))
	git(t, dir, nil, "reset", "-q", "--hard")
	git(t, dir, nil, "worktree", "add", "-q", "-b", "swarm/a/work", filepath.Join(filepath.Dir(dir), "wt"))
	return dir, filepath.Join(dir, ".git")
}

// supervisor is a proc.Supervisor closed at the end of the test.
func supervisor(t *testing.T) *proc.Supervisor {
	t.Helper()
	s, err := proc.NewSupervisor(t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatalf("NewSupervisor: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newMaintainer(t *testing.T, gitDir string, sup *proc.Supervisor, runs chan Run, o Options) *Maintainer {
	o.GitDir, o.Procs, o.Log = gitDir, sup, zaptest.NewLogger(t)
	o.LooseObjects = threshold
	if o.Every == 0 {
		o.Every = time.Hour // the check at the start only
	}
	o.Observe = func(r Run) { runs <- r }
	return New(o)
}

func waitRun(t *testing.T, runs chan Run) Run {
	t.Helper()
	select {
	case r := <-runs:
		return r
	case <-time.After(waitLimit):
		t.Fatal("no run of git gc within the limit")
		return Run{}
	}
}

// noProcessOf fails unless every process of sup's trees has ended.
func noProcessOf(t *testing.T, sup *proc.Supervisor) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if c, ok := proc.CallerOf(pid); ok && c.Instance == sup.Instance() {
			cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			t.Errorf("process %d of tree %s is left: %s", pid, c.TreeID, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
		}
	}
}

func objectExists(t *testing.T, dir, oid string) bool {
	t.Helper()
	return exec.Command("git", "-C", dir, "cat-file", "-e", oid).Run() == nil
}

// TestPacksTheLooseObjectsAndKeepsWhatTheSwarmNeeds: past the threshold,
// the start runs git gc, which packs the loose objects and loses none the
// swarm needs: what an agent's index holds (its work not yet committed,
// however old), refs/swarmd/*, the agents' branches; and it runs no hook
// of the repository's.
func TestPacksTheLooseObjectsAndKeepsWhatTheSwarmNeeds(t *testing.T) {
	dir, gitDir := repo(t, 2000)
	wt := filepath.Join(filepath.Dir(dir), "wt")
	// Work in progress: a blob only the worktree's index names, written a
	// month ago (past git's prune grace).
	os.WriteFile(filepath.Join(wt, "wip.txt"), []byte("work in progress\n"), 0o644)
	git(t, wt, nil, "add", "wip.txt")
	wip := git(t, wt, nil, "rev-parse", ":wip.txt")
	old := time.Now().Add(-30 * 24 * time.Hour)
	os.Chtimes(filepath.Join(gitDir, "objects", wip[:2], wip[2:]), old, old)
	// A commit only refs/swarmd/ names, and one only the agent's branch.
	keep := git(t, dir, []byte("swarmd's own\n"), "hash-object", "-w", "--stdin")
	git(t, dir, nil, "update-ref", "refs/swarmd/set-aside/1", git(t, dir, nil, "commit-tree", "-m", "kept", git(t, dir, []byte("100644 blob "+keep+"\tk\n"), "mktree")))
	os.WriteFile(filepath.Join(wt, "agent.txt"), []byte("the agent's\n"), 0o644)
	git(t, wt, nil, "add", "agent.txt")
	git(t, wt, nil, "commit", "-qm", "agent")
	agentBlob := git(t, wt, nil, "rev-parse", "HEAD:agent.txt")
	// A hook gc --auto runs, were hooks on.
	marker := filepath.Join(t.TempDir(), "hook-ran")
	os.WriteFile(filepath.Join(gitDir, "hooks", "pre-auto-gc"), []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755)

	loose, _ := Count(gitDir)
	if !Over(loose, 0, threshold, DefaultPacks) {
		t.Fatalf("the test repository's estimate %d is not over %d", loose, threshold)
	}
	sup := supervisor(t)
	runs := make(chan Run, 4)
	m := newMaintainer(t, gitDir, sup, runs, Options{})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := waitRun(t, runs)
	m.Stop()
	if r.Result != ResultOK {
		t.Fatalf("run: %+v", r)
	}
	if after, _ := Count(gitDir); after != 0 {
		t.Errorf("loose objects after the run: %d in objects/17, want none", after/256)
	}
	for name, oid := range map[string]string{"work in progress": wip, "refs/swarmd": keep, "agent's branch": agentBlob} {
		if !objectExists(t, dir, oid) {
			t.Errorf("the object of the %s (%s) is gone", name, oid)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("git gc ran the repository's pre-auto-gc hook")
	}
	noProcessOf(t, sup)
}

// TestPacksTheLooseObjectsWhenGCCannot: a running sandbox moved its branch
// to a commit still in its quarantine after Prepare had moved it in (the
// sessions of a busy swarm commit back to back), so git gc stops at the
// branch ("bad object"). The loose objects are packed all the same, by a
// command that lists no ref, and none is lost; the run says both.
func TestPacksTheLooseObjectsWhenGCCannot(t *testing.T) {
	dir, gitDir := repo(t, 2000)
	tree := git(t, dir, nil, "rev-parse", "main^{tree}")
	missing := strings.Repeat("7", len(tree))
	os.WriteFile(filepath.Join(gitDir, "refs", "heads", "swarm", "a", "work"), []byte(missing+"\n"), 0o644)

	sup := supervisor(t)
	runs := make(chan Run, 4)
	m := newMaintainer(t, gitDir, sup, runs, Options{})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := waitRun(t, runs)
	m.Stop()
	if r.Result != ResultPacked || !strings.Contains(r.Reason, "bad object refs/heads/swarm/a/work") {
		t.Fatalf("run: %+v; want %q, with gc's reason", r, ResultPacked)
	}
	if after, _ := Count(gitDir); after != 0 {
		t.Errorf("loose objects after the run: %d in objects/17, want none", after/256)
	}
	if out, err := exec.Command("git", "-C", dir, "ls-tree", "-r", "main").CombinedOutput(); err != nil || strings.Count(string(out), "\n") != 2000 {
		t.Errorf("main's tree after the run: %v, %d entries", err, strings.Count(string(out), "\n"))
	}
	for _, f := range []string{"f0", "f1999"} {
		if !objectExists(t, dir, git(t, dir, nil, "rev-parse", "main:"+f)) {
			t.Errorf("main's %s is gone", f)
		}
	}
	noProcessOf(t, sup)
}

// TestReadsTheBranchesAQuarantineHolds: a running sandbox's commit is in
// its quarantine until its session ends, its branch naming it, and beside
// it the sandbox left a pack of copies of the store's objects (git repack
// -a through its alternate). Prepare moves the quarantine's objects into
// the store, checked, before the run: git gc runs, keeps the commit's
// parent (old, packed, and named by nothing else), and reads no object
// directory the sandbox writes. Once the sandbox has removed its pack,
// the repository is whole: had the quarantine been gc's alternate,
// repack -l would have left every object that pack copied out of the new
// pack, and deleted the store's own.
func TestReadsTheBranchesAQuarantineHolds(t *testing.T) {
	dir, gitDir := repo(t, 2000)
	wt := filepath.Join(filepath.Dir(dir), "wt")
	// The agent's last commit, old and packed, named by its branch alone
	// (no reflog: the sandbox writes its branch's reflogs).
	os.WriteFile(filepath.Join(wt, "old.txt"), []byte("old work\n"), 0o644)
	git(t, wt, nil, "add", "old.txt")
	git(t, wt, nil, "commit", "-qm", "old")
	parent := git(t, wt, nil, "rev-parse", "HEAD")
	git(t, dir, []byte(parent+"\n"), "pack-objects", "-q", filepath.Join(gitDir, "objects", "pack", "pack"))
	git(t, dir, nil, "prune-packed")
	packs, _ := filepath.Glob(filepath.Join(gitDir, "objects", "pack", "*"))
	month := time.Now().Add(-30 * 24 * time.Hour)
	for _, p := range packs {
		os.Chtimes(p, month, month)
	}
	// The session's commit, in its quarantine, and its copies of the
	// store's objects.
	qs := quarantine.New(filepath.Join(t.TempDir(), "q"), gitDir, filepath.Join(t.TempDir(), "o"))
	q, err := qs.Prepare("a")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "-C", wt, "commit", "-q", "--allow-empty", "-m", "in the quarantine")
	cmd.Env = append(os.Environ(), "GIT_OBJECT_DIRECTORY="+q, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+filepath.Join(gitDir, "objects"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("commit into the quarantine: %v: %s", err, out)
	}
	tip := git(t, wt, nil, "rev-parse", "HEAD")
	os.RemoveAll(filepath.Join(gitDir, "logs", "refs", "heads", "swarm"))
	os.RemoveAll(filepath.Join(gitDir, "worktrees", "wt", "logs"))
	os.MkdirAll(filepath.Join(q, "pack"), 0o755)
	cmd = exec.Command("git", "-C", wt, "pack-objects", "-q", "--all", filepath.Join(q, "pack", "pack"))
	cmd.Env = append(os.Environ(), "GIT_OBJECT_DIRECTORY="+q, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+filepath.Join(gitDir, "objects"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pack the store's objects into the quarantine: %v: %s", err, out)
	}

	sup := supervisor(t)
	runs := make(chan Run, 4)
	prepared := 0
	m := newMaintainer(t, gitDir, sup, runs, Options{Prepare: func(ctx context.Context) {
		prepared++
		if _, err := qs.Move(ctx, "a"); err != nil {
			t.Errorf("Move: %v", err)
		}
	}})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := waitRun(t, runs)
	m.Stop()
	if r.Result != ResultOK || prepared != 1 {
		t.Fatalf("run: %+v, prepared %d times", r, prepared)
	}
	if !objectExists(t, dir, parent) || !objectExists(t, dir, tip) {
		t.Errorf("the quarantined commit %s or its parent %s is not in the repository", tip, parent)
	}
	os.RemoveAll(filepath.Join(q, "pack"))
	if out, err := exec.Command("git", "-C", dir, "fsck", "--connectivity-only", "--no-dangling").CombinedOutput(); err != nil {
		t.Errorf("the repository lost objects to git gc: %v\n%s", err, out)
	}
}

// TestAFIFOHoldsARunNoLongerThanItsBound: a FIFO a session planted in its
// branch directory holds every git that lists the refs. The run ends at
// its bound, whole, with gc's lock file removed (SIGTERM first).
func TestAFIFOHoldsARunNoLongerThanItsBound(t *testing.T) {
	_, gitDir := repo(t, 2000)
	fifo := filepath.Join(gitDir, "refs", "heads", "swarm", "a", "held")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sup := supervisor(t)
	runs := make(chan Run, 4)
	const bound = time.Second
	m := newMaintainer(t, gitDir, sup, runs, Options{Timeout: bound})
	start := time.Now()
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := waitRun(t, runs)
	took := time.Since(start)
	m.Stop()
	if r.Result != ResultTimeout {
		t.Fatalf("run: %+v, want a timeout", r)
	}
	if took > bound+termGrace+10*time.Second {
		t.Errorf("the run held by a FIFO took %s, bound %s", took, bound)
	}
	noProcessOf(t, sup)
	if _, err := os.Lstat(filepath.Join(gitDir, "gc.pid")); err == nil {
		t.Error("gc.pid is left: git gc was killed, not terminated")
	}
}

// TestStopEndsARunAFIFOHolds: the daemon's stop ends a run a FIFO holds
// (in the place of an agent's worktree HEAD) at once, not at its bound,
// and leaves no process.
func TestStopEndsARunAFIFOHolds(t *testing.T) {
	_, gitDir := repo(t, 2000)
	head := filepath.Join(gitDir, "worktrees", "wt", "HEAD")
	os.Remove(head)
	if err := syscall.Mkfifo(head, 0o644); err != nil {
		t.Fatal(err)
	}
	sup := supervisor(t)
	runs := make(chan Run, 4)
	m := newMaintainer(t, gitDir, sup, runs, Options{Timeout: time.Hour})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// git gc --auto takes gc.pid before it lists the refs.
	deadline := time.Now().Add(waitLimit)
	for {
		if _, err := os.Lstat(filepath.Join(gitDir, "gc.pid")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("git gc did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { m.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(termGrace + 10*time.Second):
		t.Fatal("Stop did not end a run a FIFO holds")
	}
	if r := waitRun(t, runs); r.Result != ResultStopped {
		t.Errorf("run: %+v, want stopped", r)
	}
	noProcessOf(t, sup)
}

// TestBelowTheThresholdNothingRuns: a repository under git's threshold
// gets no run.
func TestBelowTheThresholdNothingRuns(t *testing.T) {
	_, gitDir := repo(t, 20)
	sup := supervisor(t)
	runs := make(chan Run, 4)
	m := newMaintainer(t, gitDir, sup, runs, Options{})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.Stop() // waits for a run the start began
	select {
	case r := <-runs:
		t.Errorf("a run below the threshold: %+v", r)
	default:
	}
}

// A failed run's reason has git's first error, the cause, before its last
// line, which names only the step that failed.
func TestGitSaid(t *testing.T) {
	for out, want := range map[string]string{
		"":                              "",
		"fatal: failed to run repack\n": "fatal: failed to run repack",
		"Enumerating objects: 5\nfatal: bad object refs/heads/swarm/a1/work\nfatal: failed to run repack\n": "fatal: bad object refs/heads/swarm/a1/work; fatal: failed to run repack",
		"warning: something\nerror: could not lock\nsome last words":                                        "error: could not lock; some last words",
	} {
		if got := gitSaid([]byte(out)); got != want {
			t.Errorf("gitSaid(%q) = %q, want %q", out, got, want)
		}
	}
}
