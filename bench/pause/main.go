// Command pause measures `swarmd pause --now` through a real swarmd: one
// agent whose session is a 50-process tree (a shell and 49 children, some
// in sessions of their own), paused and resumed N times over the control
// socket. For each pause it reports the time from the request to the reply
// (the daemon replies once the runner has frozen the tree) and to every
// process of the tree seen stopped (state T) in /proc by this harness.
// Prints p50, p99 and max of both.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
	"github.com/swarmd/swarmd/internal/control"
)

func main() {
	bin := flag.String("bin", "bin/swarmd", "swarmd binary")
	procs := flag.Int("procs", 50, "processes in the session's tree")
	n := flag.Int("n", 200, "pause/resume rounds")
	flag.Parse()
	if err := run(*bin, *procs, *n); err != nil {
		fmt.Fprintln(os.Stderr, "pause:", err)
		os.Exit(1)
	}
}

func run(bin string, procs, n int) error {
	work, err := harness.Repo("swarmd-pause")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// Half the children sleep in the leader's group, half in sessions of
	// their own (as agent CLIs' shell tools do).
	half := (procs - 1) / 2
	script := fmt.Sprintf(`for i in $(seq %d); do sleep 3600 & done; for i in $(seq %d); do setsid sleep 3600 </dev/null >/dev/null 2>&1 & done; wait`,
		procs-1-half, half)
	config, _, err := harness.Swarm(work, fmt.Sprintf("defaults: {backend: s, session_timeout: 24h}\nbackends: {s: {type: command, command: sh, args: [\"-c\", %q]}}\n", script), 1)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "run", "--config", config)
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	stateDir := filepath.Join(work, ".swarm")
	if err := waitFor(30*time.Second, func() bool { return len(treePids(stateDir)) == procs }); err != nil {
		return fmt.Errorf("the session's tree never had %d processes (has %d): %w", procs, len(treePids(stateDir)), err)
	}
	c := control.NewClient(filepath.Join(stateDir, "swarmd.sock"))
	ctx := context.Background()
	var replied, stopped []time.Duration
	for range n {
		pids := treePids(stateDir)
		t0 := time.Now()
		res, err := c.Pause(ctx, "a1", control.PauseRequest{Now: true})
		if err != nil {
			return err
		}
		replied = append(replied, time.Since(t0))
		if !res.Frozen || res.Processes != procs {
			return fmt.Errorf("pause: %+v, want %d processes frozen", res, procs)
		}
		if err := waitFor(10*time.Second, func() bool { return allStopped(pids) }); err != nil {
			return fmt.Errorf("not every process stopped: %w", err)
		}
		stopped = append(stopped, time.Since(t0))
		if _, err := c.Resume(ctx, "a1"); err != nil {
			return err
		}
		if err := waitFor(10*time.Second, func() bool { return noneStopped(pids) }); err != nil {
			return fmt.Errorf("not every process continued: %w", err)
		}
	}
	fmt.Printf("%d-process tree, %d rounds\n", procs, n)
	report("pause --now request to reply", replied)
	report("pause --now request to every process stopped", stopped)
	return nil
}

func report(what string, ds []time.Duration) {
	slices.Sort(ds)
	fmt.Printf("%-48s p50 %v  p99 %v  max %v\n", what, ds[len(ds)/2].Round(10*time.Microsecond),
		ds[len(ds)*99/100].Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond))
}

func waitFor(limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", limit)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return nil
}

// treePids lists the processes carrying a tree marker of stateDir.
func treePids(stateDir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	needle := []byte("SWARMD_TREE=" + stateDir)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, needle) {
			out = append(out, pid)
		}
	}
	return out
}

func state(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 'X'
	}
	i := strings.LastIndexByte(string(b), ')')
	return b[i+2]
}

func allStopped(pids []int) bool {
	for _, p := range pids {
		if state(p) != 'T' {
			return false
		}
	}
	return true
}

func noneStopped(pids []int) bool {
	for _, p := range pids {
		if state(p) == 'T' {
			return false
		}
	}
	return true
}
