// Command taskwake measures how fast an idle swarm picks up new work through
// a real swarmd: N agents whose sessions say DONE at once go idle; then M
// tasks are added one at a time from another process's connection, and for
// each the time from the task's commit to the session that works on it
// starting (the agent's SessionStarted, as the event log records it).
// Prints p50, p99 and max.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

func main() {
	bin := flag.String("bin", "bin/swarmd", "swarmd binary")
	agents := flag.Int("agents", 50, "idle agents")
	tasks := flag.Int("tasks", 100, "tasks, added one at a time")
	flag.Parse()
	if err := run(*bin, *agents, *tasks); err != nil {
		fmt.Fprintln(os.Stderr, "taskwake:", err)
		os.Exit(1)
	}
}

func run(bin string, n, m int) error {
	work, err := harness.Repo("swarmd-taskwake")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	config, _, err := harness.Swarm(work, "defaults: {backend: s, min_session_interval: 0s}\nbackends: {s: {type: scripted, steps: [{print: [DONE]}]}}\n", n)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "run", "--config", config, "--log-format", "json")
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	ctx := context.Background()
	dbPath := filepath.Join(work, ".swarm", "swarm.db")
	var db *store.DB
	for deadline := time.Now().Add(30 * time.Second); ; {
		if db, err = store.Open(ctx, dbPath, store.Options{NoCreate: true}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer db.Close()
	if err := waitIdle(ctx, db, n); err != nil {
		return err
	}
	b := taskboard.New(db, taskboard.Options{AutoClose: true})
	var lat []time.Duration
	for i := range m {
		t, err := b.Add(ctx, taskboard.NewTask{Title: fmt.Sprint("task ", i)})
		if err != nil {
			return err
		}
		started, err := waitStarted(ctx, db, t.ID)
		if err != nil {
			return err
		}
		lat = append(lat, started.Sub(t.CreatedAt))
		if err := waitIdle(ctx, db, n); err != nil {
			return err
		}
	}
	p := func(q float64) time.Duration { return harness.Percentile(lat, q) }
	fmt.Printf("task added -> its session started, %d idle agents, %d tasks: p50 %v  p99 %v  max %v\n",
		n, m, p(0.50).Round(10*time.Microsecond), p(0.99).Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
	return nil
}

// waitIdle waits until every agent's latest event says Idle.
func waitIdle(ctx context.Context, db *store.DB, n int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var idle int
		err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT agent, event FROM events e
			WHERE task_id IS NULL AND id = (SELECT MAX(id) FROM events WHERE agent = e.agent AND task_id IS NULL))
			WHERE event = 'Idle'`).Scan(&idle)
		if err != nil {
			return err
		}
		if idle == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d agents idle after 60 s", idle, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStarted is when the session that claimed task id started.
func waitStarted(ctx context.Context, db *store.DB, id int64) (time.Time, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var at string
		err := db.ReadSQL().QueryRowContext(ctx, `SELECT s.started_at FROM tasks t JOIN sessions s ON s.session_id = t.claim_session
			WHERE t.id = ?`, id).Scan(&at)
		if err == nil {
			return time.Parse("2006-01-02T15:04:05.000000Z", at)
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("task %d: no session started in 30 s", id)
		}
		time.Sleep(time.Millisecond)
	}
}
