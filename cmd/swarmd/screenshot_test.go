package main

import (
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/swarmd/swarmd/internal/view"
)

// TestDashboardScreenshots writes the README's pictures of both dashboards
// (docs/dashboard-web.png, docs/dashboard-top.png) from a real swarm in
// every visual state. It runs only when SWARMD_SCREENSHOT_DIR names where
// to write them: scripts/screenshots.sh.
func TestDashboardScreenshots(t *testing.T) {
	dir := os.Getenv("SWARMD_SCREENSHOT_DIR")
	if dir == "" {
		t.Skip("set SWARMD_SCREENSHOT_DIR (scripts/screenshots.sh) to write the dashboards' screenshots")
	}
	b := newBrowser(t, 1440, 960)
	tm := newTmux(t, 110, 32, "env PS1='$ ' TERM=xterm-256color COLORTERM=truecolor sh")
	repo := gitRepo(t)
	addr := freePort(t)
	cfg := writeConfig(t, repo, fmt.Sprintf(`listen: %q
web: {token: %q}
stall_after: 3s
defaults: {backend: ticker, grace_period: 1s, max_consecutive_errors: 1000, max_total_errors: 1000}
backends:
  ticker: {type: scripted, steps: %s}
  finisher: {type: scripted, steps: [{print: [working, DONE], exit: 0}]}
  quiet: {type: scripted, steps: [{print: [thinking], sleep: 1h}]}
  failing: {type: scripted, steps: [{print: ["error: the build is broken"], exit: 3}]}
agents:
  - {name: architect, role: plans}
  - {name: builder, role: builds}
  - {name: docs, role: writes, backend: finisher}
  - {name: fixer, role: fixes, backend: failing, min_session_interval: 30s}
  - {name: reviewer, role: reviews}
  - {name: scout, role: explores, backend: quiet}
  - {name: tester, role: tests}
`, addr, dashToken, tickerSteps(600, 700*time.Millisecond)))
	d := startDaemon(t, cfg)
	base := "http://" + addr
	for _, a := range []string{"architect", "builder", "reviewer", "scout", "tester"} {
		d.waitLine(a+" Running", transitionTo(a, "Running"))
	}
	for _, p := range []string{"/api/agents/tester/stop", "/api/agents/reviewer/pause"} {
		if resp, data := httpDo(t, "POST", base+p, dashToken, ""); resp.StatusCode != 202 {
			t.Fatalf("%s: %s %s", p, resp.Status, data)
		}
	}
	for _, body := range []string{
		`{"title":"Split the config loader into parse and validate","to":"tester","priority":2}`,
		`{"title":"Document the merge queue","to":"tester"}`,
		`{"title":"Flaky: TestRouterWakesIdle times out on 2 cores","to":"reviewer","priority":5}`,
		`{"title":"Release notes for 0.4","plan":true}`,
	} {
		if resp, data := httpDo(t, "POST", base+"/api/tasks", dashToken, body); resp.StatusCode != 201 {
			t.Fatalf("task: %s %s", resp.Status, data)
		}
	}
	httpDo(t, "POST", base+"/api/mail", dashToken, `{"to":"builder","subject":"main is red","body":"stop and look","urgent":true}`)
	waitAgent(t, base, "scout", func(a view.Agent) bool { return a.Visual == view.Stalled })
	waitAgent(t, base, "docs", func(a view.Agent) bool { return a.Visual == view.Idle })
	d.waitLine("the builder interrupted", func(m map[string]any) bool {
		return m["msg"] == "transition" && m["agent"] == "builder" && m["event"] == "UrgentMessage"
	})
	waitAgent(t, base, "builder", func(a view.Agent) bool { return a.Visual == view.Running })

	// The web dashboard, unlocked, following the builder's log.
	b.do(t, chromedp.Navigate(base+"/#token="+dashToken), chromedp.WaitVisible(chromedp.CSS(`tr[data-agent="tester"] button.act-start`)))
	b.do(t, chromedp.Click(chromedp.CSS(`tr[data-agent="builder"] td.name`)))
	poll[bool](t, b, "the builder's log", `document.getElementById('log').textContent.includes('tick 3')`)
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	writePNG(t, filepath.Join(dir, "dashboard-web.png"), png)

	// swarmd top in a 110x32 terminal, drawn as the terminal shows it.
	tm.keys(swarmdBin+" top -c "+cfg, "Enter")
	tm.waitScreen("the dashboard", func(s string) bool { return strings.Contains(s, "tester") && strings.Contains(s, "live") })
	tm.keys("Down")
	time.Sleep(1500 * time.Millisecond) // let the ages tick once: a picture, not a check
	screen := tm.run("capture-pane", "-e", "-N", "-p", "-t", "t")
	page := filepath.Join(t.TempDir(), "top.html")
	if err := os.WriteFile(page, []byte(terminalHTML(screen)), 0o600); err != nil {
		t.Fatal(err)
	}
	b.do(t, chromedp.Navigate("file://"+page), chromedp.WaitVisible(chromedp.ID("term")))
	png, err = chromedp.Run(b.ctx, chromedp.Screenshot(chromedp.ID("term")))
	if err != nil {
		t.Fatal(err)
	}
	writePNG(t, filepath.Join(dir, "dashboard-top.png"), png)
	tm.keys("q")
}

func writePNG(t *testing.T, path string, png []byte) {
	t.Helper()
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("%s: not a PNG", path)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}

var sgrRE = regexp.MustCompile("\x1b\\[([0-9;]*)m")

// terminalHTML draws a tmux capture (with its SGR escapes) as a dark
// terminal in HTML: colours, bold, underline and reverse video.
func terminalHTML(screen string) string {
	const fg, bg = "#d7dae0", "#16181d"
	var b strings.Builder
	b.WriteString(`<!doctype html><meta charset="utf-8"><style>body{margin:0;background:#000}` +
		`#term{display:inline-block;margin:0;padding:14px 16px;background:` + bg + `;color:` + fg + `;` +
		`font:15px/1.25 "DejaVu Sans Mono",monospace;white-space:pre}</style><pre id="term">`)
	type attrs struct {
		fg, bg             string
		bold, under, rever bool
	}
	var cur attrs
	open := false
	style := func() {
		if open {
			b.WriteString("</span>")
		}
		f, g := cur.fg, cur.bg
		if cur.rever {
			f, g = cmpOr(g, bg), cmpOr(f, fg)
		}
		css := ""
		if f != "" {
			css += "color:" + f + ";"
		}
		if g != "" {
			css += "background:" + g + ";"
		}
		if cur.bold {
			css += "font-weight:bold;"
		}
		if cur.under {
			css += "text-decoration:underline;"
		}
		b.WriteString(`<span style="` + css + `">`)
		open = true
	}
	for _, line := range strings.Split(strings.TrimRight(screen, "\n"), "\n") {
		rest := line
		for {
			loc := sgrRE.FindStringSubmatchIndex(rest)
			if loc == nil {
				b.WriteString(html.EscapeString(rest))
				break
			}
			b.WriteString(html.EscapeString(rest[:loc[0]]))
			codes := strings.Split(rest[loc[2]:loc[3]], ";")
			for i := 0; i < len(codes); i++ {
				switch n, _ := strconv.Atoi(codes[i]); {
				case n == 0:
					cur = attrs{}
				case n == 1:
					cur.bold = true
				case n == 4:
					cur.under = true
				case n == 7:
					cur.rever = true
				case n == 22:
					cur.bold = false
				case n == 24:
					cur.under = false
				case n == 27:
					cur.rever = false
				case n == 39:
					cur.fg = ""
				case n == 49:
					cur.bg = ""
				case (n == 38 || n == 48) && i+4 < len(codes) && codes[i+1] == "2":
					c := "rgb(" + codes[i+2] + "," + codes[i+3] + "," + codes[i+4] + ")"
					if n == 38 {
						cur.fg = c
					} else {
						cur.bg = c
					}
					i += 4
				}
			}
			style()
			rest = rest[loc[1]:]
		}
		b.WriteString("\n")
	}
	if open {
		b.WriteString("</span>")
	}
	b.WriteString("</pre>")
	return b.String()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
