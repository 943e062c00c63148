package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
	"github.com/swarmd/swarmd/internal/view"
)

// browser is a headless Chromium of the test's own (a fresh profile),
// with every console error and exception of its pages recorded.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	console []string
}

// chromiumPath finds Debian's chromium, or skips loudly (fails under
// SWARMD_REQUIRE_CHROMIUM=1).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SWARMD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return needTool(t, "chromium", "SWARMD_REQUIRE_CHROMIUM")
}

func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	path := chromiumPath(t)
	profile := t.TempDir()
	// Chromium makes its singleton socket's directory in TMPDIR, and
	// leaves it when it is killed, as the test's end does.
	tmp := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.Env("TMPDIR=" + tmp),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(profile), chromedp.WindowSize(width, height),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true), chromedp.Flag("disable-default-apps", true),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b := &browser{ctx: ctx}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		wg.Wait()
		waitNoProcesses(t, profile)
	})
	if err := chromedp.Do(ctx); err != nil { // start it
		t.Fatalf("start %s: %v", path, err)
	}
	msgs := chromedp.Console(ctx)
	wg.Go(func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.console = append(b.console, fmt.Sprintf("%s:%d %s", m.URL, m.Line+1, m.Text))
				b.mu.Unlock()
			}
		}
	})
	return b
}

func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// eval runs JavaScript in the page and decodes its value.
func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// poll waits until js is truthy in the page (re-checked on every DOM
// change) and returns its value.
func poll[T any](t *testing.T, b *browser, what, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Poll[T](js, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, js, err)
	}
	return v
}

func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.console)
}

// waitNoProcesses: nothing started with the profile directory outlives the
// browser.
func waitNoProcesses(t *testing.T, profile string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && strings.Contains(string(cmd), profile) {
				left = append(left, e.Name())
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("browser processes left behind: %v", left)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWebInChromium loads the dashboard in a real headless Chromium against
// a real daemon: it lists the agents with no console error, shows a
// transition within a second of it happening, follows a log, shows no
// action without the token (and the API refuses writes), and with the
// token stops an agent.
func TestWebInChromium(t *testing.T) {
	b := newBrowser(t, 1400, 900)
	_, _, base := dashboardDaemon(t, dashToken, "alice", "bob", "carol")
	b.do(t, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-agent="carol"]`)))
	names := eval[[]string](t, b, `[...document.querySelectorAll('#agents tbody tr')].map(r => r.dataset.agent)`)
	if strings.Join(names, ",") != "alice,bob,carol" {
		t.Fatalf("rows %v", names)
	}
	poll[bool](t, b, "alice running", `document.querySelector('tr[data-agent="alice"]').dataset.visual === 'running'`)

	// Read-only without the token: no action anywhere, writes refused.
	if n := eval[int](t, b, `document.querySelectorAll('td.actions button, #new-mail:not([hidden]), #new-task:not([hidden])').length`); n != 0 {
		t.Fatalf("%d action buttons without the token", n)
	}
	if !eval[bool](t, b, `!document.getElementById('unlock').hidden && !document.body.classList.contains('unlocked')`) {
		t.Fatal("the unlock button is not offered")
	}
	for _, p := range []string{"/api/agents/bob/stop", "/api/mail", "/api/tasks"} {
		if resp, _ := httpDo(t, "POST", base+p, "", `{}`); resp.StatusCode != 401 {
			t.Fatalf("POST %s without the token: %s", p, resp.Status)
		}
	}

	// A transition shows within a second of the daemon making it.
	eval[chromedp.Void](t, b, `window.__seen = 0; new MutationObserver(() => {
		const r = document.querySelector('tr[data-agent="carol"]');
		if (!window.__seen && r.dataset.state === 'Stopped') window.__seen = Date.now();
	}).observe(document.querySelector('#agents tbody'), {subtree: true, attributes: true, attributeFilter: ['data-state']})`)
	if resp, _ := httpDo(t, "POST", base+"/api/agents/carol/stop", dashToken, ""); resp.StatusCode != 202 {
		t.Fatalf("stop carol: %s", resp.Status)
	}
	seen := poll[int64](t, b, "carol Stopped", `window.__seen`)
	var evs []view.Event
	_, data := httpDo(t, "GET", base+"/api/events?limit=1000", "", "")
	if err := json.Unmarshal(data, &evs); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(evs, func(e view.Event) bool { return e.Agent == "carol" && e.To == "Stopped" })
	if i < 0 {
		t.Fatalf("no Stopped event of carol in %s", data)
	}
	lag := time.Duration(seen-evs[i].At.UnixMilli()) * time.Millisecond
	t.Logf("carol's Stopped transition reached the page %v after it happened", lag)
	if lag > time.Second {
		t.Fatalf("the page showed the transition %v after it happened", lag)
	}
	if !eval[bool](t, b, `[...document.querySelectorAll('#events li')].some(li => li.textContent.includes('→ Stopped'))`) {
		t.Error("the event feed lacks carol's stop")
	}
	// A task waiting for approval needs a person: the inbox panel says so
	// with its fix, and empties once nothing does.
	if eval[bool](t, b, `!document.getElementById('inbox-panel').hidden`) {
		t.Fatalf("the inbox panel shows with nothing in it: %s", eval[string](t, b, `document.getElementById('inbox').innerText`))
	}
	if resp, body := httpDo(t, "POST", base+"/api/tasks", dashToken, `{"title": "split the parser", "plan": true}`); resp.StatusCode/100 != 2 {
		t.Fatalf("add a planned task: %s %s", resp.Status, body)
	}
	poll[bool](t, b, "the inbox panel", `!document.getElementById('inbox-panel').hidden &&
		[...document.querySelectorAll('#inbox li')].some(li => li.textContent.includes('waits for approval: split the parser') && li.textContent.includes('swarmd task approve'))`)

	// A daemon alone in its swarm lists no daemons. Several (a shared
	// store's, as the stream sends them) are listed, each with its
	// leases' state, their names shown as text.
	if eval[bool](t, b, `!document.getElementById('daemons-panel').hidden`) {
		t.Fatalf("the daemons panel shows for a daemon alone: %s", eval[string](t, b, `document.getElementById('daemons').innerText`))
	}
	eval[chromedp.Void](t, b, `renderDaemons([
		{name: 'host1:/srv/a/.swarm', agents: ['alice'], self: true, live_leases: 1, expired_leases: 0},
		{name: 'host2:<b>x</b>', agents: ['bob', 'zed'], live_leases: 0, expired_leases: 2}])`)
	panel := eval[string](t, b, `document.getElementById('daemons-panel').hidden ? 'hidden' : document.getElementById('daemons-panel').innerText`)
	for _, want := range []string{"host1:/srv/a/.swarm (this daemon)\t1 live\talice", "host2:<b>x</b>\t0 live, 2 expired\tbob, zed"} {
		if !strings.Contains(panel, want) {
			t.Errorf("the daemons panel lacks %q: %q", want, panel)
		}
	}
	if got := eval[string](t, b, `document.getElementById('daemon-count').textContent`); got != "(2, 1 with expired leases)" {
		t.Errorf("the daemons' count reads %q", got)
	}
	if !eval[bool](t, b, `document.querySelector('#daemons tr[data-daemon="host2:<b>x</b>"]').className === 'expired' && !document.querySelector('#daemons b')`) {
		t.Error("the daemon with expired leases is not marked expired, or its name was taken for HTML")
	}

	// A session is one line of the feed, its events inside it.
	if !eval[bool](t, b, `[...document.querySelectorAll('#events li.session > details > summary')].some(s => /alice#\d+: Running/.test(s.textContent))`) {
		t.Errorf("no feed line for alice's running session: %s", eval[string](t, b, `document.getElementById('events').innerText`))
	}

	// Clicking an agent follows its live log.
	b.do(t, chromedp.Click(chromedp.CSS(`tr[data-agent="alice"] td.name`)), chromedp.WaitVisible(chromedp.ID("log-panel")))
	poll[bool](t, b, "alice's log", `document.getElementById('log').textContent.includes('tick 2')`)
	n := eval[int](t, b, `Math.max(...[...document.getElementById('log').textContent.matchAll(/tick (\d+)/g)].map(m => +m[1]))`)
	poll[bool](t, b, "the log growing", fmt.Sprintf(`document.getElementById('log').textContent.includes('tick %d\n')`, n+2))

	// With the token (from the fragment, which never reaches the server),
	// the actions appear and stop works.
	b.do(t, chromedp.Navigate("about:blank"), chromedp.Navigate(base+"/#token="+dashToken),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-agent="bob"] button.act-stop`)))
	if loc := eval[string](t, b, `location.href`); strings.Contains(loc, "token") {
		t.Errorf("the token stayed in the address bar: %s", loc)
	}
	// Pause and resume from the page.
	b.do(t, chromedp.Click(chromedp.CSS(`tr[data-agent="alice"] button.act-pause`)))
	poll[bool](t, b, "alice paused", `document.querySelector('tr[data-agent="alice"]').dataset.visual === 'paused'`)
	b.do(t, chromedp.Click(chromedp.CSS(`tr[data-agent="alice"] button.act-resume`)))
	poll[bool](t, b, "alice resumed", `document.querySelector('tr[data-agent="alice"]').dataset.visual !== 'paused'`)
	b.do(t, chromedp.Click(chromedp.CSS(`tr[data-agent="bob"] button.act-stop`)))
	poll[bool](t, b, "bob Stopped", `document.querySelector('tr[data-agent="bob"]').dataset.state === 'Stopped'`)
	b.do(t, chromedp.WaitVisible(chromedp.CSS(`tr[data-agent="bob"] button.act-start`)))

	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// mergeDashboardDaemon starts a daemon with the dashboard on a free port, a
// merge queue into main with a gate, a worker alice whose every session
// commits feature.txt and says DONE, and her reviewer rita, who passes
// every review. It adds task 1 PLANNED (nobody claims it until approved)
// and returns the board to approve it.
func mergeDashboardDaemon(t *testing.T) (d *daemonProc, cfg, base, repo string, b *taskboard.Board) {
	t.Helper()
	repo = gitRepo(t)
	addr := freePort(t)
	cfg = writeConfig(t, repo, fmt.Sprintf(`
listen: %q
defaults:
  min_session_interval: 0s
merge:
  into: main
  gate: ["test -f feature.txt"]
backends:
  worker:
    type: command
    command: sh
    args: [-c, "cat >/dev/null; echo feature > feature.txt; git add feature.txt; git commit -q -m 'add the feature'; printf 'added it\nDONE\n'"]
  reviewer:
    type: command
    command: sh
    args: [-c, "p=$(cat); if echo \"$p\" | grep -q '^## Review request'; then printf 'fine\nPASS\n'; else printf 'idle\nDONE\n'; fi"]
agents:
  - {name: alice, role: works, backend: worker, reviewer: rita}
  - {name: rita, role: reviews, backend: reviewer}
`, addr))
	d = startDaemon(t, cfg)
	d.waitLine("rita idle", idleLine("rita"))
	d.waitLine("alice idle", idleLine("alice"))
	b, _ = openBoardAt(t, filepath.Join(repo, ".swarm"))
	if _, err := b.Add(context.Background(), taskboard.NewTask{Title: "the feature", Assignee: "alice", Plan: true}); err != nil {
		t.Fatal(err)
	}
	return d, cfg, "http://" + addr, repo, b
}

// TestWebTaskViewInChromium: a task's view, opened from its card while the
// task waits for approval, follows it live through claim, DONE, review,
// gate and merge (no reload): its transitions, the verdict, the merge
// commit that is main's, the gate log and the diff stat; the merge queue
// panel shows the result. An idle agent shows idle, not BuildingPrompt.
func TestWebTaskViewInChromium(t *testing.T) {
	br := newBrowser(t, 1400, 1000)
	d, _, base, repo, board := mergeDashboardDaemon(t)
	br.do(t, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#board .card[data-task="1"]`)))
	poll[bool](t, br, "rita shown idle", `(() => { const r = document.querySelector('tr[data-agent="rita"] td.state');
		return r && r.textContent === 'idle'; })()`)
	br.do(t, chromedp.Click(chromedp.CSS(`#board .card[data-task="1"]`)), chromedp.WaitVisible(chromedp.ID("task-panel")))
	poll[bool](t, br, "the task's view", `document.querySelector('#task-view dd[data-key="state"]')?.textContent === 'PLANNED'`)

	if _, err := board.Approve(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	waitTask(t, board, 1, task.Closed, d)
	poll[bool](t, br, "the view at CLOSED", `document.querySelector('#task-view dd[data-key="state"]')?.textContent === 'CLOSED'`)
	main := strings.TrimSpace(gitOut(t, repo, "rev-parse", "main"))
	poll[bool](t, br, "the merge commit", fmt.Sprintf(`document.querySelector('#task-view dd[data-key="merge"]')?.textContent.startsWith('merged as %s')`, main[:7]))
	timeline := eval[[]string](t, br, `[...document.querySelectorAll('#task-timeline li')].map(li => li.dataset.to)`)
	for _, want := range []string{"OPEN", "CLAIMED", "DONE", "queued", "testing", "merged", "CLOSED"} {
		if !slices.Contains(timeline, want) {
			t.Errorf("the timeline %v lacks a transition to %s", timeline, want)
		}
	}
	for what, js := range map[string]string{
		"the verdict":        `document.querySelector('#task-verdicts')?.textContent.includes('rita') && document.querySelector('#task-verdicts').textContent.includes('PASS')`,
		"the gate log":       `document.getElementById('task-gate')?.textContent.includes('$ test -f feature.txt')`,
		"the diff stat":      `document.getElementById('task-diff')?.textContent.includes('feature.txt')`,
		"the spend":          `/^\d+ sessions/.test(document.querySelector('#task-view dd[data-key="spend"]')?.textContent || '') && !document.querySelector('#task-view dd[data-key="spend"]').textContent.startsWith('0 sessions')`,
		"the queue's result": fmt.Sprintf(`!!document.querySelector('#merge li[data-task="1"][data-result="merged"]') && document.getElementById('merge').textContent.includes('merged %s') && document.getElementById('merge').textContent.includes('depth 0')`, main[:7]),
	} {
		poll[bool](t, br, what, js)
	}
	if errs := br.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
