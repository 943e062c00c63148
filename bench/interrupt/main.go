// Command interrupt measures urgent-mail latency through a real swarmd: N
// agents Running (sessions that sleep), M urgent messages sent one at a time
// from another process's connection, and for each the time from its commit
// to the cancel signal the daemon sent (the daemon logs it with every
// UrgentMessage transition). Prints p50, p99 and max.
//
// With -engine postgres (or both) the daemon's store is a PostgreSQL
// database of a pgtest server this program starts and stops; -store runs
// against a given postgres:// URL instead. The benchmark process is then
// another daemon writing to the shared store, and the daemon under test
// learns of the mail by LISTEN/NOTIFY, not by watching a file.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

func main() {
	bin := flag.String("bin", "bin/swarmd", "swarmd binary")
	agents := flag.Int("agents", 50, "agents")
	msgs := flag.Int("messages", 200, "urgent messages")
	gap := flag.Duration("gap", 25*time.Millisecond, "pause between messages")
	engine := flag.String("engine", "sqlite", "sqlite, postgres (a pgtest server started here) or both (alternated, -rounds each)")
	url := flag.String("store", "", "a postgres:// URL of an empty database to use instead of -engine")
	rounds := flag.Int("rounds", 1, "daemons started per engine")
	flag.Parse()
	// An interrupt ends the run through its cleanup: the daemon stopped,
	// the PostgreSQL server too.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *bin, *engine, *url, *rounds, *agents, *msgs, *gap)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "interrupt:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, engine, url string, rounds, n, m int, gap time.Duration) (err error) {
	if url != "" {
		got, sends, err := measure(ctx, bin, url, n, m, gap)
		if err != nil {
			return err
		}
		report("store", n, got, sends)
		return nil
	}
	var engines []string
	switch engine {
	case "sqlite", "postgres":
		engines = []string{engine}
	case "both":
		engines = []string{"sqlite", "postgres"}
	default:
		return fmt.Errorf("-engine %q: want sqlite, postgres or both", engine)
	}
	var srv *pgtest.Server
	if engine != "sqlite" {
		if srv, err = pgtest.Start(); err != nil {
			return fmt.Errorf("start PostgreSQL: %w", err)
		}
		defer func() {
			if cerr := srv.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("stop PostgreSQL: %w", cerr)
			}
		}()
	}
	p50s, p99s := map[string][]time.Duration{}, map[string][]time.Duration{}
	for r := range rounds {
		for i := range engines {
			// Alternate the order, so neither engine always runs on the
			// machine the other has just warmed.
			e := engines[(i+r)%len(engines)]
			target := "" // the daemon's own swarm.db
			if e == "postgres" {
				name := "interrupt" + strconv.Itoa(r)
				if err := srv.CreateDB(name); err != nil {
					return fmt.Errorf("create database: %w", err)
				}
				target = srv.URL(name)
			}
			got, sends, err := measure(ctx, bin, target, n, m, gap)
			if err != nil {
				return fmt.Errorf("%s: %w", e, err)
			}
			p50, p99 := report(e, n, got, sends)
			p50s[e] = append(p50s[e], p50)
			p99s[e] = append(p99s[e], p99)
		}
	}
	if len(engines) == 2 {
		// Each engine's median over the rounds, and their ratio.
		med := func(ds []time.Duration) time.Duration { return harness.Percentile(ds, 0.5) }
		sq50, pg50, sq99, pg99 := med(p50s["sqlite"]), med(p50s["postgres"]), med(p99s["sqlite"]), med(p99s["postgres"])
		fmt.Printf("medians over %d rounds: sqlite p50=%v p99=%v; postgres p50=%v p99=%v; PG/SQLite p50 %.2fx p99 %.2fx\n",
			rounds, sq50, sq99, pg50, pg99, float64(pg50)/float64(sq50), float64(pg99)/float64(sq99))
	}
	return nil
}

// report prints the percentiles of got, of sends and of their difference,
// and returns got's p50 and p99. The message's created_at is taken before
// its transaction, which may wait for the store's writer lock: the Send
// call is the commit's share of the latency, the rest is the daemon's.
func report(engine string, n int, got, sends []time.Duration) (p50, p99 time.Duration) {
	after := make([]time.Duration, len(got)) // from Send's return to the cancel
	for i := range got {
		after[i] = got[i] - sends[i]
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[int(p*float64(len(ds)-1))].Round(time.Microsecond)
	}
	p50, p99 = pct(got, 0.50), pct(got, 0.99)
	fmt.Printf("%-8s agents=%d messages=%d  commit->cancel p50=%v p99=%v max=%v  (in the Send call p50=%v p99=%v; after it p50=%v p99=%v)\n",
		engine, n, len(got), p50, p99, pct(got, 1), pct(sends, 0.5), pct(sends, 0.99), pct(after, 0.5), pct(after, 0.99))
	return p50, p99
}

// measure runs a daemon with n agents on target ("" for its own SQLite
// file, else a store URL) and returns the commit->cancel latency of m urgent
// messages sent from this process, and how long each Send call took.
func measure(ctx context.Context, bin, target string, n, m int, gap time.Duration) (got, sends []time.Duration, err error) {
	work, err := harness.Repo("swarmd-interrupt")
	if err != nil {
		return nil, nil, fmt.Errorf("make the repository: %w", err)
	}
	defer os.RemoveAll(work)
	// Sessions exit on the cancel signal at once, so every agent is soon
	// Running again for the next message.
	head := "defaults: {backend: s, session_timeout: 24h}\nbackends: {s: {type: scripted, steps: [{sleep: 24h}]}}\n"
	if target != "" {
		head += "store: " + strconv.Quote(target) + "\n"
	}
	config, names, err := harness.Swarm(work, head, n)
	if err != nil {
		return nil, nil, fmt.Errorf("write the config: %w", err)
	}
	cmd := exec.Command(bin, "run", "--config", config, "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("daemon's stderr: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start the daemon: %w", err)
	}
	defer stop(cmd)

	running := make(map[string]bool)
	latencies := make(chan time.Duration, m)
	allRunning := make(chan struct{})
	exited := make(chan struct{})
	last := make(chan string, 1) // the daemon's last line that was no transition
	go func() {
		defer close(exited)
		lastLine := ""
		defer func() { last <- lastLine }()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var l struct {
				Msg, Agent, To, Event string
				Latency               float64 `json:"interrupt_latency"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "transition" {
				lastLine = sc.Text()
				continue
			}
			if l.To == "Running" && !running[l.Agent] {
				running[l.Agent] = true
				if len(running) == n {
					close(allRunning)
				}
			}
			if l.Event == "UrgentMessage" {
				latencies <- time.Duration(l.Latency * float64(time.Second))
			}
		}
	}()
	select {
	case <-allRunning:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("waiting for agents Running: %w", ctx.Err())
	case <-exited:
		return nil, nil, fmt.Errorf("daemon exited before all agents were Running; its last words: %s", <-last)
	case <-time.After(5 * time.Minute):
		return nil, nil, fmt.Errorf("agents not Running after 5 minutes")
	}
	if target == "" {
		target = filepath.Join(work, ".swarm", "swarm.db")
	}
	db, err := mailbox.Open(ctx, target, store.Options{NoCreate: true}, mailbox.Options{Agents: names})
	if err != nil {
		return nil, nil, fmt.Errorf("open the store: %w", err)
	}
	defer db.Close()
	for i := 0; i < m; i++ {
		to := names[i%n]
		t0 := time.Now()
		if _, err := db.Send(ctx, mailbox.Draft{From: "operator", To: to, Subject: "stop", Body: "urgent " + fmt.Sprint(i), Urgent: true}); err != nil {
			return nil, nil, fmt.Errorf("send message %d: %w", i, err)
		}
		sends = append(sends, time.Since(t0))
		select {
		case d := <-latencies:
			got = append(got, d)
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("waiting for message %d's interrupt: %w", i, ctx.Err())
		case <-time.After(10 * time.Second):
			return nil, nil, fmt.Errorf("message %d to %s: no interrupt within 10s", i, to)
		}
		time.Sleep(gap)
	}
	return got, sends, nil
}

// stop ends the daemon: SIGTERM, and SIGKILL if it has not exited within
// 30 s, so that a hung daemon is not left behind.
func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "interrupt: the daemon ignored SIGTERM for 30s; killing it")
		_ = cmd.Process.Kill()
		<-done
	}
}
