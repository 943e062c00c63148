package merge

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/store"
)

// BenchmarkMergeOverhead measures the queue's cost per merge against the
// bare git commands it is built on, on a 5,000-file repository. Each
// iteration the worker commits a change to one file (not timed); then,
// interleaved so that load from other processes hits both alike:
//
//   - queue: Enqueue and Step, which merges the commit into main (the
//     target checked out nowhere): state in swarm.db, events, the target's
//     checkout check, merge-tree, commit-tree, update-ref;
//   - bare: git merge-tree --write-tree, git commit-tree, git update-ref on
//     a second target branch that receives the same merges, its tip carried
//     over from the previous iteration (no ref read).
//
// The gate is excluded (the queue has none here; see gate=true for the
// cost of preparing the integration worktree and starting a gate tree).
// Reported: queue-ms/op, step-ms/op (Step alone), bare-ms/op, and the
// ratios; the requirement is queue ≤ 1.2× bare. A first merge, untimed,
// goes before them: first-ms is its Step, which with a gate creates the
// integration worktree.
//
//	go test -run '^$' -bench MergeOverhead -benchtime 100x ./internal/merge/
func BenchmarkMergeOverhead(b *testing.B) {
	for _, gate := range []bool{false, true} {
		b.Run(fmt.Sprintf("gate=%v", gate), func(b *testing.B) { benchMerge(b, gate) })
	}
}

func benchMerge(b *testing.B, gate bool) {
	ctx := context.Background()
	repo := bigRepo(b, 5000)
	gitT(b, repo, "branch", "bare", "main")
	worker := filepath.Join(b.TempDir(), "alice")
	gitT(b, repo, "worktree", "add", "-q", "-b", "swarm/alice/work", worker, "main")
	stateDir := filepath.Join(b.TempDir(), "state")
	db, err := store.Open(ctx, filepath.Join(b.TempDir(), "swarm.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	sup, err := proc.NewSupervisor(stateDir, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer sup.Close()
	opts := Options{Repo: repo, StateDir: stateDir, Into: "main", DB: db, Procs: sup, Logs: logs.New(stateDir, 0, 0, nil)}
	if gate {
		opts.Gate = []string{"true"}
	}
	q, err := Open(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	r := q.repo
	var queueT, stepT, bareT time.Duration
	bareTip := gitT(b, repo, "rev-parse", "bare")
	change := func(i int) string {
		file := fmt.Sprintf("pkg%03d/f%04d.go", (i*37)%50, (i*37)%50*100+i%100)
		writeFile(b, filepath.Join(worker, file), fmt.Sprintf("package pkg\n\nvar Changed%d = %d\n", i, i))
		gitT(b, worker, "commit", "-qam", fmt.Sprintf("change %d", i))
		return gitT(b, worker, "rev-parse", "HEAD")
	}
	// The first merge with a gate creates the integration worktree (a
	// checkout of every file, once per queue): reported apart as first-ms,
	// not spread over b.N merges.
	head := change(999) // any file; its content is unique
	t0 := time.Now()
	if _, err := q.Enqueue(ctx, 1, "alice", "swarm/alice/work", ""); err != nil {
		b.Fatal(err)
	}
	if out, err := q.Step(ctx); err != nil || out != OutcomeMerged {
		b.Fatalf("first Step = %s, %v", out, err)
	}
	first := time.Since(t0)
	bareTip = bareMerge(b, r, bareTip, head)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		head := change(i)
		b.StartTimer()

		t0 := time.Now()
		if _, err := q.Enqueue(ctx, int64(i+2), "alice", "swarm/alice/work", ""); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if out, err := q.Step(ctx); err != nil || out != OutcomeMerged {
			b.Fatalf("Step = %s, %v", out, err)
		}
		t2 := time.Now()
		bareTip = bareMerge(b, r, bareTip, head)
		t3 := time.Now()
		queueT, stepT, bareT = queueT+t2.Sub(t0), stepT+t2.Sub(t1), bareT+t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(queueT.Microseconds())/1000/n, "queue-ms/op")
	b.ReportMetric(float64(stepT.Microseconds())/1000/n, "step-ms/op")
	b.ReportMetric(float64(bareT.Microseconds())/1000/n, "bare-ms/op")
	b.ReportMetric(float64(queueT)/float64(bareT), "queue/bare")
	b.ReportMetric(float64(stepT)/float64(bareT), "step/bare")
	b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
}

// bareMerge is what a merge is without the queue: the three git commands,
// with the target's old tip known in advance (the baseline reads no ref).
// It returns the new tip.
func bareMerge(b *testing.B, r *repo, old, head string) string {
	tree := gitRun(b, r.commonDir, "merge-tree", "--write-tree", old, head)
	commit := gitRun(b, r.commonDir, "commit-tree", "-m", "merge", "-p", old, "-p", head, tree)
	gitRun(b, r.commonDir, "update-ref", "refs/heads/bare", commit, old)
	return commit
}

// gitRun runs git as the queue does (no extra LC_ALL copy of the
// environment per call), returning the first line of its output.
func gitRun(b *testing.B, dir string, args ...string) string {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return line
}

// bigRepo makes a repository whose one commit on main holds n files in
// directories of 100, written with one git fast-import; the main working
// tree is left detached and empty-handed (nothing checked out), as the
// queue only needs the object store.
func bigRepo(b *testing.B, n int) string {
	dir := b.TempDir()
	gitT(b, dir, "init", "-q", "-b", "main")
	var stream bytes.Buffer
	stream.WriteString("commit refs/heads/main\ncommitter Test <test@example.com> 1700000000 +0000\ndata 4\nbig\n")
	for i := range n {
		content := fmt.Sprintf("package pkg\n\n// file %d\nvar V%d = %d\n", i, i, i)
		fmt.Fprintf(&stream, "M 100644 inline pkg%03d/f%04d.go\ndata %d\n%s\n", i/100, i, len(content), content)
	}
	cmd := exec.Command("git", "-C", dir, "fast-import", "--quiet")
	cmd.Stdin = &stream
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("fast-import: %v: %s", err, out)
	}
	// An unborn-looking main worktree: HEAD detached at main, index empty.
	if err := os.WriteFile(filepath.Join(dir, ".git", "HEAD"), []byte(gitT(b, dir, "rev-parse", "main")+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}
