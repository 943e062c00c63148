package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/worktree"
)

// These tests run real sessions (sh scripts through the command backend) in
// real worktrees of a real repository.

// gitIdentity lets sessions commit whatever the machine's git config says.
var gitIdentity = []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
	"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1"}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), gitIdentity...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitWorkspace is a repository with one commit on main and its worktree
// manager (worktrees under <repo>/.swarm).
func gitWorkspace(t *testing.T) (repo string, m *worktree.Manager) {
	t.Helper()
	repo = t.TempDir()
	git(t, repo, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "initial")
	m, err := worktree.Open(context.Background(), worktree.Options{Repo: repo, StateDir: filepath.Join(repo, ".swarm"),
		Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return repo, m
}

// shSessions is a command backend whose sessions run script; $STATE is a
// directory the script and the test share, and $N counts the sessions.
func shSessions(t *testing.T, sup *proc.Supervisor, script string) (*backend.Command, string) {
	t.Helper()
	state := t.TempDir()
	be, err := backend.NewCommand(sup, backend.CommandConfig{Command: "/bin/sh", Args: []string{"-c",
		`N=$(( $(cat "$STATE/n" 2>/dev/null || echo 0) + 1 )); echo $N > "$STATE/n"` + "\n" + script}})
	if err != nil {
		t.Fatal(err)
	}
	return be, state
}

func gitHarness(t *testing.T, sup *proc.Supervisor, m *worktree.Manager, script string, mod func(*Config)) (*harness, string) {
	t.Helper()
	be, state := shSessions(t, sup, script)
	h := realHarness(t, be, func(c *Config) {
		c.Workspace = m
		c.Env = append([]string{"STATE=" + state}, gitIdentity...)
		c.Logger = zaptest.NewLogger(t)
		if mod != nil {
			mod(c)
		}
	})
	return h, state
}

func (h *harness) sessions() []SessionRecord {
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	return append([]SessionRecord(nil), h.rec.sessions...)
}

// waitFile waits for a file a session writes, until it is not empty.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A session force-stopped while its `git commit` holds index.lock leaves
// the lock behind (SIGKILL gives git no chance to remove it). The next
// session must still be able to commit: the runner clears the stale lock
// before it starts, and at agent start.
func TestRealStaleGitLockCleared(t *testing.T) {
	sup := newSupervisor(t)
	repo, m := gitWorkspace(t)
	h, state := gitHarness(t, sup, m, `
if [ $N = 1 ]; then
  trap '' TERM INT
  printf '#!/bin/sh\necho yes > "$STATE/editing"\nexec sleep 3600\n' > "$STATE/editor"; chmod +x "$STATE/editor"
  echo change >> README.md
  GIT_EDITOR="$STATE/editor" setsid git commit -a &
  sleep 3600
fi
echo "session $N" >> README.md
git commit -qam "session $N"
`, nil)
	h.start()
	waitFile(t, filepath.Join(state, "editing")) // git holds index.lock now
	h.r.Interrupt(1, time.Now())                 // ignored: force-stopped after the grace period
	h.waitReal("a second session", func(Snapshot) bool { return len(h.sessions()) >= 2 })
	s := h.sessions()[1]
	if s.Outcome.Kind != agent.Success || s.Commits != 1 {
		t.Fatalf("session after the force stop: %v, %d commits (%s)", s.Outcome, s.Commits, s.Result.Reason)
	}
	h.stop()

	// A daemon restart whose sweep killed a git mid-commit: the lock is
	// there before the agent's first session.
	admin := git(t, m.Path("alice"), "rev-parse", "--absolute-git-dir")
	for _, f := range []string{"index.lock", "HEAD.lock"} {
		if err := os.WriteFile(filepath.Join(admin, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := git(t, repo, "rev-parse", "swarm/alice/work")
	h2, _ := gitHarness(t, sup, m, `echo again >> README.md; git commit -qam again`, nil)
	h2.start()
	h2.waitReal("a session", func(Snapshot) bool { return len(h2.sessions()) >= 1 })
	if s := h2.sessions()[0]; s.Outcome.Kind != agent.Success || s.HeadBefore != before || s.Commits != 1 {
		t.Fatalf("first session after a restart: %v, %d commits (%s)", s.Outcome, s.Commits, s.Result.Reason)
	}
	h2.stop()
	assertNoLeftovers(t, h)
}

// A session that checks out another branch, whatever its outcome, does not
// cost the agent its worktree: the next session runs on swarm/<agent>
// again, and the other branch keeps its commit.
func TestRealBranchRestoredAfterAnyOutcome(t *testing.T) {
	for _, tc := range []struct {
		name, end string // how session 1 ends
		interrupt bool
	}{
		{"success", "exit 0", false},
		{"error", "exit 1", false},
		{"interrupt", "sleep 3600", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sup := newSupervisor(t)
			repo, m := gitWorkspace(t)
			h, state := gitHarness(t, sup, m, `
git branch --show-current > "$STATE/branch.$N"
if [ $N = 1 ]; then
  git checkout -q -b feature && echo f > f.txt && git add f.txt && git commit -qm feature
  echo uncommitted > notes.txt
  echo yes > "$STATE/switched"
  `+tc.end+`
fi
sleep 3600
`, nil)
			h.start()
			waitFile(t, filepath.Join(state, "switched"))
			if tc.interrupt {
				h.r.Interrupt(1, time.Now())
			}
			if got := waitFile(t, filepath.Join(state, "branch.2")); got != "swarm/alice/work\n" {
				t.Fatalf("second session ran on %q", got)
			}
			if s := h.r.Snapshot(); s.State.Kind == agent.Stopped {
				t.Fatalf("agent stopped: %s", s.Reason)
			}
			git(t, repo, "rev-parse", "--verify", "feature:f.txt")
			if b, _ := os.ReadFile(filepath.Join(m.Path("alice"), "notes.txt")); string(b) != "uncommitted\n" {
				t.Errorf("uncommitted work lost: %q", b)
			}
			h.stop()
			assertNoLeftovers(t, h)
		})
	}
}

// When uncommitted work blocks switching back, the agent stops with
// commands that keep the work and switch back; after them, starting the
// agent again works.
func TestRealBranchBlockedStopsWithWorkingAdvice(t *testing.T) {
	sup := newSupervisor(t)
	repo, m := gitWorkspace(t)
	h, state := gitHarness(t, sup, m, `
git branch --show-current > "$STATE/branch.$N"
if [ $N = 1 ]; then
  git checkout -q -b feature && echo feature > README.md && git commit -qam feature
  echo uncommitted > README.md
  exit 0
fi
sleep 3600
`, nil)
	h.start()
	h.stoppedOnItsOwn()
	s := h.r.Snapshot()
	_, fix, ok := strings.Cut(s.Reason, "switch back with: ")
	fix, _, found := strings.Cut(fix, "; then: swarmd start alice")
	if s.State.Kind != agent.Stopped || !ok || !found || strings.Contains(s.Reason, "\n") {
		t.Fatalf("state %v, reason %q: want a stop with commands", s.State, s.Reason)
	}
	if out, err := exec.Command("/bin/sh", "-c", fix).CombinedOutput(); err != nil {
		t.Fatalf("the advice %q failed: %v\n%s", fix, err, out)
	}
	if got := git(t, repo, "show", "feature:README.md"); got != "uncommitted" {
		t.Errorf("feature:README.md = %q, want the uncommitted work", got)
	}

	// swarmd start: a new runner for the agent.
	h2, _ := gitHarness(t, sup, m, `git branch --show-current > "$STATE/branch"; sleep 3600`, nil)
	h2.r.cfg.Env = h.r.cfg.Env // the same $STATE
	h2.start()
	if got := waitFile(t, filepath.Join(state, "branch")); got != "swarm/alice/work\n" {
		t.Fatalf("after swarmd start the session ran on %q", got)
	}
	h2.stop()
	assertNoLeftovers(t, h2)
}
