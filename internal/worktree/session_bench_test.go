package worktree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkSessionGitCost does to an unchanged worktree what one session
// does (the runner's Verify, ClearStaleLocks, Head before and after and
// CommitsBetween; the prompt builder's RecentCommits and Status) and reports
// the git processes it started per session ("git/op"). The agent's branch
// is one commit ahead of the base, as after its first session's work.
//
//	go test -run '^$' -bench SessionGitCost ./internal/worktree/
func BenchmarkSessionGitCost(b *testing.B) {
	for _, bc := range []struct {
		name  string
		files int
	}{{"small", 0}, {"5000files", 5000}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			repo := newRepo(b)
			if bc.files > 0 {
				repo = newBigRepo(b, bc.files)
			}
			// Two Managers on the same worktree: one counts git processes
			// (through a shell wrapper, which would skew the times), the
			// other, with the real git, is timed.
			git, count := countingGit(b)
			counted := openT(b, repo, func(o *Options) { o.Git = git; o.Log = nil })
			m := openT(b, repo, func(o *Options) { o.Log = nil })
			wt, err := m.Ensure(ctx, "a")
			if err != nil {
				b.Fatal(err)
			}
			writeFile(b, filepath.Join(wt.Path, "work.txt"), "work\n")
			commitAll(b, wt.Path, "work")
			// What the first checks after a change cost is not the question:
			// the worktree settles first (file times a few ms old).
			settle(b, ctx, counted, "a", count)
			before := count()
			const sessions = 20
			for range sessions {
				oneSession(b, ctx, counted, "a")
			}
			gitPerSession := float64(count()-before) / sessions
			settle(b, ctx, m, "a", nil)
			b.ResetTimer()
			for range b.N {
				oneSession(b, ctx, m, "a")
			}
			b.StopTimer()
			b.ReportMetric(gitPerSession, "git/op")
		})
	}
}

// oneSession makes the worktree calls of one session on an agent whose
// worktree does not change.
func oneSession(b testing.TB, ctx context.Context, m *Manager, agent string) {
	if _, err := m.Verify(ctx, agent); err != nil {
		b.Fatal(err)
	}
	if _, err := m.ClearStaleLocks(ctx, agent); err != nil {
		b.Fatal(err)
	}
	if _, err := m.RecentCommits(ctx, agent, 5); err != nil {
		b.Fatal(err)
	}
	if _, err := m.Status(ctx, agent); err != nil {
		b.Fatal(err)
	}
	before, err := m.Head(ctx, agent)
	if err != nil {
		b.Fatal(err)
	}
	after, err := m.Head(ctx, agent)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.CommitsBetween(ctx, before, after); err != nil {
		b.Fatal(err)
	}
}

// settle runs sessions until one starts no git process (count given), or
// for at most a second: until the worktree's files are older than the
// status cache's racy window.
func settle(b testing.TB, ctx context.Context, m *Manager, agent string, count func() int) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		n := 0
		if count != nil {
			n = count()
		}
		oneSession(b, ctx, m, agent)
		if count != nil && count() == n {
			return
		}
	}
}

// countingGit writes a git wrapper that counts its runs, for Options.Git,
// and returns it with a function reading the count.
func countingGit(t testing.TB) (bin string, count func() int) {
	t.Helper()
	dir := t.TempDir()
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "runs")
	bin = filepath.Join(dir, "git")
	script := "#!/bin/sh\necho x >> '" + log + "'\nexec '" + real + "' \"$@\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, func() int {
		data, err := os.ReadFile(log)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return strings.Count(string(data), "\n")
	}
}
