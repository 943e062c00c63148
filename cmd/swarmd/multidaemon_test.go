package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// senderScript is agent a's session on daemon 1: its first session wakes
// b with urgent mail; every session ends with the done signal (finishing
// the task it holds, if any; idle when there is nothing else).
const senderScript = `cat >/dev/null
if [ ! -e OUT/a-sent ]; then
  swarmd mail send --to b --urgent --subject wake 'hello b from daemon 1' > OUT/a-send.log 2>&1 || exit 1
  touch OUT/a-sent
fi
echo DONE
`

// workerScript is agent b's session on daemon 2: the first waits to be
// interrupted; later ones keep their prompt and finish their task, except
// one titled "hang here", which they start and never finish.
const workerScript = `cat > OUT/b-prompt-$SWARM_SESSION_ID
if [ ! -e OUT/b-first ]; then touch OUT/b-first; exec sleep 3600; fi
if grep -q 'hang here' OUT/b-prompt-$SWARM_SESSION_ID; then swarmd task start > OUT/b-start.log 2>&1; exec sleep 3600; fi
echo DONE
`

// TestTwoDaemonsOneSwarm: two daemons, each with its own clone and state
// dir, share one PostgreSQL store. Urgent mail from an agent of daemon 1
// interrupts an agent of daemon 2, whose next prompt carries it; a task
// added on daemon 1 is done by daemon 2's agent; when daemon 2 is killed
// (SIGKILL) holding a task, its lease expires, daemon 1 requeues the task
// and its agent finishes it, exactly once; daemon 2 restarted takes its
// agent back and leaves nothing of the killed run behind.
func TestTwoDaemonsOneSwarm(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "swarm")
	url := srv.URL(dbName)
	out := t.TempDir()
	remote := filepath.Join(t.TempDir(), "remote.git")
	seed := gitRepo(t)
	for _, args := range [][]string{{"init", "-q", "--bare", "-b", "main", remote}, {"-C", seed, "push", "-q", remote, "main"}} {
		if b, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	clone := func() string {
		dir := filepath.Join(t.TempDir(), "clone")
		if b, err := exec.Command("git", "clone", "-q", remote, dir).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, b)
		}
		return dir
	}
	config := func(repo, agent, script string) string {
		path := filepath.Join(out, agent+".sh")
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(script, "OUT", out)), 0o644); err != nil {
			t.Fatal(err)
		}
		return writeConfig(t, repo, fmt.Sprintf(`
listen: ""
sandbox: {writable: [`+out+`]}
store: "%s"
lease_timeout: 2s
remote: origin
defaults:
  grace_period: 1s
backends:
  script:
    type: command
    command: sh
    args: [%s]
agents:
  - {name: %s, role: works, backend: script, min_session_interval: 50ms}
`, url, path, agent))
	}
	repo1, repo2 := clone(), clone()
	cfg1, cfg2 := config(repo1, "a", senderScript), config(repo2, "b", workerScript)
	state2 := filepath.Join(repo2, ".swarm")

	d2 := startDaemon(t, cfg2)
	d2.waitLine("b Running", transitionTo("b", "Running"))
	d1 := startDaemon(t, cfg1)

	// 1. Urgent mail across daemons interrupts b; b's next prompt has it.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon 1's log:\n%s", d1.log())
		}
	})
	d2.waitLine("b interrupted", transitionTo("b", "Interrupting"))
	waitUntil(t, "b's prompt carrying a's mail", func() bool {
		return promptHas(out, "hello b from daemon 1")
	})

	// 2. A task added on daemon 1 is done by daemon 2's b.
	id := addTask(t, cfg1, "cross-machine work", "--to", "b")
	waitTaskCLI(t, cfg1, id, func(tk taskboard.Task) bool { return tk.StateName == "CLOSED" && tk.Claimant == "b" })

	// Daemon 1's dashboard shows its own agents, and names both daemons.
	top := func() string {
		out, stderr, code := runCLI(t, []string{"COLUMNS=1000"}, "", "top", "--once", "-c", cfg1)
		if code != 0 {
			t.Fatalf("top --once: %s", stderr)
		}
		return out
	}
	state1 := filepath.Join(repo1, ".swarm")
	if out := top(); !strings.Contains(out, "2 daemons: ") || !strings.Contains(out, state1+" (this)") || !strings.Contains(out, state2+" live") {
		t.Errorf("daemon 1's top does not name both daemons:\n%s", out)
	}

	// 3. b holds a task when daemon 2 is killed; a is stopped so that only
	// the requeue can give it the task.
	if _, stderr, code := runCLI(t, nil, "", "stop", "a", "-c", cfg1); code != 0 {
		t.Fatalf("stop a: %s", stderr)
	}
	d1.waitLine("a Stopped", transitionTo("a", "Stopped"))
	hang := addTask(t, cfg1, "hang here")
	waitTaskCLI(t, cfg1, hang, func(tk taskboard.Task) bool { return tk.StateName == "IN_PROGRESS" && tk.Claimant == "b" })
	killedAt := time.Now()
	if err := d2.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d2.wait(10 * time.Second)
	// Its lease guard saw it go and killed its session at once.
	waitNoTreeProcesses(t, state2, 2*time.Second)
	d1.waitLine("daemon 2's lease reaped", func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "a daemon's lease expired") && m["agent"] == "b"
	})
	waitTaskCLI(t, cfg1, hang, func(tk taskboard.Task) bool { return tk.StateName == "OPEN" && tk.Claimant == "" })
	if out := top(); !strings.Contains(out, state2+" stopped") {
		t.Errorf("daemon 1's top does not show daemon 2 stopped once its lease was reaped:\n%s", out)
	}
	if took, limit := time.Since(killedAt), 2*time.Second+5*time.Second; took > limit {
		t.Errorf("daemon 2's task was requeued %s after the kill; want within lease_timeout + 5 s (%s)", took, limit)
	}
	if _, stderr, code := runCLI(t, nil, "", "start", "a", "-c", cfg1); code != 0 {
		t.Fatalf("start a: %s", stderr)
	}
	waitTaskCLI(t, cfg1, hang, func(tk taskboard.Task) bool { return tk.StateName == "CLOSED" && tk.Claimant == "a" })
	claims, dones := taskEvents(t, url, hang)
	if claims != 2 || dones != 1 {
		t.Errorf("task %d: %d claims (b's, then a's after the requeue) and %d done; want 2 and 1", hang, claims, dones)
	}

	// 4. Daemon 2 comes back: it takes b again and ends what the killed
	// run left running.
	d2 = startDaemon(t, cfg2)
	d2.waitLine("b Running again", transitionTo("b", "Running"))
	stdout, stderr, code := runCLI(t, nil, "", "status", "-c", cfg1)
	if code != 0 || !strings.Contains(stdout, "DAEMON") || !strings.Contains(stdout, state2) {
		t.Errorf("status on daemon 1 does not show b on daemon 2:\n%s%s", stdout, stderr)
	}
	for _, d := range []*daemonProc{d1, d2} {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		if code := d.wait(20 * time.Second); code != 0 {
			t.Errorf("daemon exit %d; log:\n%s", code, d.log())
		}
	}
	waitNoTreeProcesses(t, state2, 10*time.Second)
	waitNoTreeProcesses(t, filepath.Join(repo1, ".swarm"), 10*time.Second)
}

// waitUntil polls cond (real processes) until it holds, failing the test
// after a deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func promptHas(dir, text string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "b-prompt-*"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), text) {
			return true
		}
	}
	return false
}

// addTask adds a task as the operator and returns its id.
func addTask(t *testing.T, cfg, title string, args ...string) int64 {
	t.Helper()
	stdout, stderr, code := runCLI(t, nil, "", append([]string{"task", "add", title, "-c", cfg}, args...)...)
	if code != 0 {
		t.Fatalf("task add: exit %d %s", code, stderr)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(stdout), 10, 64)
	if err != nil {
		t.Fatalf("task add said %q", stdout)
	}
	return id
}

// waitTaskCLI polls `swarmd task show` until ok holds for the task.
func waitTaskCLI(t *testing.T, cfg string, id int64, ok func(taskboard.Task) bool) {
	t.Helper()
	var last taskboard.Task
	waitUntil(t, fmt.Sprintf("task %d", id), func() bool {
		stdout, _, code := runCLI(t, nil, "", "task", "show", fmt.Sprint(id), "--json", "-c", cfg)
		if code != 0 || json.Unmarshal([]byte(stdout), &last) != nil {
			return false
		}
		return ok(last)
	})
}

// taskEvents counts a task's claims and its moves to DONE in the store.
func taskEvents(t *testing.T, url string, id int64) (claims, dones int) {
	t.Helper()
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evs, err := db.Events(context.Background(), store.EventQuery{TaskID: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		switch e.To {
		case "CLAIMED":
			claims++
		case "DONE":
			dones++
		}
	}
	return claims, dones
}
