// Command restart times a start of swarmd over existing branches with a
// deleted state dir (issue 31): N agents on the scripted backend whose
// sessions sleep run once, until all are Running, and are stopped; then the
// state dir (.swarm: the database and the worktree directories) is deleted,
// which leaves every agent's branch and its registration under
// .git/worktrees, and each build in turn is timed from `swarmd run` to all
// N Running, stopped, and the state dir deleted again. The builds alternate
// (old, new, old, new, ...) on the same repository, so load from other
// processes falls on both alike.
//
//	go run ./bench/restart -old /tmp/base/bin/swarmd -new bin/swarmd -agents 250,500,1000 -rounds 3
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
)

func main() {
	oldBin := flag.String("old", "", "the build before (optional)")
	newBin := flag.String("new", "bin/swarmd", "the build after")
	agents := flag.String("agents", "250,500,1000", "comma-separated agent counts")
	rounds := flag.Int("rounds", 3, "timed starts per build and count")
	flag.Parse()
	bins := []string{*newBin}
	if *oldBin != "" {
		bins = []string{*oldBin, *newBin}
	}
	for _, s := range strings.Split(*agents, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "restart: -agents:", err)
			os.Exit(2)
		}
		if err := run(bins, n, *rounds); err != nil {
			fmt.Fprintln(os.Stderr, "restart:", err)
			os.Exit(1)
		}
	}
}

func run(bins []string, n, rounds int) error {
	work, err := harness.Repo("swarmd-restart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	config, _, err := harness.Swarm(work, "defaults: {backend: s, session_timeout: 24h}\nbackends: {s: {type: scripted, steps: [{sleep: 24h}]}}\n", n)
	if err != nil {
		return err
	}
	// The first start creates the branches and registrations; untimed.
	if _, err := start(bins[len(bins)-1], work, config, n); err != nil {
		return fmt.Errorf("first start: %w", err)
	}
	walls := make([][]time.Duration, len(bins))
	cpus := make([][]time.Duration, len(bins))
	for range rounds {
		for i, bin := range bins {
			r, err := start(bin, work, config, n)
			if err != nil {
				return fmt.Errorf("%s: %w", bin, err)
			}
			walls[i] = append(walls[i], r.wall)
			cpus[i] = append(cpus[i], r.cpu)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	for i, bin := range bins {
		w, c := median(walls[i]), median(cpus[i])
		line := fmt.Sprintf("agents=%d  %s  start->all Running median=%.2fs (%.2f ms/agent; runs %s)  CPU median=%.2fs",
			n, bin, w.Seconds(), w.Seconds()*1000/float64(n), secs(walls[i]), c.Seconds())
		if i > 0 {
			line += fmt.Sprintf("  new/old=%.2f", w.Seconds()/median(walls[0]).Seconds())
		}
		fmt.Println(line)
	}
	fmt.Printf("load average at the end: %s\n", strings.Join(strings.Fields(string(load))[:3], " "))
	return nil
}

type result struct {
	wall time.Duration // swarmd run -> every agent Running
	cpu  time.Duration // the daemon's user+system CPU by then
}

// start runs swarmd until all n agents are Running, stops it with SIGTERM
// and deletes the state dir.
func start(bin, work, config string, n int) (result, error) {
	t0 := time.Now()
	cmd := exec.Command(bin, "run", "--config", config, "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	all := make(chan struct{})
	go waitRunning(stderr, n, all)
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return result{}, fmt.Errorf("agents not Running after 5 minutes")
	}
	r := result{wall: time.Since(t0), cpu: cpuTime(cmd.Process.Pid)}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return result{}, err
	}
	_ = cmd.Wait()
	if left := harness.Survivors(work); left != 0 {
		return result{}, fmt.Errorf("%d processes left after SIGTERM", left)
	}
	return r, os.RemoveAll(filepath.Join(work, ".swarm"))
}

// waitRunning closes all when n distinct agents have logged a transition to
// Running, and then drains r so that the daemon never blocks on its stderr.
func waitRunning(r io.Reader, n int, all chan struct{}) {
	running := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct{ Msg, Agent, To string }
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "transition" || l.To != "Running" || running[l.Agent] {
			continue
		}
		if running[l.Agent] = true; len(running) == n {
			close(all)
		}
	}
}

// cpuTime is the process's user+system CPU.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / 100 // clock ticks at 100 Hz
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func secs(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.2f", d.Seconds())
	}
	return strings.Join(parts, " ")
}
