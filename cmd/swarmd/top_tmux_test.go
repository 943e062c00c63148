package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/task"
)

// tmuxServer is a tmux server of the test's own (its own socket), so that
// nothing it does touches anyone else's sessions; it is killed at cleanup.
type tmuxServer struct {
	t    *testing.T
	sock string // the server's socket, in the test's temp dir (tmux leaves it)
}

// needTool skips when a program the test drives is missing, loudly, and
// fails instead when the environment variable says CI requires it.
func needTool(t *testing.T, name, requireVar string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s is not installed (apt-get install %s); set %s=1 to make this a failure", name, name, requireVar)
	if os.Getenv(requireVar) == "1" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED LOUDLY: " + msg)
	return ""
}

func newTmux(t *testing.T, width, height int, shellCmd string) *tmuxServer {
	t.Helper()
	needTool(t, "tmux", "SWARMD_REQUIRE_TMUX")
	s := &tmuxServer{t: t, sock: filepath.Join(t.TempDir(), "tmux")}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", s.sock, "kill-server").Run() })
	s.run("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", fmt.Sprint(width), "-y", fmt.Sprint(height), shellCmd)
	return s
}

func (s *tmuxServer) run(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", s.sock}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (s *tmuxServer) keys(keys ...string) {
	s.run(append([]string{"send-keys", "-t", "t"}, keys...)...)
}

func (s *tmuxServer) screen() string { return s.run("capture-pane", "-p", "-t", "t") }

// waitScreen polls the pane (a real terminal: no event to wait on) until
// match holds.
func (s *tmuxServer) waitScreen(what string, match func(string) bool) string {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sc := s.screen()
		if match(sc) {
			return sc
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the screen never showed %s:\n%s", what, sc)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func shows(sub string) func(string) bool {
	return func(s string) bool { return strings.Contains(s, sub) }
}

// TestTopInTmux runs swarmd top for real in a terminal (tmux) against a
// running daemon: it draws the agents at 80x24, shows a state change made
// elsewhere, follows a log, follows a resize, and q gives the terminal
// back as it was.
func TestTopInTmux(t *testing.T) {
	tm := newTmux(t, 80, 24, "env PS1='$ ' TERM=xterm-256color sh")
	d, cfg, _ := dashboardDaemon(t, "", "alice", "bob")
	tm.keys("clear; echo before-top", "Enter")
	tm.waitScreen("the shell", shows("before-top"))
	tm.keys(swarmdBin+" top -c "+cfg, "Enter")
	frame := tm.waitScreen("the dashboard", func(s string) bool {
		return strings.Contains(s, "alice") && strings.Contains(s, "bob") && strings.Contains(s, "live")
	})
	lines := strings.Split(strings.TrimRight(frame, "\n"), "\n")
	if len(lines) != 24 || !strings.HasPrefix(lines[23], "enter log") {
		t.Fatalf("not a full 80x24 frame (%d lines):\n%s", len(lines), frame)
	}

	// A state change made by another command shows up.
	if _, stderr, code := runCLI(t, nil, "", "stop", "bob", "-c", cfg); code != 0 {
		t.Fatalf("stop bob: %s", stderr)
	}
	tm.waitScreen("bob Stopped", regexp.MustCompile(`○ bob +Stopped`).MatchString)

	// s and S act on the selected agent (alice, the first).
	tm.keys("s")
	tm.waitScreen("alice Stopped", regexp.MustCompile(`○ alice +Stopped`).MatchString)
	tm.keys("S")
	tm.waitScreen("alice back", regexp.MustCompile(`alice +(Initializing|BuildingPrompt|Spawning|Running)`).MatchString)

	// enter follows her log; esc comes back.
	tm.waitScreen("alice Running", regexp.MustCompile(`● alice +Running`).MatchString)
	tm.keys("Enter")
	tm.waitScreen("alice's log", func(s string) bool { return strings.Contains(s, "log: alice") && strings.Contains(s, "tick 2") })
	tm.keys("Escape")
	tm.waitScreen("the table again", shows("AGENT"))

	// m sends the selected agent mail, from the operator.
	tm.keys("m")
	tm.run("send-keys", "-t", "t", "-l", "hello alice")
	tm.waitScreen("the mail being typed", shows("mail to alice: hello alice"))
	tm.keys("Enter")
	tm.waitScreen("the mail sent", shows("mail to alice: sent"))
	d.waitLine("the mail", func(m map[string]any) bool {
		return m["msg"] == "mail sent from a dashboard" && m["from"] == "operator" && m["to"] == "alice"
	})

	// The frame follows a resize.
	tm.run("resize-window", "-t", "t", "-x", "100", "-y", "30")
	tm.waitScreen("a 100x30 frame", func(s string) bool {
		ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
		return len(ls) == 30 && strings.HasPrefix(ls[29], "enter log") && strings.Contains(s, "running")
	})

	// q restores the terminal: the screen from before, a shell that echoes.
	tm.keys("q")
	after := tm.waitScreen("the shell again", shows("before-top"))
	if strings.Contains(after, "AGENT") || tm.run("display", "-p", "-t", "t", "#{alternate_on}") != "0\n" {
		t.Fatalf("the dashboard is still on the screen:\n%s", after)
	}
	tm.keys("echo after-$((40+2))", "Enter")
	tm.waitScreen("a working shell", shows("after-42"))
}

// TestTopTaskViewInTmux: in swarmd top, t opens a task's view (the id
// typed), which follows the task live from PLANNED through review, gate and
// merge to CLOSED, with its merge commit; esc goes back to the table,
// where the merge queue shows the result and the idle agents show idle.
func TestTopTaskViewInTmux(t *testing.T) {
	tm := newTmux(t, 120, 40, "env PS1='$ ' TERM=xterm-256color sh")
	d, cfg, _, repo, board := mergeDashboardDaemon(t)
	tm.keys(swarmdBin+" top -c "+cfg, "Enter")
	tm.waitScreen("the dashboard", func(s string) bool {
		return strings.Contains(s, "alice") && strings.Contains(s, "rita") && strings.Contains(s, "live")
	})
	tm.waitScreen("the idle agents idle", regexp.MustCompile(`□ rita +idle `).MatchString)
	tm.keys("t")
	tm.waitScreen("the task prompt", shows("task #▏"))
	tm.keys("1", "Enter")
	tm.waitScreen("task 1's view", func(s string) bool {
		return strings.Contains(s, "task #1: the feature") && strings.Contains(s, "state PLANNED") && strings.Contains(s, "merge: not queued")
	})
	if _, err := board.Approve(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	waitTask(t, board, 1, task.Closed, d)
	main := strings.TrimSpace(gitOut(t, repo, "rev-parse", "main"))
	tm.waitScreen("the view at CLOSED, merged", func(s string) bool {
		return strings.Contains(s, "state CLOSED") && strings.Contains(s, "merge: merged as "+main[:7]) &&
			strings.Contains(s, "PLANNED→OPEN operator") && strings.Contains(s, "OPEN→CLAIMED agent:alice: claimed") &&
			strings.Contains(s, "queued→testing merge-queue") && strings.Contains(s, "DONE→CLOSED merge-queue") &&
			strings.Contains(s, "rita PASS")
	})
	tm.keys("Escape")
	tm.waitScreen("the table with the queue's result", func(s string) bool {
		return strings.Contains(s, "AGENT") && strings.Contains(s, "merge queue: depth 0") && strings.Contains(s, "last: #1 merged "+main[:7])
	})
	tm.keys("q")
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
