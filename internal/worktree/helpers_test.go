package worktree

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
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

// gitT runs git in dir and returns its trimmed standard output.
func gitT(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitOut(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// newRepo makes a repository on branch main with one commit.
func newRepo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	gitT(t, dir, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(dir, "README.md"), "hello\n")
	commitAll(t, dir, "initial")
	return dir
}

// newBigRepo makes a repository whose one commit holds n files. The commit
// is written with one "git fast-import" (no files are created in the main
// working tree, which is slow on this kind of disk and irrelevant here: only
// the agents' worktrees are checked out).
func newBigRepo(t testing.TB, n int) string {
	t.Helper()
	dir := t.TempDir()
	gitT(t, dir, "init", "-q", "-b", "main")
	var stream bytes.Buffer
	stream.WriteString("commit refs/heads/main\ncommitter Test <test@example.com> 1700000000 +0000\ndata 4\nbig\n")
	for i := range n {
		content := fmt.Sprintf("package pkg\n\n// file %d\nvar V%d = %d\n", i, i, i)
		fmt.Fprintf(&stream, "M 100644 inline pkg%03d/f%04d.go\ndata %d\n%s\n", i/100, i, len(content), content)
	}
	cmd := exec.Command("git", "-C", dir, "fast-import", "--quiet")
	cmd.Stdin = &stream
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fast-import: %v: %s", err, out)
	}
	return dir
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// commitAll commits everything in dir and returns the new commit.
func commitAll(t testing.TB, dir, msg string) string {
	t.Helper()
	gitT(t, dir, "add", "-A")
	gitT(t, dir, "commit", "-q", "-m", msg)
	return gitT(t, dir, "rev-parse", "HEAD")
}

func openT(t testing.TB, repo string, mod ...func(*Options)) *Manager {
	t.Helper()
	opts := Options{Repo: repo, StateDir: filepath.Join(repo, ".swarm"), Log: zaptest.NewLogger(t)}
	for _, f := range mod {
		f(&opts)
	}
	m, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// worktreePaths lists the linked worktrees git knows, main worktree excluded.
func worktreePaths(t testing.TB, repo string) []string {
	t.Helper()
	var paths []string
	for i, line := range strings.Split(gitT(t, repo, "worktree", "list", "--porcelain"), "\n") {
		if p, ok := strings.CutPrefix(line, "worktree "); ok && i > 0 {
			paths = append(paths, p)
		}
	}
	return paths
}

func branchExists(repo, branch string) bool {
	_, err := gitOut(repo, "rev-parse", "--verify", "-q", "refs/heads/"+branch)
	return err == nil
}

// snapshot records every path under root with its mode and content, to show
// that code left a directory alone.
func snapshot(t testing.TB, root string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		entry := info.Mode().String()
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			entry += " " + string(data)
		}
		snap[path] = entry
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}
