package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/metrics"
	"github.com/swarmd/swarmd/internal/quarantine"
	"github.com/swarmd/swarmd/internal/worktree"
)

// statusGit is the worktrees as the prompt builder reads them: it records
// whether the commit was in the repository when the branch was read.
type statusGit struct {
	gitDir, commit string
	found          *bool
}

func (g statusGit) Status(context.Context, string) (worktree.Status, error) {
	*g.found = exec.Command("git", "--git-dir", g.gitDir, "cat-file", "-e", g.commit).Run() == nil
	return worktree.Status{}, nil
}

func (g statusGit) RecentCommits(context.Context, string, int) ([]worktree.Commit, error) {
	return nil, nil
}

// A release that fails (here the store's fan-out directory is a file; a
// full disk fails the same way) leaves the objects in the quarantine, and
// the agent's next prompt moves them before it reads the branch: the agent
// goes on by itself once the store can take them.
func TestAPromptMovesWhatAFailedReleaseLeft(t *testing.T) {
	dir := filepath.Dir(repo(t, ""))
	gitDir := filepath.Join(dir, ".git")
	q := quarantine.New(filepath.Join(t.TempDir(), "q"), gitDir, filepath.Join(gitDir, "objects"))
	objects, err := q.Prepare("alice")
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_OBJECT_DIRECTORY="+objects)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("commit", "-q", "--allow-empty", "-m", "the session's")
	commit := git("rev-parse", "HEAD")
	blocker := filepath.Join(gitDir, "objects", commit[:2])
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	d := &Daemon{log: zap.NewNop(), metrics: metrics.New(metrics.BuildInfo{})}
	d.host.quarantine = q
	d.releaseObjects("alice") // the session's end
	if !d.host.quarantine.Unreleased("alice") {
		t.Fatal("a release that failed is not remembered")
	}
	if err := os.Remove(blocker); err != nil { // room again
		t.Fatal(err)
	}
	var found bool
	g := objectsFirst{Git: statusGit{gitDir: gitDir, commit: commit, found: &found}, d: d}
	if _, err := g.Status(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Error("the next prompt read the branch before the commit was in the repository")
	}
	if d.host.quarantine.Unreleased("alice") {
		t.Error("the release that succeeded is still remembered as failed")
	}
}
