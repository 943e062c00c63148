// Command scale runs a large swarm through a real swarmd: N agents on the
// scripted backend whose sessions sleep, then reports the time until all are
// Running, the daemon's RSS (anonymous and file pages), threads and idle CPU, the commit -> cancel
// latency of urgent mail sent to M of them, SIGTERM -> exit, and how many
// processes of the swarm are left afterwards (must be 0).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
)

func main() {
	bin := flag.String("bin", "bin/swarmd", "swarmd binary")
	agents := flag.Int("agents", 1000, "agents")
	urgent := flag.Int("urgent", 100, "agents sent urgent mail")
	window := flag.Duration("window", 10*time.Second, "idle CPU window")
	flag.Parse()
	if err := run(*bin, *agents, *urgent, *window); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(bin string, n, m int, window time.Duration) error {
	work, err := harness.Repo("swarmd-scale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	config, names, err := harness.Swarm(work, "defaults: {backend: s, session_timeout: 24h}\nbackends: {s: {type: scripted, steps: [{sleep: 24h}]}}\n", n)
	if err != nil {
		return err
	}
	start := time.Now()
	cmd := exec.Command(bin, "run", "--config", config, "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid

	allRunning := make(chan struct{})
	latencies := make(chan time.Duration, m)
	go readLog(stderr, n, allRunning, latencies)
	select {
	case <-allRunning:
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("agents not Running after 10 minutes")
	}
	ramp := time.Since(start)
	time.Sleep(2 * time.Second) // startup garbage settles
	cpu0 := cpuTicks(pid)
	time.Sleep(window)
	cpu1 := cpuTicks(pid)
	rss, threads := status(pid, "VmRSS"), status(pid, "Threads")
	anon, file := status(pid, "RssAnon"), status(pid, "RssFile")

	db, err := mailbox.Open(context.Background(), filepath.Join(work, ".swarm", "swarm.db"), store.Options{NoCreate: true}, mailbox.Options{Agents: names})
	if err != nil {
		return err
	}
	defer db.Close()
	var lat []time.Duration
	for i := range m {
		if _, err := db.Send(context.Background(), mailbox.Draft{From: "operator", To: names[i*n/m], Subject: "stop", Body: "urgent", Urgent: true}); err != nil {
			return err
		}
		select {
		case d := <-latencies:
			lat = append(lat, d)
		case <-time.After(10 * time.Second):
			return fmt.Errorf("message %d: no interrupt within 10 s", i)
		}
		time.Sleep(20 * time.Millisecond)
	}

	t0 := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	_ = cmd.Wait()
	exit := time.Since(t0)
	left := harness.Survivors(work)
	fmt.Printf("agents=%d  start->all Running=%.1fs  RSS=%d MB (anon %d, file %d)  threads=%d  idle CPU=%.3f%% of a core over %v\n",
		n, ramp.Seconds(), rss/1024, anon/1024, file/1024, threads, 100*float64(cpu1-cpu0)/100/window.Seconds(), window)
	fmt.Printf("urgent mail to %d agents: commit->cancel p50=%v p99=%v max=%v  SIGTERM->exit=%.2fs  survivors=%d\n",
		m, harness.Percentile(lat, 0.5).Round(10*time.Microsecond), harness.Percentile(lat, 0.99).Round(10*time.Microsecond),
		harness.Percentile(lat, 1).Round(10*time.Microsecond), exit.Seconds(), left)
	return nil
}

func readLog(r interface{ Read([]byte) (int, error) }, n int, allRunning chan struct{}, latencies chan time.Duration) {
	running := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
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
			select {
			case latencies <- time.Duration(l.Latency * float64(time.Second)):
			default:
			}
		}
	}
}

// cpuTicks is the process's user+system CPU in clock ticks (100 Hz here).
func cpuTicks(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

func status(pid int, key string) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}
