// Command interrupt measures urgent-mail latency through a real swarmd: N
// agents Running (sessions that sleep), M urgent messages sent one at a time
// from another process's connection, and for each the time from its commit
// to the cancel signal the daemon sent (the daemon logs it with every
// UrgentMessage transition). Prints p50, p99 and max.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
)

func main() {
	bin := flag.String("bin", "bin/swarmd", "swarmd binary")
	agents := flag.Int("agents", 50, "agents")
	msgs := flag.Int("messages", 200, "urgent messages")
	gap := flag.Duration("gap", 25*time.Millisecond, "pause between messages")
	flag.Parse()
	if err := run(*bin, *agents, *msgs, *gap); err != nil {
		fmt.Fprintln(os.Stderr, "interrupt:", err)
		os.Exit(1)
	}
}

func run(bin string, n, m int, gap time.Duration) error {
	work, err := harness.Repo("swarmd-interrupt")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// Sessions exit on the cancel signal at once, so every agent is soon
	// Running again for the next message.
	config, names, err := harness.Swarm(work, "defaults: {backend: s, session_timeout: 24h}\nbackends: {s: {type: scripted, steps: [{sleep: 24h}]}}\n", n)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "run", "--config", config, "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()

	running := make(map[string]bool)
	latencies := make(chan time.Duration, m)
	allRunning := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var l struct {
				Msg, Agent, To, Event string
				Latency               float64 `json:"interrupt_latency"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "transition" {
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
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("agents not Running after 5 minutes")
	}
	db, err := mailbox.Open(context.Background(), filepath.Join(work, ".swarm", "swarm.db"), store.Options{NoCreate: true}, mailbox.Options{Agents: names})
	if err != nil {
		return err
	}
	defer db.Close()
	var got []time.Duration
	for i := 0; i < m; i++ {
		to := names[i%n]
		if _, err := db.Send(context.Background(), mailbox.Draft{From: "operator", To: to, Subject: "stop", Body: "urgent " + fmt.Sprint(i), Urgent: true}); err != nil {
			return err
		}
		select {
		case d := <-latencies:
			got = append(got, d)
		case <-time.After(10 * time.Second):
			return fmt.Errorf("message %d to %s: no interrupt within 10s", i, to)
		}
		time.Sleep(gap)
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	pct := func(p float64) time.Duration { return got[int(p*float64(len(got)-1))] }
	fmt.Printf("agents=%d messages=%d  commit->cancel p50=%v p99=%v max=%v\n", n, len(got),
		pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), got[len(got)-1].Round(time.Microsecond))
	return nil
}
