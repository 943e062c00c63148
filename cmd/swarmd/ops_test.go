package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const reloadBase = `
listen: ""
defaults:
  backend: worker
  grace_period: 1s
backends:
  worker:
    type: scripted
    steps: [{print: [busy], sleep: 1h}]
agents:
  - {name: alice, role: "first role"}
  - {name: bob, role: works}
`

func TestSIGHUPReload(t *testing.T) {
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, reloadBase)
	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	d.waitLine("bob Running", transitionTo("bob", "Running"))

	// Invalid config: refused, the running one kept.
	writeConfig(t, repo, reloadBase+"  - {name: Carol, role: x}\n")
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitLine("reload refused", func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "config reload refused") && strings.Contains(fmt.Sprint(m["error"]), "swarmd.yaml:13")
	})

	// Add carol, remove bob, change alice's role.
	writeConfig(t, repo, strings.Replace(strings.Replace(reloadBase, "first role", "second role", 1),
		"  - {name: bob, role: works}\n", "  - {name: carol, role: new}\n", 1))
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitLine("reloaded", func(m map[string]any) bool { return m["msg"] == "config reloaded" })
	d.waitLine("carol Running", transitionTo("carol", "Running"))
	d.waitLine("bob Stopped", func(m map[string]any) bool {
		return transitionTo("bob", "Stopped")(m) && m["event"] == "OperatorStop"
	})
	// alice's running session keeps its prompt; her next one has the new role.
	if _, stderr, code := runCLI(t, nil, "", "stop", "alice", "-c", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d.waitLine("alice stopped", transitionTo("alice", "Stopped"))
	if _, stderr, code := runCLI(t, nil, "", "start", "alice", "-c", cfg); code != 0 {
		t.Fatal(stderr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, _ := runCLI(t, nil, "", "status", "-c", cfg)
		if strings.Contains(out, "carol") && !strings.Contains(out, "bob") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after reload:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var prompt []byte
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(repo, ".swarm", "logs", "alice", "*.prompt.md"))
		if len(files) > 0 {
			prompt, _ = os.ReadFile(files[len(files)-1])
			if strings.Contains(string(prompt), "second role") {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(string(prompt), "second role") {
		t.Errorf("alice's prompt after reload:\n%s", prompt)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestMetricsHealthAndSystemdNotify(t *testing.T) {
	repo := gitRepo(t)
	addr := freePort(t)
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: %q
defaults:
  grace_period: 1s
backends:
  quick:
    type: scripted
    steps: [{print: [done], exit: 0}, {print: [failed], exit: 3}, {sleep: 1h}]
agents:
  - {name: alice, role: x, backend: quick}
`, addr))
	// A test NOTIFY_SOCKET receives what systemd would.
	notifyPath := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	notes := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(notes)
				return
			}
			notes <- string(buf[:n])
		}
	}()
	cmd := exec.Command(swarmdBin, "run", "--config", cfg, "--log-format", "json")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notifyPath)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitNote := func(want string) {
		t.Helper()
		select {
		case n := <-notes:
			if !strings.Contains(n, want) {
				t.Fatalf("notify = %q, want %q", n, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s notification", want)
		}
	}
	waitNote("READY=1")
	// Success, then error (CoolingDown), then a running session. The
	// agent's error count is its journal row's, which may follow the
	// state's gauge by a write (CI, under load): waited for with them.
	deadline := time.Now().Add(30 * time.Second)
	var body string
	for {
		body = scrape(t, "http://"+addr+"/metrics")
		if strings.Contains(body, `swarmd_sessions_total{agent="alice",outcome="error"} 1`) &&
			strings.Contains(body, `swarmd_agent_state{agent="alice",state="Running"} 1`) &&
			strings.Contains(body, `swarmd_agent_total_errors{agent="alice"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never reached the expected state:\n%s", grepLines(body, "swarmd_"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{
		`swarmd_sessions_total{agent="alice",outcome="success"} 1`,
		`swarmd_agent_state{agent="alice",state="Stopped"} 0`,
		`swarmd_agent_total_errors{agent="alice"} 1`,
		`swarmd_build_info{`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, grepLines(body, "swarmd_"))
		}
	}
	// The sessions' rows were written through the daemon's one writer,
	// and its counters say so.
	for _, name := range []string{"swarmd_store_writes_total", "swarmd_store_writer_busy_seconds_total"} {
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Errorf("metrics lack %s:\n%s", name, grepLines(body, "swarmd_store"))
		} else if v, err := strconv.ParseFloat(m[1], 64); err != nil || v <= 0 {
			t.Errorf("%s = %s, want > 0", name, m[1])
		}
	}
	// Mail sent by another process is counted where it lands.
	if _, stderr, code := runCLI(t, nil, "", "mail", "send", "--to", "alice", "--urgent", "-c", cfg, "hi"); code != 0 {
		t.Fatal(stderr)
	}
	for {
		body = scrape(t, "http://"+addr+"/metrics")
		if strings.Contains(body, `swarmd_mailbox_messages_total{urgency="urgent"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mail metric never counted:\n%s", grepLines(body, "swarmd_mailbox"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := strings.Count(body, `swarmd_agent_state{agent="alice",state=`); got != 8 {
		t.Errorf("%d state series for alice, want 8", got)
	}
	if b := scrape(t, "http://"+addr+"/healthz"); strings.TrimSpace(b) != "ok" {
		t.Errorf("healthz = %q", b)
	}
	if b := scrape(t, "http://"+addr+"/readyz"); !strings.HasPrefix(b, "ready\n") || !strings.Contains(b, "\nisolation ") {
		t.Errorf("readyz = %q", b)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	waitNote("STOPPING=1")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
