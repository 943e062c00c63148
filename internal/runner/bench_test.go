package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/worktree"
)

// dirWorkspace is a plain directory: the turnover benchmark measures the
// runner and backend, not git.
type dirWorkspace struct{ dir string }

func (w dirWorkspace) Ensure(context.Context, string) (worktree.Worktree, error) {
	return worktree.Worktree{Path: w.dir, Branch: "swarm/bench/work"}, nil
}
func (w dirWorkspace) Verify(ctx context.Context, a string) (worktree.Worktree, error) {
	return w.Ensure(ctx, a)
}
func (w dirWorkspace) Head(context.Context, string) (string, error) { return "", nil }
func (w dirWorkspace) CommitsBetween(context.Context, string, string) (int, error) {
	return 0, nil
}
func (dirWorkspace) ClearStaleLocks(context.Context, string) ([]string, error) { return nil, nil }

type staticPrompter struct{}

func (staticPrompter) Build(_ context.Context, req PromptRequest) (Prompt, error) {
	return Prompt{Text: "You are " + req.Agent + ". Session " + req.SessionID + "\n" + strings.Repeat("context\n", 128)}, nil
}
func (staticPrompter) Release(context.Context, Unstarted, func(error)) error { return nil }
func (staticPrompter) Settle(context.Context, Settlement, func(error)) (SettleResult, error) {
	return SettleResult{}, nil
}
func (staticPrompter) Started(context.Context, string, string, int64, func(error)) error { return nil }
func (staticPrompter) Stopped(context.Context, string, string, bool, func(error)) error  { return nil }
func (staticPrompter) Begin(context.Context, SessionBegin, func(error)) (uint32, error) {
	return 0, nil
}
func (staticPrompter) Transient(error) bool { return false }
func (staticPrompter) Fenced(error) bool    { return false }

// BenchmarkSessionTurnover: sessions of a backend that exits 0 at once, run
// one after another through the runner (prompt stored, log written, process
// tree ended and reaped, state machine driven). Compare with
// BenchmarkForkExecWaitBaseline in the same run.
func BenchmarkSessionTurnover(b *testing.B) {
	sup, err := newBenchSupervisor(b)
	if err != nil {
		b.Fatal(err)
	}
	defer sup.Close()
	be, err := backend.NewCommand(sup, backend.CommandConfig{Command: "/bin/true"})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	r, err := New(Config{
		Name: "bench", Backend: be, Workspace: dirWorkspace{dir}, Prompter: staticPrompter{}, Settler: staticPrompter{},
		Logs: logs.New(dir, 0, 0, nil),
	})
	if err != nil {
		b.Fatal(err)
	}
	errc := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { errc <- r.Run(context.Background()) }()
	target := uint32(b.N + 1)
	for {
		s, ch := r.Watch()
		if s.Seq >= target {
			break
		}
		<-ch
	}
	elapsed := time.Since(start)
	b.StopTimer()
	r.Stop("operator")
	<-errc
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/session")
}

// BenchmarkForkExecWaitBaseline: the same binary with the same stdin and
// log-file wiring, started and waited for in a plain loop.
func BenchmarkForkExecWaitBaseline(b *testing.B) {
	dir := b.TempDir()
	prompt := "You are bench.\n" + strings.Repeat("context\n", 128)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := os.OpenFile(filepath.Join(dir, "x.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("/bin/true")
		cmd.Stdin = strings.NewReader(prompt)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/session")
}

// BenchmarkForkExecWaitNewFiles: the baseline plus what every session
// runner must do per session, on the same filesystem: write the prompt to a
// new file and the output to a new log file. On disks where creating a file
// is expensive this, not swarmd, sets the floor.
func BenchmarkForkExecWaitNewFiles(b *testing.B) {
	dir := b.TempDir()
	prompt := "You are bench.\n" + strings.Repeat("context\n", 128)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)+".prompt.md"), []byte(prompt), 0o640); err != nil {
			b.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(i)+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("/bin/true")
		cmd.Stdin = strings.NewReader(prompt)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/session")
}
