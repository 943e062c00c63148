// Command dashboard measures the dashboards against a real swarmd with N
// agents whose sessions sleep (an idle swarm):
//
//   - GET /api/agents: p50 and p99 of sequential requests, and its size;
//   - the daemon's CPU over a quiet window with no dashboard open, then
//     with D open (headless Chromium tabs on the page, or with -sse plain
//     Server-Sent Events clients);
//   - event -> DOM latency: agents are stopped and started through the
//     API while one page is open, and the page records, for every event
//     that reaches its feed live, the time from the event (its "at") to the
//     DOM update; p50, p99 and max.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/swarmd/swarmd/bench/internal/harness"
)

const token = "bench-token-0123456789abcdef"

func main() {
	bin := flag.String("bin", "bin/swarmd", "swarmd binary")
	agents := flag.Int("agents", 200, "agents (sessions sleep)")
	dashboards := flag.Int("dashboards", 5, "dashboards open during the second window")
	window := flag.Duration("window", 20*time.Second, "each CPU window")
	requests := flag.Int("requests", 300, "GET /api/agents requests")
	cycles := flag.Int("cycles", 50, "stop/start cycles for the latency")
	sse := flag.Bool("sse", false, "dashboards are plain SSE clients, not Chromium tabs")
	chromium := flag.String("chromium", "chromium", "the browser")
	flag.Parse()
	if err := run(*bin, *chromium, *agents, *dashboards, *requests, *cycles, *window, *sse); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func run(bin, chromium string, n, dashboards, requests, cycles int, window time.Duration, sse bool) error {
	work, err := harness.Repo("swarmd-dash")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	addr, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	config, err := writeConfig(work, addr, n)
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(work, "log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "--config", config, "--log-format", "json")
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	base := "http://" + addr
	if err := waitRunning(base, n, 2*time.Minute); err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // startup garbage settles

	p50, p99, size, err := agentsLatency(base, requests)
	if err != nil {
		return err
	}
	fmt.Printf("GET /api/agents, %d agents: p50 %v, p99 %v, %d bytes (%d requests)\n", n, p50.Round(10*time.Microsecond),
		p99.Round(10*time.Microsecond), size, requests)

	idle, err := cpu(cmd.Process.Pid, window)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kind := "Chromium tabs"
	var page context.Context
	if sse {
		kind = "SSE clients"
		for range dashboards {
			go sseClient(ctx, base)
		}
	} else {
		var closeTabs func()
		var load time.Duration
		page, closeTabs, load, err = openTabs(ctx, chromium, base, dashboards, fmt.Sprintf("a%d", n))
		if err != nil {
			return err
		}
		defer closeTabs()
		fmt.Printf("page load to every agent row shown, %d agents: %v (the first tab)\n", n, load.Round(time.Millisecond))
	}
	time.Sleep(3 * time.Second)
	open, err := cpu(cmd.Process.Pid, window)
	if err != nil {
		return err
	}
	fmt.Printf("daemon CPU over %v, %d idle agents: %.2f%% of a core with no dashboard, %.2f%% with %d %s open (+%.2f)\n",
		window, n, idle, open, dashboards, kind, open-idle)

	if page == nil {
		return nil
	}
	lat, err := domLatency(page, base, cycles)
	if err != nil {
		return err
	}
	fmt.Printf("event -> DOM, %d events (%d stop/start cycles): p50 %v, p99 %v, max %v\n", len(lat), cycles,
		harness.Percentile(lat, 0.5), harness.Percentile(lat, 0.99), harness.Percentile(lat, 1))
	return nil
}

// writeConfig writes a swarm of n agents whose sessions print a line and
// sleep, with the dashboard on addr and a token for the writes.
func writeConfig(work, addr string, n int) (string, error) {
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "listen: %q\nweb: {token: %q}\n", addr, token)
	cfg.WriteString("defaults: {backend: sleeper, session_timeout: 24h, grace_period: 2s}\n")
	cfg.WriteString("backends: {sleeper: {type: scripted, steps: [{print: [started], sleep: 24h}]}}\nagents:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&cfg, "  - {name: a%d, role: idle}\n", i)
	}
	config := filepath.Join(work, "swarmd.yaml")
	return config, os.WriteFile(config, []byte(cfg.String()), 0o644)
}

// waitRunning polls /api/agents until n agents are Running.
func waitRunning(base string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/api/agents")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Count(string(body), `"state":"Running"`) == n {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not every agent Running within %v", limit)
}

func agentsLatency(base string, n int) (p50, p99 time.Duration, size int64, err error) {
	client := &http.Client{}
	ds := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		resp, err := client.Get(base + "/api/agents")
		if err != nil {
			return 0, 0, 0, err
		}
		size, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ds = append(ds, time.Since(t0))
	}
	return harness.Percentile(ds, 0.5), harness.Percentile(ds, 0.99), size, nil
}

// cpu is the process's CPU use over window, in percent of one core.
func cpu(pid int, window time.Duration) (float64, error) {
	ticks := func() (float64, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseFloat(f[11], 64)
		s, _ := strconv.ParseFloat(f[12], 64)
		return u + s, nil
	}
	c0, err := ticks()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	time.Sleep(window)
	c1, err := ticks()
	if err != nil {
		return 0, err
	}
	const hz = 100 // USER_HZ on Linux
	return 100 * (c1 - c0) / hz / time.Since(t0).Seconds(), nil
}

// sseClient reads the event stream until ctx ends, as a browser would.
func sseClient(ctx context.Context, base string) {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/events?tail=200", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
	}
}

// openTabs starts Chromium with d tabs on the page, each waiting for the
// last agent's row; it returns the first tab, what ends the browser, and
// how long the first tab took from navigating to showing every row.
func openTabs(ctx context.Context, chromium, base string, d int, last string) (context.Context, func(), time.Duration, error) {
	profile, err := os.MkdirTemp("", "swarmd-dash-chromium")
	if err != nil {
		return nil, nil, 0, err
	}
	alloc, cancel := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.UserDataDir(profile),
		// Its singleton socket's directory, which a killed Chromium leaves in TMPDIR.
		chromedp.Env("TMPDIR="+profile),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true), chromedp.Flag("disable-renderer-backgrounding", true))
	first, _ := chromedp.NewContext(alloc)
	end := func() { cancel(); os.RemoveAll(profile) }
	if err := chromedp.Do(first); err != nil { // the browser, before its other tabs
		end()
		return nil, nil, 0, fmt.Errorf("start %s: %w", chromium, err)
	}
	tabs := []context.Context{first}
	for len(tabs) < d {
		tab, _ := chromedp.NewContext(first)
		tabs = append(tabs, tab)
	}
	var load time.Duration
	for i, tab := range tabs {
		t0 := time.Now()
		if err := chromedp.Do(tab, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-agent="`+last+`"]`))); err != nil {
			end()
			return nil, nil, 0, fmt.Errorf("open the page: %w", err)
		}
		if i == 0 {
			load = time.Since(t0)
		}
	}
	return first, end, load, nil
}

// domLatency stops and starts agents through the API and reads what the
// page measured for the events that reached it live.
func domLatency(page context.Context, base string, cycles int) ([]time.Duration, error) {
	if err := chromedp.Do(page, chromedp.Evaluate[chromedp.Void](`window.swarmdStats.eventLatencyMs.length = 0`)); err != nil {
		return nil, err
	}
	post := func(p string) error {
		req, _ := http.NewRequest("POST", base+p, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST %s: %s", p, resp.Status)
		}
		return nil
	}
	for i := range cycles {
		name := fmt.Sprintf("a%d", i+1)
		if err := post("/api/agents/" + name + "/stop"); err != nil {
			return nil, err
		}
		if _, err := chromedp.Run(page, chromedp.Poll[bool](fmt.Sprintf(
			`document.querySelector('tr[data-agent="%s"]').dataset.state === 'Stopped'`, name),
			chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			return nil, fmt.Errorf("%s never showed Stopped: %w", name, err)
		}
		if err := post("/api/agents/" + name + "/start"); err != nil {
			return nil, err
		}
	}
	time.Sleep(2 * time.Second) // the last starts' events arrive
	ms, err := chromedp.Run(page, chromedp.Evaluate[[]float64](`window.swarmdStats.eventLatencyMs`))
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m * float64(time.Millisecond))
	}
	return out, nil
}
