package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// backupWorker commits tN.txt for its task N and says DONE.
const backupWorker = `p=$(cat)
n=$(printf '%s\n' "$p" | sed -n -E 's/^(Your task: #|Continue your task #)([0-9]+): .*/\2/p' | head -1)
if [ -z "$n" ]; then printf 'nothing\nDONE\n'; exit 0; fi
echo "$n" > "t$n.txt"; git add -A; git commit -q -m "task $n"; printf 'done\nDONE\n'`

// TestBackupAndRestoreOfARunningSwarm: a backup taken while the swarm
// works, the swarm working on, killed, then the backup restored: the
// restore is refused while a daemon runs; after it, no session's log is
// written twice, the tasks made after the backup keep their ids (the next
// task is numbered after them, and main never takes two merges for one
// task), the merge queue does not take its own merges since the backup
// for someone else's, and the store replaced is kept whole.
func TestBackupAndRestoreOfARunningSwarm(t *testing.T) {
	t.Parallel() // its own repository and daemons; mostly waiting on sessions and merges
	ctx := context.Background()
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
defaults: {min_session_interval: 0s}
merge: {into: main, gate: ["true"]}
backends:
  worker: {type: command, command: sh, args: [-c, %q]}
agents:
  - {name: alice, role: works, backend: worker}
`, backupWorker))
	stateDir := filepath.Join(repo, ".swarm")
	open := func() (*taskboard.Board, func()) {
		db, err := mailbox.Open(ctx, filepath.Join(stateDir, "swarm.db"), store.Options{NoCreate: true}, mailbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := daemon.OpenTaskBoard(ctx, db.Store(), nil)
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return b, func() { db.Close() }
	}
	addAndMerge := func(b *taskboard.Board, d *daemonProc, titles ...string) []int64 {
		t.Helper()
		var ids []int64
		for _, title := range titles {
			tk, err := b.Add(ctx, taskboard.NewTask{Title: title})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, tk.ID)
		}
		for _, id := range ids {
			waitTaskLong(t, b, id, task.Closed, d, 60*time.Second)
		}
		return ids
	}

	d := startDaemon(t, cfg)
	d.waitLine("alice idle", idleLine("alice"))
	b, closeBoard := open()
	addAndMerge(b, d, "one", "two")
	backupPath := filepath.Join(t.TempDir(), "swarm-backup.db")
	out, errOut, code := runCLI(t, nil, "", "backup", backupPath, "-c", cfg)
	if code != 0 || !strings.HasPrefix(out, "backed up ") {
		t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, nil, "", "backup", backupPath, "-c", cfg); code != 2 || !strings.Contains(errOut, "never replaces") {
		t.Errorf("a second backup to the same name: exit %d, %q; want 2 and a refusal", code, errOut)
	}
	after := addAndMerge(b, d, "three", "four")
	if _, errOut, code := runCLI(t, nil, "", "restore", backupPath, "-c", cfg); code != 2 || !strings.Contains(errOut, "stop that daemon first") {
		t.Errorf("restore beside a running daemon: exit %d, %q; want 2 and a refusal", code, errOut)
	}
	closeBoard()
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	d.wait(10 * time.Second)

	hi, err := logs.New(stateDir, 0, 0, nil).HighestSeq("alice", time.Time{})
	if err != nil || hi == 0 {
		t.Fatalf("alice's highest logged seq: %d, %v", hi, err)
	}
	logDir := filepath.Join(stateDir, "logs", "alice")
	before := map[string]string{} // the live logs as the kill left them
	if entries, err := os.ReadDir(logDir); err == nil {
		for _, e := range entries {
			body, err := os.ReadFile(filepath.Join(logDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			before[e.Name()] = string(body)
		}
	}
	out, errOut, code = runCLI(t, nil, "", "restore", backupPath, "-c", cfg)
	if code != 0 {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	for _, id := range after {
		if want := fmt.Sprintf("task %d: made after the backup", id); !strings.Contains(out, want) {
			t.Errorf("restore's report lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "by the merge queue's merges alone") {
		t.Errorf("restore's report does not say main moved by the queue alone:\n%s", out)
	}

	d2 := startDaemon(t, cfg)
	d2.waitLine("alice idle", idleLine("alice"))
	b2, closeBoard2 := open()
	defer closeBoard2()
	five := addAndMerge(b2, d2, "five")[0]
	if want := after[len(after)-1] + 1; five != want {
		t.Errorf("the task after the restore has id %d, want %d (after the ids the repository names)", five, want)
	}
	if strings.Contains(d2.log(), "MERGE TARGET MOVED") {
		t.Errorf("the start after the restore took the queue's own merges for a move someone else made:\n%s", d2.log())
	}

	// Every session of the new run is numbered after the logs, and no log
	// holds two sessions' output: a log from before the restore still
	// live (the start archives them in the background) is as it was.
	entries, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	newRun := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		body, err := os.ReadFile(filepath.Join(logDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var seq uint32
		fmt.Sscanf(e.Name(), "%d.log", &seq)
		if seq <= hi {
			if string(body) != before[e.Name()] {
				t.Errorf("%s, a log from before the restore, was written to after it:\n%s", e.Name(), body)
			}
			continue
		}
		newRun++
		if n := strings.Count(string(body), "=== swarmd session "); n != 2 { // its header and footer
			t.Errorf("%s holds %d header and footer lines, want 2 (one session):\n%s", e.Name(), n, body)
		}
	}
	if newRun == 0 {
		t.Errorf("no live log numbered after %d, the logs' highest before the restore", hi)
	}
	trailers := gitOut(t, repo, "log", "--first-parent", "--format=%(trailers:key=Swarmd-Task,valueonly)", "main")
	seen := map[string]int{}
	for _, f := range strings.Fields(trailers) {
		seen[f]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("main holds %d merges of task %s, want 1", n, id)
		}
	}
	if len(seen) != 5 {
		t.Errorf("main holds merges of %d tasks (%v), want 5", len(seen), seen)
	}

	// The store replaced is aside, with the four tasks it held.
	asides, _ := filepath.Glob(filepath.Join(stateDir, "before-restore-*", "swarm.db"))
	if len(asides) != 1 {
		t.Fatalf("stores aside: %v, want 1", asides)
	}
	old, err := store.Open(ctx, asides[0], store.Options{NoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	var n int
	if err := old.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state = 'CLOSED'`).Scan(&n); err != nil || n != 4 {
		t.Errorf("the store aside holds %d closed tasks (%v), want 4", n, err)
	}
	_ = d2.cmd.Process.Signal(syscall.SIGTERM)
	if code := d2.wait(30 * time.Second); code != 0 {
		t.Errorf("the daemon after the restore exited %d at SIGTERM", code)
	}
}

// TestBackupAndRestoreRefuseBadInput: each refusal is one line, exit 2,
// naming what and where; nothing is made or moved.
func TestBackupAndRestoreRefuseBadInput(t *testing.T) {
	t.Parallel()
	repo := gitRepo(t)
	cfg := writeConfig(t, repo, `
listen: ""
backends:
  s: {type: scripted, steps: [{exit: 0}]}
agents:
  - {name: bob, role: x, backend: s}
`)
	pg := writeConfig(t, t.TempDir(), `
listen: ""
store: postgres://swarmd@db.invalid/swarm
backends:
  s: {type: scripted, steps: [{exit: 0}]}
agents:
  - {name: bob, role: x, backend: s}
`)
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"backup", filepath.Join(dir, "b.db"), "-c", cfg}, "database does not exist"},
		{[]string{"backup", filepath.Join(dir, "b.db"), "-c", pg}, "pg_dump"},
		{[]string{"restore", filepath.Join(dir, "b.db"), "-c", pg}, "pg_restore"},
		{[]string{"restore", filepath.Join(dir, "missing.db"), "-c", cfg}, "no such file"},
		{[]string{"backup", "-c", cfg}, "accepts 1 arg"},
	}
	for _, c := range cases {
		_, stderr, code := runCLI(t, nil, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line saying %q", c.args, code, stderr, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "b.db")); err == nil {
		t.Error("a refused backup made its file")
	}
	if entries, _ := filepath.Glob(filepath.Join(repo, ".swarm", "before-restore-*")); len(entries) != 0 {
		t.Errorf("a refused restore moved the store: %v", entries)
	}
	// A restore killed before it put the copy in place: no daemon starts
	// (the store may be missing, and it would make an empty one).
	cut := filepath.Join(repo, ".swarm", "swarm.db.restoring")
	if err := os.MkdirAll(filepath.Dir(cut), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cut, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runCLI(t, nil, "", "run", "-c", cfg); code != 2 || !strings.Contains(stderr, "a restore was cut short") {
		t.Errorf("run after a restore cut short: exit %d, %q; want 2 and the restore named", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(repo, ".swarm", "swarm.db")); err == nil {
		t.Error("the refused run made a store")
	}
	// Inside a session: an operator command.
	_, stderr, code := runCLI(t, []string{"SWARM_AGENT_ID=bob"}, "", "backup", filepath.Join(dir, "c.db"), "-c", cfg)
	if code != 2 || !strings.Contains(stderr, "operator command") {
		t.Errorf("backup from an agent: exit %d, %q", code, stderr)
	}
}
