package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/worktree"
)

// instantSession ends successfully the moment it starts: the benchmark
// measures the runner and its observers, not processes.
type instantSession struct{ done chan struct{} }

func (s instantSession) ID() string            { return "x" }
func (s instantSession) Pid() int              { return 1 }
func (s instantSession) Done() <-chan struct{} { return s.done }
func (s instantSession) Result() backend.Result {
	return backend.Result{Outcome: backend.OutcomeSuccess}
}
func (s instantSession) Cancel() error             { return nil }
func (s instantSession) ForceStop() error          { return nil }
func (s instantSession) LastOutput() (t time.Time) { return }

type instantBackend struct{ done chan struct{} }

func (b instantBackend) Start(context.Context, backend.Spec) (backend.Session, error) {
	return instantSession{b.done}, nil
}

type plainDir struct{ dir string }

func (p plainDir) Ensure(context.Context, string) (worktree.Worktree, error) {
	return worktree.Worktree{Path: p.dir}, nil
}
func (p plainDir) Verify(ctx context.Context, a string) (worktree.Worktree, error) {
	return p.Ensure(ctx, a)
}
func (p plainDir) Head(context.Context, string) (string, error) { return "", nil }
func (p plainDir) CommitsBetween(context.Context, string, string) (int, error) {
	return 0, nil
}
func (plainDir) ClearStaleLocks(context.Context, string) ([]string, error) { return nil, nil }

type tinyPrompter struct{}

func (tinyPrompter) Build(context.Context, runner.PromptRequest) (runner.Prompt, error) {
	return runner.Prompt{Text: "p"}, nil
}
func (tinyPrompter) Release(context.Context, runner.Unstarted, func(error)) error { return nil }
func (tinyPrompter) Settle(context.Context, runner.Settlement, func(error)) (runner.SettleResult, error) {
	return runner.SettleResult{}, nil
}
func (tinyPrompter) Started(context.Context, string, string, int64, func(error)) error { return nil }
func (tinyPrompter) Stopped(context.Context, string, string, bool, func(error)) error  { return nil }
func (tinyPrompter) Begin(context.Context, runner.SessionBegin, func(error)) (uint32, error) {
	return 0, nil
}
func (tinyPrompter) Transient(error) bool { return false }
func (tinyPrompter) Fenced(error) bool    { return false }

// BenchmarkTransitionsEventLog: transitions per second one runner sustains
// with every transition, agent row and session going to the event log in
// swarm.db, against no event log, in the same run.
func BenchmarkTransitionsEventLog(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("eventlog=%v", on), func(b *testing.B) {
			dir := b.TempDir()
			var obs runner.Observer
			var j *store.Journal
			if on {
				db, err := mailbox.Open(context.Background(), filepath.Join(dir, "swarm.db"), store.Options{}, mailbox.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				j = db.Store().NewJournal(store.JournalOptions{})
				j.Start()
				obs = journalObserver{j}
			}
			done := make(chan struct{})
			close(done)
			r, err := runner.New(runner.Config{
				Name: "bench", Backend: instantBackend{done}, Workspace: plainDir{dir}, Prompter: tinyPrompter{}, Settler: tinyPrompter{},
				Logs: logs.New(dir, 0, 0, nil), Observer: obs,
			})
			if err != nil {
				b.Fatal(err)
			}
			// One session is 5 transitions: PromptReady, SessionStarted,
			// SessionExited, WorktreeReady (IncrementSession) + the first.
			sessions := uint32(b.N/5 + 1)
			errc := make(chan error, 1)
			b.ResetTimer()
			go func() { errc <- r.Run(context.Background()) }()
			for {
				s, ch := r.Watch()
				if s.Seq >= sessions {
					break
				}
				<-ch
			}
			b.StopTimer()
			r.Stop("operator")
			<-errc
			if j != nil {
				if err := j.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
		})
	}
}

// BenchmarkStartupRecovery: what a restart does before any agent runs, with
// 200 agents and 10,000 past sessions (100 of them left open by a killed
// daemon) in swarm.db.
func BenchmarkStartupRecovery(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "swarm.db")
	ctx := context.Background()
	seed, err := mailbox.Open(ctx, path, store.Options{}, mailbox.Options{})
	if err != nil {
		b.Fatal(err)
	}
	agents := make([]config.Agent, 200)
	j := seed.Store().NewJournal(store.JournalOptions{})
	j.Start()
	now := time.Now()
	for i := range agents {
		agents[i] = config.Agent{Name: fmt.Sprintf("a%d", i)}
		for s := 1; s <= 50; s++ {
			rec := store.SessionRecord{SessionID: fmt.Sprintf("a%d-%d-x", i, s), Agent: agents[i].Name, Seq: uint32(s), Started: now}
			j.SessionStarted(rec)
			if s < 50 || i%2 == 0 {
				end := now.Add(time.Minute)
				rec.Ended, rec.Outcome = &end, store.OutcomeSuccess
				j.SessionEnded(rec)
			}
		}
		j.Agent(store.AgentRecord{Name: agents[i].Name, State: "Running", Seq: 50, TotalErrors: 3, UpdatedAt: now})
	}
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	seed.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db, err := mailbox.Open(ctx, path, store.Options{}, mailbox.Options{})
		if err != nil {
			b.Fatal(err)
		}
		board, err := OpenTaskBoard(ctx, db.Store(), nil)
		if err != nil {
			b.Fatal(err)
		}
		d := &Daemon{log: zap.NewNop(), db: db.Store(), mail: db, tasks: board}
		d.live.cfg = &config.Config{Agents: agents}
		d.journal = db.Store().NewJournal(store.JournalOptions{})
		d.journal.Start()
		b.StartTimer()
		if err := d.recover(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if len(d.run.recovered) != 200 || d.run.recovered["a1"].seq != 51 {
			b.Fatalf("recovered %d agents, a1 seq %d", len(d.run.recovered), d.run.recovered["a1"].seq)
		}
		d.journal.Close()
		db.Close()
		b.StartTimer()
	}
}
